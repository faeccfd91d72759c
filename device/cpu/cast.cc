// CPU cast kernels (see device/cast.h). float16 uses F16C when the CPU has it (8 lanes); the
// scalar path (device/elementwise.h's conversions, also the CUDA kernels') rounds identically,
// so results do not depend on the CPU. bfloat16's conversions are branch-free and vectorize, as
// AVX2 code where the CPU has it (device/cpu/dispatch.h).
#include "device/cast.h"

#include <immintrin.h>

#include "device/cpu/dispatch.h"
#include "device/elementwise.h"
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

}  // namespace

void cpuNarrow(Narrow kind, const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  if (kind == Narrow::kHalf) {
    if (cpuHasF16c()) i = narrowHalfF16c(in, out, n);
    for (; i < n; ++i) out[i] = floatToHalf(in[i]);
  } else {
    cpu::dispatch([&]() SQZ_LAMBDA_INLINE {
      for (size_t j = 0; j < n; ++j) out[j] = floatToBfloat16(in[j]);
    });
  }
}

void cpuWiden(Narrow kind, const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  if (kind == Narrow::kHalf) {
    if (cpuHasF16c()) i = widenHalfF16c(in, out, n);
    for (; i < n; ++i) out[i] = halfToFloat(in[i]);
  } else {
    cpu::dispatch([&]() SQZ_LAMBDA_INLINE {
      for (size_t j = 0; j < n; ++j) out[j] = bfloat16ToFloat(in[j]);
    });
  }
}

void cpuWidenAdd(Narrow kind, float* out, const float* local, const uint16_t* in, size_t n) {
  size_t i = 0;
  if (kind == Narrow::kHalf) {
    if (cpuHasF16c()) i = widenAddHalfF16c(out, local, in, n);
    for (; i < n; ++i) out[i] = addDecoded(local[i], halfToFloat(in[i]));
  } else {
    cpu::dispatch([&]() SQZ_LAMBDA_INLINE {
      for (size_t j = 0; j < n; ++j) out[j] = addDecoded(local[j], bfloat16ToFloat(in[j]));
    });
  }
}

}  // namespace squeeze::device
