// sqz-allreduce-perf: nccl-tests' all_reduce_perf for Squeeze (host memory).
//
// Every rank sends and receives `count` elements; in place, the send and receive buffers are
// the same. Bus bandwidth is algbw * 2(n-1)/n: a ring all-reduce moves each byte 2(n-1)/n times
// over each rank's link (nccl-tests doc/PERFORMANCE.md), so busbw can be compared with the link
// speed whatever the rank count. -a picks the algorithm: naive, ps, ring, rhd or tree. -z SPEC
// times sqzAllReduceCompressed through that codec instead (float, sum or avg; see bench_codec.cc);
// busbw then stays the logical one, of the dense bytes.
#include "common.h"

namespace {

using squeeze::perf::callStream;
using squeeze::perf::CollCounts;
using squeeze::perf::InitArgs;

void allReduceByteCount(size_t count, int /*nranks*/, CollCounts* c) {
  c->sendCount = count;
  c->recvCount = count;
  c->paramCount = count;
  c->sendInplaceOffset = 0;
  c->recvInplaceOffset = 0;
}

void allReduceInitData(const InitArgs& a) {
  squeeze::perf::fillInput(a.input, a.sendCount, 0, a.type, a.op, a.rank, a.nranks, a.seed);
  squeeze::perf::fillReduced(a.expected, a.recvCount, 0, a.type, a.op, a.nranks, a.seed);
}

sqzResult_t allReduceRunCompressed(const void* sendbuf, void* recvbuf, size_t count,
                                   sqzDataType_t type, sqzRedOp_t op, sqzCodec_t codec,
                                   sqzComm_t comm) {
  return sqzAllReduceCompressed(sendbuf, recvbuf, count, type, op, codec, comm, callStream());
}

double allReduceBusFactor(int nranks) { return 2.0 * (nranks - 1) / nranks; }

sqzResult_t allReduceRun(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                         sqzRedOp_t op, int /*root*/, sqzComm_t comm) {
  return sqzAllReduce(sendbuf, recvbuf, count, type, op, comm, callStream());
}

constexpr squeeze::perf::PerfColl kAllReduce = {
    .name = "AllReduce",
    .program = "sqz-allreduce-perf",
    .algoColl = "allreduce",
    .usesOp = true,
    .usesRoot = false,
    .inPlace = true,
    .byteCount = allReduceByteCount,
    .initData = allReduceInitData,
    .busFactor = allReduceBusFactor,
    .run = allReduceRun,
    .runCompressed = allReduceRunCompressed,
};

}  // namespace

int main(int argc, char** argv) { return squeeze::perf::perfMain(argc, argv, kAllReduce); }
