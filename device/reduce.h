// The arithmetic interface every backend implements (cpu/ and, with the cuda feature, cuda/):
// type-erased element-wise reduction chosen once per call by (datatype, op), and the final
// division of avg. float16 and bfloat16 are widened to float32, combined, and rounded back
// (nearest even). The per-element math of both backends is device/elementwise.h, which also
// defines the 16-bit conversions (halfToFloat, floatToHalf, bfloat16ToFloat, floatToBfloat16).
#pragma once

#include <cstddef>

#include "base/types.h"
#include "device/elementwise.h"
#include "device/hd.h"
#include "squeeze_config.h"

namespace squeeze::device {

// out[i] = a[i] op b[i] for n elements; out may alias a or b. For RedOp::kAvg this is the sum.
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

ReduceFn cpuReduceFn(DataType dtype, RedOp op);

// buf[i] = buf[i] / divisor, computed in the element type (float16/bfloat16 in float32;
// integers truncate). Used once per element by the rank that finishes an avg.
void cpuDivide(void* buf, size_t n, DataType dtype, int divisor);

// Whether this CPU (and OS) runs AVX with the F16C conversions: picks the float16 kernels.
bool cpuHasF16c();

// ---- the stream all-reduce's reduction (device/stream_allreduce.h) ---------------------------
// Every rank's buffer of one round, in rank order, with the words each rank published to
// describe its call: the reduction first compares every rank's words with its own, and reads
// no buffer unless all agree (a rank in another call, or a call of another size, type or op,
// would otherwise be summed in silently).
constexpr int kMaxReduceRanks = 8;
constexpr int kCallWords = 3;
// What reduceRanks leaves in error[0]: 0 while every round agreed; q + 1 where rank q's words
// differed (error[1..3] then hold them, error[4..6] this rank's); kReleased where the host
// released the stream (a failed communicator), so no later round reads a peer's buffer.
constexpr uint32_t kReleased = 0xffffffffu;
constexpr int kErrorWords = 8;
struct RankInputs {
  const void* in[kMaxReduceRanks];
  const volatile uint32_t* call[kMaxReduceRanks];  // kCallWords each (pinned, mapped memory)
  uint32_t expect[kCallWords];
  volatile uint32_t* error;  // kErrorWords (pinned, mapped memory)
  int nranks;
};

// The rank whose call words differ from `expect` (its index + 1), or 0. Written once for both
// backends.
SQZ_HD inline uint32_t disagreeingRank(const RankInputs& r) {
  for (int q = 0; q < r.nranks; ++q)
    for (int w = 0; w < kCallWords; ++w)
      if (r.call[q][w] != r.expect[w]) return static_cast<uint32_t>(q) + 1;
  return 0;
}

// out[i] = in[0][i] op in[1][i] op ... op in[nranks - 1][i] (then / divisor when divisor > 1),
// unless error[0] is set or the call words disagree (then out is untouched and error says why).
// out may not overlap an input.
void cpuReduceRanks(DataType dtype, RedOp op, void* out, const RankInputs& r, size_t n,
                    int divisor);

#if SQZ_HAVE_CUDA
// ---- CUDA twins (device/cuda/reduce.cu) -------------------------------------------------------
// The same results as the cpu* functions bit for bit, enqueued on `stream` (no synchronization);
// n == 0 enqueues nothing. Pointers are device memory or pinned, mapped host memory (unified
// addressing). Throw Error(kCuda) when the launch fails. Thread-safe.

// out[i] = a[i] op b[i]; out may alias a or b (exactly, not partially).
void gpuReduce(DataType dtype, RedOp op, void* out, const void* a, const void* b, size_t n,
               GpuStream stream);
// cpuDivide's buf[i] / divisor.
void gpuDivide(void* buf, size_t n, DataType dtype, int divisor, GpuStream stream);
// cpuReduceRanks in one pass: each element's inputs folded in rank order, one store.
void gpuReduceRanks(DataType dtype, RedOp op, void* out, const RankInputs& r, size_t n,
                    int divisor, GpuStream stream);
#endif

}  // namespace squeeze::device
