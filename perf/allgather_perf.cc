// sqz-allgather-perf: nccl-tests' all_gather_perf for Squeeze (host memory).
//
// As in nccl-tests, the size column is the total output (nranks blocks) and the count column
// one rank's block: a size is rounded down to a multiple of nranks elements. In place, each
// rank's send block is its own block of the receive buffer. Bus bandwidth is algbw * (n-1)/n:
// each rank receives the n-1 blocks it does not have (nccl-tests doc/PERFORMANCE.md). -a picks
// the algorithm: ring or naive.
#include "common.h"

namespace {

using squeeze::perf::callStream;
using squeeze::perf::CollCounts;
using squeeze::perf::InitArgs;

void allGatherByteCount(size_t count, int nranks, CollCounts* c) {
  size_t block = count / static_cast<size_t>(nranks);
  c->sendCount = block;
  c->recvCount = block * static_cast<size_t>(nranks);
  c->paramCount = block;
  c->sendInplaceOffset = block;
  c->recvInplaceOffset = 0;
}

void allGatherInitData(const InitArgs& a) {
  const size_t block = a.sendCount, esz = squeeze::perf::typeSize(a.type);
  // Rank r's block holds elements r*block .. of rank r's pattern: both the block's place and
  // the rank it came from show in the values.
  squeeze::perf::fillPattern(a.input, block, static_cast<size_t>(a.rank) * block, a.type, a.rank,
                             a.seed);
  for (int r = 0; r < a.nranks; ++r)
    squeeze::perf::fillPattern(
        static_cast<char*>(a.expected) + static_cast<size_t>(r) * block * esz, block,
        static_cast<size_t>(r) * block, a.type, r, a.seed);
}

double allGatherBusFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

sqzResult_t allGatherRun(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                         sqzRedOp_t /*op*/, int /*root*/, sqzComm_t comm) {
  return sqzAllGather(sendbuf, recvbuf, count, type, comm, callStream());
}

constexpr squeeze::perf::PerfColl kAllGather = {
    .name = "AllGather",
    .program = "sqz-allgather-perf",
    .algoColl = "allgather",
    .usesOp = false,
    .usesRoot = false,
    .inPlace = true,
    .byteCount = allGatherByteCount,
    .initData = allGatherInitData,
    .busFactor = allGatherBusFactor,
    .run = allGatherRun,
};

}  // namespace

int main(int argc, char** argv) { return squeeze::perf::perfMain(argc, argv, kAllGather); }
