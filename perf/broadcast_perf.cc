// sqz-broadcast-perf: nccl-tests' broadcast_perf for Squeeze (host memory).
//
// The root (-r, default 0) sends `count` elements and every rank, the root included, receives
// them; in place, the send and receive buffers are the same. Bus bandwidth is algbw * 1: every
// rank must receive each byte once (nccl-tests doc/PERFORMANCE.md). -a picks the algorithm:
// ring or naive.
#include "common.h"

namespace {

using squeeze::perf::callStream;
using squeeze::perf::CollCounts;
using squeeze::perf::InitArgs;

void broadcastByteCount(size_t count, int /*nranks*/, CollCounts* c) {
  c->sendCount = count;
  c->recvCount = count;
  c->paramCount = count;
  c->sendInplaceOffset = 0;
  c->recvInplaceOffset = 0;
}

void broadcastInitData(const InitArgs& a) {
  // Only the root has input. The others' send buffers are not read, and in place their
  // receive buffer keeps the driver's poison, so data that never arrived is caught.
  if (a.rank == a.root) squeeze::perf::fillPattern(a.input, a.sendCount, 0, a.type, a.root, a.seed);
  squeeze::perf::fillPattern(a.expected, a.recvCount, 0, a.type, a.root, a.seed);
}

double broadcastBusFactor(int /*nranks*/) { return 1.0; }

sqzResult_t broadcastRun(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                         sqzRedOp_t /*op*/, int root, sqzComm_t comm) {
  return sqzBroadcast(sendbuf, recvbuf, count, type, root, comm, callStream());
}

constexpr squeeze::perf::PerfColl kBroadcast = {
    .name = "Broadcast",
    .program = "sqz-broadcast-perf",
    .algoColl = "broadcast",
    .usesOp = false,
    .usesRoot = true,
    .inPlace = true,
    .byteCount = broadcastByteCount,
    .initData = broadcastInitData,
    .busFactor = broadcastBusFactor,
    .run = broadcastRun,
};

}  // namespace

int main(int argc, char** argv) { return squeeze::perf::perfMain(argc, argv, kBroadcast); }
