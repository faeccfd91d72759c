// CPU kernels of device/handle_kernels.h: the codec handles' per-element passes and the index
// check of sparse payloads. Each element goes through the header's SQZ_HD math, as in the CUDA
// kernels, so host and device calls give the same bits; the loops are plain so GCC vectorizes
// them (x may alias g, so no __restrict there). The feedback passes run one norm block at a
// time, everything a block needs done while it is in L1, as baseline or AVX2 code
// (device/cpu/dispatch.h): the same bits either way.
#include "device/handle_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "device/cpu/dispatch.h"

namespace squeeze::device {

void cpuAddResidual(const float* g, float* e, float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float xi = withResidual(g[i], e[i]);
    e[i] = 0.0f;
    x[i] = xi;
  }
}

void cpuDgcPrepare(const float* g, float scale, float m, float* u, float* v, float* x,
                   uint8_t* nonzero, size_t n) {
  // x may alias g: each element is read before it is written.
  for (size_t i = 0; i < n; ++i) {
    const float xi = dgcAccumulate(g[i], scale, m, u[i], v[i]);
    v[i] = 0.0f;
    x[i] = xi;
    nonzero[i] = xi != 0.0f;
  }
}

void cpuDgcMask(float* u, const float* v, const uint8_t* nonzero, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (dgcSentInFull(nonzero[i], v[i])) u[i] = 0.0f;
}

namespace {

// One block of the feedback pass (at most kNormBlock values), in one loop over them:
// residual[i] = residualAfter(residual[i], x[i], d[i]), and |x|^2 and |d|^2 of the block in
// kNormLanes float lanes (the tail into lane 0), added lane after lane into *in and *sent (when
// in is not null); gpuFeedbackPass's lanes add up in this order too. kSentIsInput: d is x
// (dense), so the sent lanes are the input's, bit for bit, and are not summed twice.
template <bool kSentIsInput>
SQZ_INLINE void feedbackBlock(const float* __restrict x, const float* __restrict d, size_t m,
                              float* __restrict residual, double* in, double* sent) {
  static_assert(kNormLanes == 8);
  using cpu::Float8;
  Float8 in8 = {}, sent8 = {};
  size_t i = 0;
  // Float8's operators are the float ones lane by lane (residualAfter and addSquare's order).
  for (; i + 8 <= m; i += 8) {
    const Float8 xv = cpu::loadFloat8(x + i);
    const Float8 dv = kSentIsInput ? xv : cpu::loadFloat8(d + i);
    if (residual) cpu::storeFloat8(residual + i, cpu::loadFloat8(residual + i) + (xv - dv));
    in8 = in8 + xv * xv;
    if constexpr (!kSentIsInput) sent8 = sent8 + dv * dv;
  }
  for (; i < m; ++i) {
    if (residual) residual[i] = residualAfter(residual[i], x[i], d[i]);
    in8[0] = addSquare(in8[0], x[i]);
    if constexpr (!kSentIsInput) sent8[0] = addSquare(sent8[0], d[i]);
  }
  if (!in) return;
  for (int l = 0; l < 8; ++l) {
    *in += in8[l];
    *sent += kSentIsInput ? in8[l] : sent8[l];
  }
}

// The norms' sums from 0, added to the caller's at the end (each when asked for).
SQZ_INLINE void addNorms(double in, double sent, double* inputSq, double* sentSq) {
  if (inputSq) *inputSq += in;
  if (sentSq) *sentSq += sent;
}

}  // namespace

void cpuFeedbackPass(const float* x, const float* d, size_t n, float* residual, double* inputSq,
                     double* sentSq) {
  const bool norms = inputSq || sentSq;
  if (!residual && !norms) return;
  double in = 0, sent = 0;
  cpu::dispatch([&]() SQZ_LAMBDA_INLINE {
    for (size_t b = 0; b < n; b += kNormBlock)
      feedbackBlock<false>(x + b, d + b, std::min(kNormBlock, n - b),
                           residual ? residual + b : nullptr, norms ? &in : nullptr, &sent);
  });
  addNorms(in, sent, inputSq, sentSq);
}

void cpuCopyFeedback(const float* x, float* payload, size_t n, float* residual, double* inputSq,
                     double* sentSq) {
  const bool norms = inputSq || sentSq;
  double in = 0, sent = 0;
  cpu::dispatch([&]() SQZ_LAMBDA_INLINE {
    for (size_t b = 0; b < n; b += kNormBlock) {
      const size_t m = std::min(kNormBlock, n - b);
      std::memcpy(payload + b, x + b, m * sizeof(float));
      feedbackBlock<true>(x + b, x + b, m, residual ? residual + b : nullptr, norms ? &in : nullptr,
                          &sent);
    }
  });
  addNorms(in, sent, inputSq, sentSq);
}

void cpuCastFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n, float* residual,
                     double* inputSq, double* sentSq) {
  const bool norms = inputSq || sentSq;
  double in = 0, sent = 0;
  cpu::dispatch([&]() SQZ_LAMBDA_INLINE {
    float d[kNormBlock];
    for (size_t b = 0; b < n; b += kNormBlock) {
      const size_t m = std::min(kNormBlock, n - b);
      cpuNarrow(kind, x + b, payload + b, m);
      cpuWiden(kind, payload + b, d, m);
      feedbackBlock<false>(x + b, d, m, residual ? residual + b : nullptr, norms ? &in : nullptr,
                           &sent);
    }
  });
  addNorms(in, sent, inputSq, sentSq);
}

size_t cpuFirstBadIndex(const uint32_t* idx, size_t m, size_t count) {
  for (size_t j = 0; j < m; ++j)
    if (idx[j] >= count || (j > 0 && idx[j] <= idx[j - 1])) return j;
  return SIZE_MAX;
}

}  // namespace squeeze::device
