// sqz-reducescatter-perf: nccl-tests' reduce_scatter_perf for Squeeze (host memory).
//
// As in nccl-tests, the size column is the total input (nranks blocks) and the count column one
// rank's block of the result: a size is rounded down to a multiple of nranks elements. In place,
// each rank's result lands in its own block of the send buffer. Bus bandwidth is
// algbw * (n-1)/n: each rank receives n-1 partial blocks (nccl-tests doc/PERFORMANCE.md). -a
// picks the algorithm: ring or naive.
#include "common.h"

namespace {

using squeeze::perf::callStream;
using squeeze::perf::CollCounts;
using squeeze::perf::InitArgs;

void reduceScatterByteCount(size_t count, int nranks, CollCounts* c) {
  size_t block = count / static_cast<size_t>(nranks);
  c->sendCount = block * static_cast<size_t>(nranks);
  c->recvCount = block;
  c->paramCount = block;
  c->sendInplaceOffset = 0;
  c->recvInplaceOffset = block;
}

void reduceScatterInitData(const InitArgs& a) {
  squeeze::perf::fillInput(a.input, a.sendCount, 0, a.type, a.op, a.rank, a.nranks, a.seed);
  squeeze::perf::fillReduced(a.expected, a.recvCount, static_cast<size_t>(a.rank) * a.recvCount,
                             a.type, a.op, a.nranks, a.seed);
}

double reduceScatterBusFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

sqzResult_t reduceScatterRun(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                             sqzRedOp_t op, int /*root*/, sqzComm_t comm) {
  return sqzReduceScatter(sendbuf, recvbuf, count, type, op, comm, callStream());
}

constexpr squeeze::perf::PerfColl kReduceScatter = {
    .name = "ReduceScatter",
    .program = "sqz-reducescatter-perf",
    .algoColl = "reducescatter",
    .usesOp = true,
    .usesRoot = false,
    .inPlace = true,
    .byteCount = reduceScatterByteCount,
    .initData = reduceScatterInitData,
    .busFactor = reduceScatterBusFactor,
    .run = reduceScatterRun,
};

}  // namespace

int main(int argc, char** argv) { return squeeze::perf::perfMain(argc, argv, kReduceScatter); }
