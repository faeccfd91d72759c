// sqz-reduce-perf: nccl-tests' reduce_perf for Squeeze (host memory).
//
// Every rank sends `count` elements and the root (-r, default 0) receives their reduction; in
// place, the send and receive buffers are the same. The other ranks' receive buffers must stay
// as they were (checked, as nccl-tests does). Bus bandwidth is algbw * 1: the root must receive
// each byte's reduction once (nccl-tests doc/PERFORMANCE.md). -a picks the algorithm: ring or
// naive.
#include <cstring>

#include "common.h"

namespace {

using squeeze::perf::callStream;
using squeeze::perf::CollCounts;
using squeeze::perf::InitArgs;

void reduceByteCount(size_t count, int /*nranks*/, CollCounts* c) {
  c->sendCount = count;
  c->recvCount = count;
  c->paramCount = count;
  c->sendInplaceOffset = 0;
  c->recvInplaceOffset = 0;
}

void reduceInitData(const InitArgs& a) {
  squeeze::perf::fillInput(a.input, a.sendCount, 0, a.type, a.op, a.rank, a.nranks, a.seed);
  if (a.rank == a.root) {
    squeeze::perf::fillReduced(a.expected, a.recvCount, 0, a.type, a.op, a.nranks, a.seed);
  } else {
    // Untouched: the poison out of place, this rank's own input in place.
    std::memcpy(a.expected, a.output, a.recvCount * squeeze::perf::typeSize(a.type));
  }
}

double reduceBusFactor(int /*nranks*/) { return 1.0; }

sqzResult_t reduceRun(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                      sqzRedOp_t op, int root, sqzComm_t comm) {
  return sqzReduce(sendbuf, recvbuf, count, type, op, root, comm, callStream());
}

constexpr squeeze::perf::PerfColl kReduce = {
    .name = "Reduce",
    .program = "sqz-reduce-perf",
    .algoColl = "reduce",
    .usesOp = true,
    .usesRoot = true,
    .inPlace = true,
    .byteCount = reduceByteCount,
    .initData = reduceInitData,
    .busFactor = reduceBusFactor,
    .run = reduceRun,
};

}  // namespace

int main(int argc, char** argv) { return squeeze::perf::perfMain(argc, argv, kReduce); }
