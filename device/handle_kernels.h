// The per-element passes of the codec handles (compress/handle.cc, dgc.cc) and the small device
// helpers the chunk codecs need on a device call (compress/*.cc): error feedback's x = g + e,
// DGC's momentum correction and masking, the generic error-feedback pass of Codec::encodeFeedback,
// and the check of a sparse payload's index list.
//
// The per-element math is written once below (SQZ_HD) and used by the CPU loops of
// device/cpu/handle_kernels.cc and by the kernels in device/cuda/handle_kernels.cu, so a device
// call does the same float operations, in the same order, as a host call: the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/cast.h"
#include "device/elementwise.h"
#include "device/hd.h"
#include "squeeze_config.h"

namespace squeeze::device {

// ---- shared math -----------------------------------------------------------------------------

// Error feedback's input: x = g + e (the residual is then cleared).
SQZ_HD_INLINE float withResidual(float g, float e) { return addRn(g, e); }

// DGC's momentum correction for one element (compress/dgc.cc): u <- m u + g, where g is first
// scaled by the clipping factor unless that is 1; returns the velocity v + u the call sends.
SQZ_HD_INLINE float dgcAccumulate(float g, float scale, float m, float& u, float v) {
  const float gi = scale == 1.0f ? g : mulRn(g, scale);
  u = addRn(mulRn(m, u), gi);
  return addRn(v, u);
}

// DGC's momentum masking: element i was sent in full by this rank's encodes when it was not 0
// going in and nothing of it came back to the velocity.
SQZ_HD_INLINE bool dgcSentInFull(uint8_t nonzero, float v) { return nonzero && v == 0.0f; }

// One term of a squared norm in float: acc + v * v.
SQZ_HD_INLINE float addSquare(float acc, float v) { return addRn(acc, mulRn(v, v)); }

// Codec::encodeFeedback's norms are summed per block of kNormBlock values in kNormLanes float
// lanes (vectorizes on the CPU); each block's lanes, lane after lane, into a double from 0 (the
// block's total); then the blocks' totals in NormTree's order.
constexpr size_t kNormBlock = 1024;
constexpr int kNormLanes = 8;

// The blocks' totals of a pass added in a fixed pairwise tree: blocks 2i and 2i + 1 (left +
// right), level after level, an odd last one carried up a level as it is. A GPU adds each level
// in parallel (handle_kernels.cu's normTreeKernel); the CPU as it streams, keeping one entry per
// level: merging two entries of equal size as soon as there are two, and at the end the rest
// from the right, gives the same tree (the left part of a tree over B blocks is the perfect
// tree over the largest power of two below B; tests/unit/norm_tree_test.cc checks it against
// the level order). So host and device get the same bits, and neither adds in one long chain.
class NormTree {
 public:
  // The next block's totals (blocks in order).
  void push(double in, double sent) {
    Node node{in, sent, 1};
    while (depth_ > 0 && nodes_[depth_ - 1].size == node.size) {
      const Node& left = nodes_[--depth_];
      node = {left.in + node.in, left.sent + node.sent, 2 * node.size};
    }
    nodes_[depth_++] = node;
  }
  // The tree's two sums (0 without a block), added to *inputSq and *sentSq (each when not null).
  void addTo(double* inputSq, double* sentSq) const {
    if (depth_ == 0) return;
    double in = nodes_[depth_ - 1].in, sent = nodes_[depth_ - 1].sent;
    for (int i = depth_ - 2; i >= 0; --i) {
      in = nodes_[i].in + in;
      sent = nodes_[i].sent + sent;
    }
    if (inputSq) *inputSq += in;
    if (sentSq) *sentSq += sent;
  }

 private:
  struct Node {
    double in, sent;
    uint64_t size;  // blocks under it: a power of two, halving from the first node on
  };
  Node nodes_[64];
  int depth_ = 0;
};

// ---- CPU (device/cpu/handle_kernels.cc) -----------------------------------------------------

// x[i] = withResidual(g[i], e[i]), e[i] = 0; x may alias g.
void cpuAddResidual(const float* g, float* e, float* x, size_t n);

// DGC's prepare: x[i] = dgcAccumulate(g[i], scale, m, u[i], v[i]), v[i] = 0, nonzero[i] =
// x[i] != 0; x may alias g.
void cpuDgcPrepare(const float* g, float scale, float m, float* u, float* v, float* x,
                   uint8_t* nonzero, size_t n);
// DGC's masking: u[i] = 0 where dgcSentInFull(nonzero[i], v[i]).
void cpuDgcMask(float* u, const float* v, const uint8_t* nonzero, size_t n);

// Codec::encodeFeedback's pass after the decode: residual[i] = residualAfter(residual[i],
// x[i], d[i]) when residual is not null; |x|^2 and |d|^2 summed in kNormLanes float lanes per
// block of kNormBlock values, the blocks' totals in NormTree's order, and those two sums added
// to *inputSq and *sentSq (each when not null). x and d do not overlap residual.
void cpuFeedbackPass(const float* x, const float* d, size_t n, float* residual, double* inputSq,
                     double* sentSq);
// The dense codec's encode with feedback in one pass: payload[i] = x[i], then exactly
// cpuFeedbackPass(x, payload, ...) (residual + (x - x): -0 becomes +0, inf and NaN give NaN).
// payload does not overlap x or residual.
void cpuCopyFeedback(const float* x, float* payload, size_t n, float* residual, double* inputSq,
                     double* sentSq);
// A cast codec's encode with feedback in one pass: payload[i] = cpuNarrow's, then exactly
// cpuFeedbackPass(x, d, ...) with d[i] = cpuWiden's of payload[i], one norm block at a time (d
// is never stored whole). The twin of gpuCastFeedback.
void cpuCastFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n, float* residual,
                     double* inputSq, double* sentSq);

// The first j < m with idx[j] >= count or (j > 0 and idx[j] <= idx[j - 1]), or SIZE_MAX when
// the list is in range and strictly ascending.
size_t cpuFirstBadIndex(const uint32_t* idx, size_t m, size_t count);

#if SQZ_HAVE_CUDA
// ---- CUDA (device/cuda/handle_kernels.cu) ------------------------------------------------------
// The cpu* twin's results bit for bit (the norms too: the same lanes and order), plus the stream
// the work runs on. Pointers are device memory or pinned, mapped host memory. Functions that
// return a value or write to host memory synchronize the stream; the others only enqueue.
// n == 0 enqueues nothing. Throw Error(kCuda) on a CUDA failure. Thread-safe (scratch is per
// thread and device).

void gpuAddResidual(const float* g, float* e, float* x, size_t n, GpuStream stream);
// deviceScale (device memory, read when the kernel runs) in place of scale where not null.
void gpuDgcPrepare(const float* g, float scale, float m, float* u, float* v, float* x,
                   uint8_t* nonzero, size_t n, GpuStream stream,
                   const float* deviceScale = nullptr);
void gpuDgcMask(float* u, const float* v, const uint8_t* nonzero, size_t n, GpuStream stream);
// Synchronizes when inputSq or sentSq is not null and deviceSums is: deviceSums (two doubles in
// device memory) gets the pass's two sums (each in the CPU's order from 0) added on the device
// instead, and nothing waits; *inputSq and *sentSq are left to whoever reads them back.
void gpuFeedbackPass(const float* x, const float* d, size_t n, float* residual, double* inputSq,
                     double* sentSq, double* deviceSums, GpuStream stream);
// The dense codec's encode with feedback in one pass: cpuCopyFeedback's bits (payload = x, the
// residual as residualAfter(r, x, x), stored only where that changes its bits: -0 and non-finite
// x), one kernel besides the norms' tree. Waits as gpuFeedbackPass.
void gpuCopyFeedback(const float* x, float* payload, size_t n, float* residual, double* inputSq,
                     double* sentSq, double* deviceSums, GpuStream stream);
// A cast codec's encode with feedback in one pass: payload[i] = narrow(x[i]), then exactly
// gpuFeedbackPass(x, d, ...) with d[i] = widen(payload[i]), which is never stored (the CPU's
// twin is cpuNarrow, cpuWiden and cpuFeedbackPass). Waits as gpuFeedbackPass.
void gpuCastFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n, float* residual,
                     double* inputSq, double* sentSq, double* deviceSums, GpuStream stream);
// Reads idx[0..m) only. Synchronizes.
size_t gpuFirstBadIndex(const uint32_t* idx, size_t m, size_t count, GpuStream stream);
// The same into found[0] (device memory; ~0 for none), and idx[found[0]] into found[1] (~0 for
// none), enqueued only: nothing waits.
void gpuFindBadIndex(const uint32_t* idx, size_t m, size_t count, unsigned long long* found,
                     GpuStream stream);

#endif

}  // namespace squeeze::device
