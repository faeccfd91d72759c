// sqz-alltoall-perf: nccl-tests' alltoall_perf for Squeeze (host memory).
//
// As in nccl-tests, the size column is what each rank sends (nranks blocks, the same as it
// receives) and the count column one block, the count argument of sqzAlltoAll: a size is rounded
// down to a multiple of nranks elements. sqzAlltoAll does not run in place, so the in-place
// columns show N/A. Bus bandwidth is algbw * (n-1)/n: each rank sends n-1 of its blocks over
// its links (nccl-tests doc/PERFORMANCE.md). -a picks the algorithm: naive.
#include "common.h"

namespace {

using squeeze::perf::callStream;
using squeeze::perf::CollCounts;
using squeeze::perf::InitArgs;

void alltoAllByteCount(size_t count, int nranks, CollCounts* c) {
  size_t block = count / static_cast<size_t>(nranks);
  c->sendCount = block * static_cast<size_t>(nranks);
  c->recvCount = block * static_cast<size_t>(nranks);
  c->paramCount = block;
  c->sendInplaceOffset = 0;
  c->recvInplaceOffset = 0;
}

void alltoAllInitData(const InitArgs& a) {
  const size_t block = a.sendCount / static_cast<size_t>(a.nranks);
  const size_t esz = squeeze::perf::typeSize(a.type);
  // Rank r's send buffer is its pattern at elements 0 .. nranks*block: block p goes to rank p,
  // so rank `rank` receives, from each rank p, p's pattern at elements rank*block ...
  squeeze::perf::fillPattern(a.input, a.sendCount, 0, a.type, a.rank, a.seed);
  for (int p = 0; p < a.nranks; ++p)
    squeeze::perf::fillPattern(
        static_cast<char*>(a.expected) + static_cast<size_t>(p) * block * esz, block,
        static_cast<size_t>(a.rank) * block, a.type, p, a.seed);
}

double alltoAllBusFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

sqzResult_t alltoAllRun(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                        sqzRedOp_t /*op*/, int /*root*/, sqzComm_t comm) {
  return sqzAlltoAll(sendbuf, recvbuf, count, type, comm, callStream());
}

constexpr squeeze::perf::PerfColl kAlltoAll = {
    .name = "AlltoAll",
    .program = "sqz-alltoall-perf",
    .algoColl = "alltoall",
    .usesOp = false,
    .usesRoot = false,
    .inPlace = false,
    .byteCount = alltoAllByteCount,
    .initData = alltoAllInitData,
    .busFactor = alltoAllBusFactor,
    .run = alltoAllRun,
};

}  // namespace

int main(int argc, char** argv) { return squeeze::perf::perfMain(argc, argv, kAlltoAll); }
