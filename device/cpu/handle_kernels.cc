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

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "device/cpu/dispatch.h"
#include "device/cpu/stream_store.h"
#include "device/elementwise.h"
#include "device/reduce.h"

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

// A block's lanes, lane after lane into doubles from 0, as its totals into the tree.
SQZ_INLINE void pushLanes(NormTree& tree, const cpu::Float8& in8, const cpu::Float8& sent8) {
  double in = 0, sent = 0;
  for (int l = 0; l < 8; ++l) {
    in += in8[l];
    sent += sent8[l];
  }
  tree.push(in, sent);
}

// One block of the feedback pass (at most kNormBlock values), in one loop over them:
// residual[i] = residualAfter(residual[i], x[i], d[i]), and |x|^2 and |d|^2 of the block in
// kNormLanes float lanes (the tail into lane 0), whose block totals go into *tree (when not
// null), as gpuFeedbackPass's do. kSentIsInput: d is x (dense), so the sent lanes are the
// input's, bit for bit, and are not summed twice.
// kStreamX: also copy x to streamTo (16-byte aligned) with non-temporal stores (the dense
// codec's payload, written in the same loop).
template <bool kSentIsInput, bool kStreamX = false>
SQZ_INLINE void feedbackBlock(const float* __restrict x, const float* __restrict d, size_t m,
                              float* __restrict residual, NormTree* tree,
                              float* __restrict streamTo = nullptr) {
  static_assert(kNormLanes == 8);
  using cpu::Float8;
  Float8 in8 = {}, sent8 = {};
  size_t i = 0;
  // Float8's operators are the float ones lane by lane (residualAfter and addSquare's order).
  for (; i + 8 <= m; i += 8) {
    const Float8 xv = cpu::loadFloat8(x + i);
    if constexpr (kStreamX) cpu::streamFloat8(streamTo + i, xv);
    const Float8 dv = kSentIsInput ? xv : cpu::loadFloat8(d + i);
    if (residual) cpu::storeFloat8(residual + i, cpu::loadFloat8(residual + i) + (xv - dv));
    in8 = in8 + xv * xv;
    if constexpr (!kSentIsInput) sent8 = sent8 + dv * dv;
  }
  for (; i < m; ++i) {
    if constexpr (kStreamX) streamTo[i] = x[i];
    if (residual) residual[i] = residualAfter(residual[i], x[i], d[i]);
    in8[0] = addSquare(in8[0], x[i]);
    if constexpr (!kSentIsInput) sent8[0] = addSquare(sent8[0], d[i]);
  }
  if (tree) pushLanes(*tree, in8, kSentIsInput ? in8 : sent8);
}

}  // namespace

void cpuFeedbackPass(const float* x, const float* d, size_t n, float* residual, double* inputSq,
                     double* sentSq) {
  const bool norms = inputSq || sentSq;
  if (!residual && !norms) return;
  NormTree tree;
  cpu::dispatch([&]() SQZ_LAMBDA_INLINE {
    for (size_t b = 0; b < n; b += kNormBlock)
      feedbackBlock<false>(x + b, d + b, std::min(kNormBlock, n - b),
                           residual ? residual + b : nullptr, norms ? &tree : nullptr);
  });
  tree.addTo(inputSq, sentSq);
}

void cpuCopyFeedback(const float* x, float* payload, size_t n, float* residual, double* inputSq,
                     double* sentSq) {
  const bool norms = inputSq || sentSq;
  NormTree tree;
  NormTree* t = norms ? &tree : nullptr;
  const bool stream = cpu::streamOutput(n * sizeof(float)) && cpu::streamAligned(payload);
  cpu::dispatch([&]() SQZ_LAMBDA_INLINE {
    for (size_t b = 0; b < n; b += kNormBlock) {
      const size_t m = std::min(kNormBlock, n - b);
      float* e = residual ? residual + b : nullptr;
      if (stream) {
        feedbackBlock<true, true>(x + b, x + b, m, e, t, payload + b);
      } else {
        std::memcpy(payload + b, x + b, m * sizeof(float));
        feedbackBlock<true>(x + b, x + b, m, e, t);
      }
    }
  });
  cpu::streamFence();
  tree.addTo(inputSq, sentSq);
}

namespace {

#if SQZ_CPU_X86
// feedbackBlock's vector step on one row of 8 values x and their decoded d: the residual (when
// not null) and the norm lanes.
__attribute__((target("avx2"), always_inline)) inline void feedbackRow(__m256 xv, __m256 dv,
                                                                       float* residual,
                                                                       __m256& in, __m256& sent) {
  if (residual)
    _mm256_storeu_ps(residual, _mm256_add_ps(_mm256_loadu_ps(residual), _mm256_sub_ps(xv, dv)));
  in = _mm256_add_ps(in, _mm256_mul_ps(xv, xv));
  sent = _mm256_add_ps(sent, _mm256_mul_ps(dv, dv));
}

// float16 rows of the cast's feedback with F16C, 8 values at a time (m / 8 * 8 of them): the
// payload's halves into out, and feedbackBlock's vector loop on x and their widening (the same
// operations in the same lanes, so the same bits as narrow, widen, then feedbackBlock).
// stream: out is 16-byte aligned, and takes non-temporal stores.
__attribute__((target("avx2,f16c"))) size_t halfFeedbackRows(const float* x, size_t m,
                                                             uint16_t* out, float* residual,
                                                             float* in8, float* sent8,
                                                             bool stream) {
  __m256 in = _mm256_loadu_ps(in8), sent = _mm256_loadu_ps(sent8);
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    const __m128i h = _mm256_cvtps_ph(xv, _MM_FROUND_TO_NEAREST_INT);
    if (stream)
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), h);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    const __m256 dv = _mm256_cvtph_ps(h);
    feedbackRow(xv, dv, residual ? residual + i : nullptr, in, sent);
  }
  _mm256_storeu_ps(in8, in);
  _mm256_storeu_ps(sent8, sent);
  return i;
}

// bfloat16 rows, the same way: floatToBfloat16's integer steps and bfloat16ToFloat's shift.
__attribute__((target("avx2"))) size_t bfloat16FeedbackRows(const float* x, size_t m,
                                                            uint16_t* out, float* residual,
                                                            float* in8, float* sent8,
                                                            bool stream) {
  __m256 in = _mm256_loadu_ps(in8), sent = _mm256_loadu_ps(sent8);
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff),
                quiet = _mm256_set1_epi32(0x40), magnitude = _mm256_set1_epi32(0x7fffffff),
                inf = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    const __m256i bits = _mm256_castps_si256(xv);
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, half), _mm256_and_si256(high, one)), 16);
    const __m256i nan = _mm256_or_si256(high, quiet);
    // (x & 0x7fffffff) > 0x7f800000: both sides below 2^31, so the signed compare is right.
    const __m256i isNan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, magnitude), inf);
    const __m256i b = _mm256_blendv_epi8(rounded, nan, isNan);
    // Eight 16-bit values (each below 2^16, so packus keeps them) in the low 128 bits.
    const __m128i h = _mm256_castsi256_si128(
        _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08));
    if (stream)
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), h);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    const __m256 dv = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
    feedbackRow(xv, dv, residual ? residual + i : nullptr, in, sent);
  }
  _mm256_storeu_ps(in8, in);
  _mm256_storeu_ps(sent8, sent);
  return i;
}
#endif

}  // namespace

void cpuCastFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n, float* residual,
                     double* inputSq, double* sentSq) {
  const bool norms = inputSq || sentSq;
  NormTree tree;
  const bool stream = cpu::streamOutput(n * sizeof(uint16_t)) && cpu::streamAligned(payload);
  const bool avx2 = cpu::usesAvx2();
  const bool f16c = kind == Narrow::kHalf && cpuHasF16c() && avx2;
  cpu::dispatch([&]() SQZ_LAMBDA_INLINE {
    float d[kNormBlock];
    for (size_t b = 0; b < n; b += kNormBlock) {
      const size_t m = std::min(kNormBlock, n - b);
      uint16_t* out = payload + b;
      float* e = residual ? residual + b : nullptr;
      // One loop over the block where the narrowing vectorizes (feedbackBlock's lanes and
      // order: its tail below); narrow, widen, then feedbackBlock otherwise.
      cpu::Float8 in8 = {}, sent8 = {};
      size_t done = 0;
#if SQZ_CPU_X86
      if (f16c) done = halfFeedbackRows(x + b, m, out, e, &in8[0], &sent8[0], stream);
      if (kind == Narrow::kBfloat16 && avx2)
        done = bfloat16FeedbackRows(x + b, m, out, e, &in8[0], &sent8[0], stream);
#endif
      if (done == 0) {
        cpuNarrow(kind, x + b, out, m);
        cpuWiden(kind, out, d, m);
        feedbackBlock<false>(x + b, d, m, e, norms ? &tree : nullptr);
      } else {
        for (size_t i = done; i < m; ++i) {
          out[i] = kind == Narrow::kHalf ? floatToHalf(x[b + i]) : floatToBfloat16(x[b + i]);
          const float di = kind == Narrow::kHalf ? halfToFloat(out[i]) : bfloat16ToFloat(out[i]);
          if (e) e[i] = residualAfter(e[i], x[b + i], di);
          in8[0] = addSquare(in8[0], x[b + i]);
          sent8[0] = addSquare(sent8[0], di);
        }
        if (norms) pushLanes(tree, in8, sent8);
      }
    }
  });
  cpu::streamFence();
  tree.addTo(inputSq, sentSq);
}

size_t cpuFirstBadIndex(const uint32_t* idx, size_t m, size_t count) {
  for (size_t j = 0; j < m; ++j)
    if (idx[j] >= count || (j > 0 && idx[j] <= idx[j - 1])) return j;
  return SIZE_MAX;
}

}  // namespace squeeze::device
