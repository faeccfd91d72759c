// CPU cast kernels (see device/cast.h). float16 uses F16C when the CPU has it (8 lanes); the
// scalar path rounds identically, so results do not depend on the CPU.
#include "device/cast.h"

#include <immintrin.h>

#include <cstring>

#include "device/reduce.h"

namespace squeeze::device {
namespace {

__attribute__((target("avx,f16c"))) size_t narrowHalfF16c(const float* in, uint16_t* out,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  return i;
}

__attribute__((target("avx,f16c"))) size_t widenAddHalfF16c(float* out, const float* local,
                                                             const uint16_t* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 w = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(local + i), w));
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t widenHalfF16c(const uint16_t* in, float* out,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  return i;
}

// bfloat16 in branch-free bit arithmetic, so the loops vectorize; the same results as
// device::floatToBfloat16 / bfloat16ToFloat (round to nearest even, NaN stays NaN).
inline float bf16Widen(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t bf16Narrow(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

}  // namespace

void cpuNarrow(Narrow kind, const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  if (kind == Narrow::kHalf) {
    if (cpuHasF16c()) i = narrowHalfF16c(in, out, n);
    for (; i < n; ++i) out[i] = floatToHalf(in[i]);
  } else {
    for (; i < n; ++i) out[i] = bf16Narrow(in[i]);
  }
}

void cpuWiden(Narrow kind, const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  if (kind == Narrow::kHalf) {
    if (cpuHasF16c()) i = widenHalfF16c(in, out, n);
    for (; i < n; ++i) out[i] = halfToFloat(in[i]);
  } else {
    for (; i < n; ++i) out[i] = bf16Widen(in[i]);
  }
}

void cpuWidenAdd(Narrow kind, float* out, const float* local, const uint16_t* in, size_t n) {
  size_t i = 0;
  if (kind == Narrow::kHalf) {
    if (cpuHasF16c()) i = widenAddHalfF16c(out, local, in, n);
    for (; i < n; ++i) out[i] = local[i] + halfToFloat(in[i]);
  } else {
    for (; i < n; ++i) out[i] = local[i] + bf16Widen(in[i]);
  }
}

}  // namespace squeeze::device
