// sqz-sendrecv-perf: nccl-tests' sendrecv_perf for Squeeze (host memory, or -d cuda).
//
// Each rank r sends `count` elements to (r+1)%n and receives as many from (r-1+n)%n, the two
// calls inside one sqzGroupStart/sqzGroupEnd (a ring shift; on one rank, a copy to itself). Bus
// bandwidth is algbw * 1. There is no algorithm to choose, so -a is rejected; the algo column
// shows "p2p" ("stream" for device buffers of ranks on one host: device/stream_collectives.h).
//
// nccl-tests also runs it "in place", sending from and receiving into the same buffer: the
// library stages such a receive and copies it in once the send has read the buffer (on the
// stream, chunk by chunk after the send has taken it).
#include "common.h"

namespace {

using squeeze::perf::callStream;
using squeeze::perf::CollCounts;
using squeeze::perf::InitArgs;

void sendRecvByteCount(size_t count, int /*nranks*/, CollCounts* c) {
  c->sendCount = count;
  c->recvCount = count;
  c->paramCount = count;
  c->sendInplaceOffset = 0;
  c->recvInplaceOffset = 0;
}

void sendRecvInitData(const InitArgs& a) {
  const int prev = (a.rank - 1 + a.nranks) % a.nranks;
  squeeze::perf::fillPattern(a.input, a.sendCount, 0, a.type, a.rank, a.seed);
  squeeze::perf::fillPattern(a.expected, a.recvCount, 0, a.type, prev, a.seed);
}

double sendRecvBusFactor(int /*nranks*/) { return 1.0; }

sqzResult_t sendRecvRun(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                        sqzRedOp_t /*op*/, int /*root*/, sqzComm_t comm) {
  int rank = 0, nranks = 1;
  sqzResult_t r = sqzCommUserRank(comm, &rank);
  if (r == sqzSuccess) r = sqzCommCount(comm, &nranks);
  if (r != sqzSuccess) return r;
  r = sqzGroupStart();
  if (r != sqzSuccess) return r;
  // Both calls are queued even when one fails, so the group always ends.
  sqzResult_t s = sqzSend(sendbuf, count, type, (rank + 1) % nranks, comm, callStream());
  sqzResult_t v = sqzRecv(recvbuf, count, type, (rank - 1 + nranks) % nranks, comm, callStream());
  sqzResult_t e = sqzGroupEnd();
  return s != sqzSuccess ? s : v != sqzSuccess ? v : e;
}

constexpr squeeze::perf::PerfColl kSendRecv = {
    .name = "SendRecv",
    .program = "sqz-sendrecv-perf",
    .algoColl = nullptr,
    .usesOp = false,
    .usesRoot = false,
    .inPlace = true,
    .byteCount = sendRecvByteCount,
    .initData = sendRecvInitData,
    .busFactor = sendRecvBusFactor,
    .run = sendRecvRun,
};

}  // namespace

int main(int argc, char** argv) { return squeeze::perf::perfMain(argc, argv, kSendRecv); }
