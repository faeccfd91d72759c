// CPU reduction kernels: one simple loop per (type, op) that GCC vectorizes at -O2/-O3, selected
// through a table so the executor calls one function pointer per chunk. Half types go through
// float32 (the DESIGN rule: accumulate 16-bit floats in float32).
#include <cpuid.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/error.h"
#include "device/reduce.h"

namespace squeeze::device {

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int shift = 0;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      ++shift;
    }
    mant &= 0x3ffu;
    bits = sign | static_cast<uint32_t>(113 - shift) << 23 | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)  // inf or nan (keep nan quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {  // result is subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t exp = absx >> 23;
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14..24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = absx + 0xfffu + ((absx >> 13) & 1);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float bfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

namespace {

struct Half {
  static float load(uint16_t v) { return halfToFloat(v); }
  static uint16_t store(float f) { return floatToHalf(f); }
};
struct Bf16 {
  static float load(uint16_t v) { return bfloat16ToFloat(v); }
  static uint16_t store(float f) { return floatToBfloat16(f); }
};

// Signed integers of int's width and more wrap around (two's complement, as NCCL's do) instead of
// overflowing, which is undefined behaviour: their sums and products run in the unsigned type.
// Narrower ones are promoted to int, where they cannot overflow.
template <class T, bool = std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= sizeof(int)>
struct WrappingOf { using type = T; };
template <class T>
struct WrappingOf<T, true> { using type = std::make_unsigned_t<T>; };
template <class T>
using Wrapping = typename WrappingOf<T>::type;

struct OpSum {
  template <class T> static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wrapping<T>>(a) + static_cast<Wrapping<T>>(b));
  }
};
struct OpProd {
  template <class T> static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wrapping<T>>(a) * static_cast<Wrapping<T>>(b));
  }
};
struct OpMax {
  template <class T> static T apply(T a, T b) { return a > b ? a : b; }
};
struct OpMin {
  template <class T> static T apply(T a, T b) { return a < b ? a : b; }
};

template <class T, class Op>
void reduceLoop(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(Op::apply(x[i], y[i]));
}

template <class Conv, class Op>
void reduceLoop16(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = Conv::store(Op::apply(Conv::load(x[i]), Conv::load(y[i])));
}

// float16 with the F16C conversions (8 lanes); same rounding (nearest even) as the scalar path.
struct VecSum {
  __attribute__((target("avx,f16c"))) static __m256 apply(__m256 a, __m256 b) {
    return _mm256_add_ps(a, b);
  }
};
struct VecProd {
  __attribute__((target("avx,f16c"))) static __m256 apply(__m256 a, __m256 b) {
    return _mm256_mul_ps(a, b);
  }
};
struct VecMax {  // a > b ? a : b, like OpMax
  __attribute__((target("avx,f16c"))) static __m256 apply(__m256 a, __m256 b) {
    return _mm256_max_ps(a, b);
  }
};
struct VecMin {  // a < b ? a : b, like OpMin
  __attribute__((target("avx,f16c"))) static __m256 apply(__m256 a, __m256 b) {
    return _mm256_min_ps(a, b);
  }
};

template <class Vec, class Op>
__attribute__((target("avx,f16c"))) void reduceHalfF16c(void* out, const void* a, const void* b,
                                                        size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 fx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    __m256 fy = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i),
                     _mm256_cvtps_ph(Vec::apply(fx, fy), _MM_FROUND_TO_NEAREST_INT));
  }
  reduceLoop16<Half, Op>(o + i, x + i, y + i, n - i);
}


template <class Op, class Vec>
ReduceFn halfFn() {
  return cpuHasF16c() ? reduceHalfF16c<Vec, Op> : reduceLoop16<Half, Op>;
}

template <class Op>
struct VecOf;
template <> struct VecOf<OpSum> { using type = VecSum; };
template <> struct VecOf<OpProd> { using type = VecProd; };
template <> struct VecOf<OpMax> { using type = VecMax; };
template <> struct VecOf<OpMin> { using type = VecMin; };

template <class Op>
ReduceFn forType(DataType t) {
  switch (t) {
    case DataType::kInt8: return reduceLoop<int8_t, Op>;
    case DataType::kUint8: return reduceLoop<uint8_t, Op>;
    case DataType::kInt32: return reduceLoop<int32_t, Op>;
    case DataType::kUint32: return reduceLoop<uint32_t, Op>;
    case DataType::kInt64: return reduceLoop<int64_t, Op>;
    case DataType::kUint64: return reduceLoop<uint64_t, Op>;
    case DataType::kFloat16: return halfFn<Op, typename VecOf<Op>::type>();
    case DataType::kFloat32: return reduceLoop<float, Op>;
    case DataType::kFloat64: return reduceLoop<double, Op>;
    case DataType::kBfloat16: return reduceLoop16<Bf16, Op>;
  }
  return nullptr;
}

template <class T>
void divideLoop(void* buf, size_t n, int divisor) {
  T* p = static_cast<T*>(buf);
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / d);
}

template <class Conv>
void divideLoop16(void* buf, size_t n, int divisor) {
  auto* p = static_cast<uint16_t*>(buf);
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = Conv::store(Conv::load(p[i]) / d);
}

}  // namespace

bool cpuHasF16c() {
  // F16C is CPUID.1:ECX bit 29; __builtin_cpu_supports("avx") also checks that the OS saves the
  // AVX registers. (clang < 15 has no __builtin_cpu_supports("f16c").)
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
           (ecx & bit_F16C) != 0;
  }();
  return have;
}

ReduceFn cpuReduceFn(DataType dtype, RedOp op) {
  ReduceFn fn = nullptr;
  switch (op) {
    case RedOp::kSum: case RedOp::kAvg: fn = forType<OpSum>(dtype); break;
    case RedOp::kProd: fn = forType<OpProd>(dtype); break;
    case RedOp::kMax: fn = forType<OpMax>(dtype); break;
    case RedOp::kMin: fn = forType<OpMin>(dtype); break;
  }
  SQZ_ENFORCE(fn != nullptr, "no reduction for dtype ", int(dtype), " op ", int(op));
  return fn;
}

void cpuDivide(void* buf, size_t n, DataType dtype, int divisor) {
  switch (dtype) {
    case DataType::kInt8: return divideLoop<int8_t>(buf, n, divisor);
    case DataType::kUint8: return divideLoop<uint8_t>(buf, n, divisor);
    case DataType::kInt32: return divideLoop<int32_t>(buf, n, divisor);
    case DataType::kUint32: return divideLoop<uint32_t>(buf, n, divisor);
    case DataType::kInt64: return divideLoop<int64_t>(buf, n, divisor);
    case DataType::kUint64: return divideLoop<uint64_t>(buf, n, divisor);
    case DataType::kFloat16: return divideLoop16<Half>(buf, n, divisor);
    case DataType::kFloat32: return divideLoop<float>(buf, n, divisor);
    case DataType::kFloat64: return divideLoop<double>(buf, n, divisor);
    case DataType::kBfloat16: return divideLoop16<Bf16>(buf, n, divisor);
  }
}

}  // namespace squeeze::device
