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

// ---- the stream collectives' check and reduction (device/stream_collectives.h) -----------------
// A round first checks the words each rank published to describe its call against this rank's
// (one small kernel, which reads them from host memory), and leaves its verdict in device memory;
// the reductions and copies of the round read only the verdict and touch nothing unless every
// rank agrees (a rank in another call, or a call of another size, type, op or root, would
// otherwise be summed in silently).
constexpr int kMaxReduceRanks = 8;
constexpr int kCallWords = 4;
// What the check leaves in error[0] and in the verdict: 0 while every round agreed; q + 1 where
// rank q's words differed (error[1..4] then hold them, error[5..8] this rank's); kReleased where
// the host released the stream (a failed communicator), so no later round reads a peer's buffer.
constexpr uint32_t kReleased = 0xffffffffu;
constexpr int kErrorWords = 1 + 2 * kCallWords;
struct CallCheck {
  const volatile uint32_t* call[kMaxReduceRanks];  // kCallWords each (pinned, mapped memory)
  uint32_t expect[kCallWords];
  volatile uint32_t* error;  // kErrorWords (pinned, mapped memory), sticky
  int nranks;
};

// The rank whose call words differ from `expect` (its index + 1), or 0. Written once for both
// backends.
SQZ_HD inline uint32_t disagreeingRank(const CallCheck& c) {
  for (int q = 0; q < c.nranks; ++q)
    for (int w = 0; w < kCallWords; ++w)
      if (c.call[q][w] != c.expect[w]) return static_cast<uint32_t>(q) + 1;
  return 0;
}

// Unless error[0] is already set: compares every rank's words, and where one differs writes its
// words, this rank's and then error[0]. *verdict (device memory) = error[0] afterwards. With
// nranks 0 nothing is compared: the verdict is the error word as it stands (a gate before a round
// writes anything its peers read).
void cpuCheckCalls(const CallCheck& c, uint32_t* verdict);

// What a round tells its peers (published, reduced; a message's words and sent), stored into
// pinned, mapped host memory only where *verdict == 0: a stream that was released (its
// communicator failed) or whose check failed publishes nothing, so no peer reads a window its
// owner no longer guards (its waits were moved past, its data no longer written). The last
// `signals` words (what peers wait on) are stored after the others, and all after what the
// stream wrote before.
constexpr int kMaxPublishWords = 16;
struct PublishWords {
  volatile uint32_t* word[kMaxPublishWords];
  uint32_t value[kMaxPublishWords];
  int count;
  int signals;
  const uint32_t* verdict;  // device memory
};
void cpuPublishWords(const PublishWords& p);

// The inputs of a reduction (nranks of them, folded in index order) and the round's verdict.
struct RankInputs {
  const void* in[kMaxReduceRanks];
  int nranks;
  const uint32_t* verdict;  // device memory; the reduction runs only where it is 0
};

// out[i] = in[0][i] op in[1][i] op ... op in[nranks - 1][i] (then / divisor when divisor > 1);
// with one input, a copy. Nothing when *verdict != 0. out may not overlap an input.
void cpuReduceRanks(DataType dtype, RedOp op, void* out, const RankInputs& r, size_t n,
                    int divisor);

// A small round in two launches instead of four or five: where a round moves few bytes
// (kSmallRoundBytes), a launch costs more than the copy or fold it runs, so one block does the
// round's gate, copies and publish, and one its check and first fold, with the results of the
// separate calls in the same order.
constexpr size_t kSmallRoundBytes = 32 << 10;
constexpr int kMaxRoundCopies = kMaxReduceRanks;
struct RoundCopies {
  void* dst[kMaxRoundCopies];
  const void* src[kMaxRoundCopies];
  size_t bytes[kMaxRoundCopies];
  int count;
};
// *verdict = error[0] (the gate); then, where it is 0, dst = src for each copy (no overlaps),
// then the words as cpuPublishWords stores them (p.verdict must be `verdict`; p.count may be 0).
void cpuGatedCopyPublish(const volatile uint32_t* error, uint32_t* verdict,
                         const RoundCopies& copies, const PublishWords& p);
// cpuCheckCalls(c, verdict), then cpuReduceRanks (r.verdict must be `verdict`).
void cpuCheckReduceRanks(const CallCheck& c, uint32_t* verdict, DataType dtype, RedOp op,
                         void* out, const RankInputs& r, size_t n, int divisor);
// The checks both backends' entries make of these arguments (an internal error where one is out
// of range: copies, words or ranks past their arrays, another verdict).
void checkSmallRound(const RoundCopies& copies, const PublishWords& p, const uint32_t* verdict);
void checkRanksFold(const CallCheck& c, const RankInputs& r, const uint32_t* verdict);

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
// cpuCheckCalls, one block.
void gpuCheckCalls(const CallCheck& c, uint32_t* verdict, GpuStream stream);
// cpuPublishWords, one warp.
void gpuPublishWords(const PublishWords& p, GpuStream stream);
// cpuReduceRanks in one pass: each element's inputs folded in rank order, one store.
void gpuReduceRanks(DataType dtype, RedOp op, void* out, const RankInputs& r, size_t n,
                    int divisor, GpuStream stream);
// cpuGatedCopyPublish and cpuCheckReduceRanks, one block each (for at most kSmallRoundBytes a
// copy or input: one block moves them in a few strides).
void gpuGatedCopyPublish(const volatile uint32_t* error, uint32_t* verdict,
                         const RoundCopies& copies, const PublishWords& p, GpuStream stream);
void gpuCheckReduceRanks(const CallCheck& c, uint32_t* verdict, DataType dtype, RedOp op,
                         void* out, const RankInputs& r, size_t n, int divisor,
                         GpuStream stream);
#endif

}  // namespace squeeze::device
