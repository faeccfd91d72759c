// The per-element math of device/, written once and compiled for both backends: the 16-bit
// float conversions, the reduction of two elements for every (datatype, op), avg's divide, and
// each quantizer's encode and decode of one value. device/cpu/*.cc call these in their scalar
// loops and device/cuda/*.cu in their kernels, so the two backends agree bit for bit by
// construction rather than by two copies kept in step.
//
// Every float operation whose rounding matters goes through addRn/subRn/mulRn/divRn: plain
// operators on the host (no FMA is enabled there), the explicit round-to-nearest intrinsics in
// device code, where nvcc would otherwise fuse a multiply and a following add into one FMA (one
// rounding instead of two) and fast-math flags would swap in approximate division.
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/types.h"
#include "device/hd.h"

// Host loops (GCC's vectorizer, the AVX2 clones in cpu/quantize.cc) need these inlined whole.
#define SQZ_HD_INLINE SQZ_HD inline __attribute__((always_inline))

namespace squeeze::device {

// ---- bits and correctly rounded operations ---------------------------------------------------

// __builtin_bit_cast: no memcpy (device code has none worth calling), and g++, clang and nvcc's
// device pass all accept it.
SQZ_HD_INLINE uint32_t floatBits(float f) { return __builtin_bit_cast(uint32_t, f); }
SQZ_HD_INLINE float floatFromBits(uint32_t b) { return __builtin_bit_cast(float, b); }

SQZ_HD_INLINE float addRn(float a, float b) {
#if SQZ_DEVICE_COMPILE
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SQZ_HD_INLINE float subRn(float a, float b) {
#if SQZ_DEVICE_COMPILE
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
SQZ_HD_INLINE float mulRn(float a, float b) {
#if SQZ_DEVICE_COMPILE
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SQZ_HD_INLINE float divRn(float a, float b) {
#if SQZ_DEVICE_COMPILE
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
SQZ_HD_INLINE double addRn(double a, double b) {
#if SQZ_DEVICE_COMPILE
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
SQZ_HD_INLINE double mulRn(double a, double b) {
#if SQZ_DEVICE_COMPILE
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SQZ_HD_INLINE double divRn(double a, double b) {
#if SQZ_DEVICE_COMPILE
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
SQZ_HD_INLINE double sqrtRn(double a) {
#if SQZ_DEVICE_COMPILE
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}
// |x| by clearing the sign bit, NaN included (what fabs does, without libm on either side).
SQZ_HD_INLINE float absOf(float x) { return floatFromBits(floatBits(x) & 0x7fffffffu); }

// ---- 16-bit floats ---------------------------------------------------------------------------
// Widening is exact. Narrowing rounds to nearest even, overflows to infinity, and keeps NaN a
// NaN with its sign (float16: quiet, payload dropped; bfloat16: quiet, top payload bits kept).

SQZ_HD_INLINE float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else {  // zero or subnormal: mant * 2^-24 is exact in float and a normal float
    bits = sign | floatBits(static_cast<float>(mant) * 0x1p-24f);
  }
  return floatFromBits(bits);
}

SQZ_HD_INLINE uint16_t floatToHalf(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)  // inf or nan (keep nan quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {  // result is subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exp = absx >> 23;
    const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  const uint32_t rounded = absx + 0xfffu + ((absx >> 13) & 1);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

SQZ_HD_INLINE float bfloat16ToFloat(uint16_t b) {
  return floatFromBits(static_cast<uint32_t>(b) << 16);
}

// Branch-free, so the CPU loops that call it vectorize.
SQZ_HD_INLINE uint16_t floatToBfloat16(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// ---- reduction of two elements ---------------------------------------------------------------

// How an element is stored and what it is combined in: 16-bit floats combine in float32
// (DESIGN: accumulate 16-bit floats in float32) and round back once per operation.
template <class T>
struct PlainElem {
  using Storage = T;
  using Compute = T;
  SQZ_HD_INLINE static T load(T v) { return v; }
  SQZ_HD_INLINE static T store(T v) { return v; }
};
struct HalfElem {
  using Storage = uint16_t;
  using Compute = float;
  SQZ_HD_INLINE static float load(uint16_t v) { return halfToFloat(v); }
  SQZ_HD_INLINE static uint16_t store(float f) { return floatToHalf(f); }
};
struct Bfloat16Elem {
  using Storage = uint16_t;
  using Compute = float;
  SQZ_HD_INLINE static float load(uint16_t v) { return bfloat16ToFloat(v); }
  SQZ_HD_INLINE static uint16_t store(float f) { return floatToBfloat16(f); }
};

// Signed integers of int's width and more wrap around (two's complement, as NCCL's do) instead of
// overflowing, which is undefined behaviour: their sums and products run in the unsigned type.
// Narrower ones are promoted to int, where they cannot overflow.
template <class T,
          bool = (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= sizeof(int))>
struct WrappingOf {
  using type = T;
};
template <class T>
struct WrappingOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using Wrapping = typename WrappingOf<T>::type;

// One operation each: nothing for nvcc to fuse, so plain operators round as the host's do.
struct OpSum {
  template <class T>
  SQZ_HD_INLINE static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wrapping<T>>(a) + static_cast<Wrapping<T>>(b));
  }
};
struct OpProd {
  template <class T>
  SQZ_HD_INLINE static T apply(T a, T b) {
    return static_cast<T>(static_cast<Wrapping<T>>(a) * static_cast<Wrapping<T>>(b));
  }
};
struct OpMax {  // NaN handling follows the comparison: a NaN b gives b
  template <class T>
  SQZ_HD_INLINE static T apply(T a, T b) {
    return a > b ? a : b;
  }
};
struct OpMin {
  template <class T>
  SQZ_HD_INLINE static T apply(T a, T b) {
    return a < b ? a : b;
  }
};

// a op b as stored elements. For avg this is the sum (the divide comes once, at the end).
template <class Elem, class Op>
SQZ_HD_INLINE typename Elem::Storage reduceElement(typename Elem::Storage a,
                                                   typename Elem::Storage b) {
  return Elem::store(static_cast<typename Elem::Compute>(Op::apply(Elem::load(a), Elem::load(b))));
}

// v / divisor in the element's compute type; integers truncate.
template <class T>
SQZ_HD_INLINE T quotient(T a, T b) {
  return static_cast<T>(a / b);
}
template <>
SQZ_HD_INLINE float quotient<float>(float a, float b) {
  return divRn(a, b);
}
template <>
SQZ_HD_INLINE double quotient<double>(double a, double b) {
  return divRn(a, b);
}
template <class Elem>
SQZ_HD_INLINE typename Elem::Storage divideElement(typename Elem::Storage v, int divisor) {
  using C = typename Elem::Compute;
  return Elem::store(quotient<C>(Elem::load(v), static_cast<C>(divisor)));
}

// Host-side dispatch shared by both backends: f(ElemTag{}) for the datatype, f(OpTag{}) for the
// op (avg reduces as a sum). Returns what f returns; an unknown value returns R{}.
template <class F>
decltype(auto) visitElement(DataType t, F&& f) {
  using R = decltype(f(PlainElem<int8_t>{}));
  switch (t) {
    case DataType::kInt8:
      return f(PlainElem<int8_t>{});
    case DataType::kUint8:
      return f(PlainElem<uint8_t>{});
    case DataType::kInt32:
      return f(PlainElem<int32_t>{});
    case DataType::kUint32:
      return f(PlainElem<uint32_t>{});
    case DataType::kInt64:
      return f(PlainElem<int64_t>{});
    case DataType::kUint64:
      return f(PlainElem<uint64_t>{});
    case DataType::kFloat16:
      return f(HalfElem{});
    case DataType::kFloat32:
      return f(PlainElem<float>{});
    case DataType::kFloat64:
      return f(PlainElem<double>{});
    case DataType::kBfloat16:
      return f(Bfloat16Elem{});
  }
  return R();
}
template <class F>
decltype(auto) visitOp(RedOp op, F&& f) {
  using R = decltype(f(OpSum{}));
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return f(OpSum{});
    case RedOp::kProd:
      return f(OpProd{});
    case RedOp::kMax:
      return f(OpMax{});
    case RedOp::kMin:
      return f(OpMin{});
  }
  return R();
}

// ---- quantizers (device/quantize.h describes the formats) ------------------------------------

// A uniform draw in [0, 1) on a 2^-24 grid from 32 random bits (exact: 24 bits times 2^-24).
SQZ_HD_INLINE float uniform24(uint32_t r) {
  return static_cast<float>(static_cast<int32_t>(r >> 8)) * 0x1p-24f;
}

// The square of a float in double: exact (48 significant bits), so fusing it with a following
// add could not change a sum; the squared norms of blocks and statistics add these.
SQZ_HD_INLINE double squareOf(float x) { return mulRn(double(x), double(x)); }

// A sent value's square as the encode's norms count it: code * unit exactly, before the decoder
// rounds it to float (at most 2^-23 from the decoded value's square); a zero code counts 0 even
// where the unit is not finite. The CPU adds a block's codes' squares (whole numbers, exact) and
// multiplies once; the GPU adds these.
SQZ_HD_INLINE double sentSquare(int32_t code, float unit) {
  return code ? mulRn(static_cast<double>(code * code), squareOf(unit)) : 0.0;  // 0 * inf: NaN
}

// What error feedback keeps of one value: residual + (x - decoded).
SQZ_HD_INLINE float residualAfter(float residual, float x, float decoded) {
  return addRn(residual, subRn(x, decoded));
}
// decodeAdd's value: local + decoded, rounded once after the decode's own rounding.
SQZ_HD_INLINE float addDecoded(float local, float decoded) { return addRn(local, decoded); }

// int8: scale = max|v| / 127; a zero scale (all zeros, or max|v| below 127 * 2^-150) divides
// by 1 instead, which quantizes every value to 0.
SQZ_HD_INLINE float int8Scale(float maxAbs) { return divRn(maxAbs, 127.0f); }
SQZ_HD_INLINE float int8Divisor(float scale) { return scale > 0.0f ? scale : 1.0f; }
SQZ_HD_INLINE uint8_t int8Code(float x, float divisor) {
  float t = divRn(x, divisor);
  t = t >= -127.0f ? t : -127.0f;  // NaN -> -127: never converted out of range
  t = t <= 127.0f ? t : 127.0f;
  t = subRn(addRn(t, 0x1.8p23f), 0x1.8p23f);  // round to nearest even (|t| <= 127)
  return static_cast<uint8_t>(static_cast<int8_t>(static_cast<int32_t>(t)));
}
SQZ_HD_INLINE float int8Value(uint8_t code, float scale) {
  return mulRn(static_cast<float>(static_cast<int8_t>(code)), scale);
}

// QSGD: the scale is the block's L2 norm from its sum of squares, as a float no larger than
// FLT_MAX (inf and NaN give FLT_MAX): any scale >= max|v| keeps QSGD unbiased and in bound.
SQZ_HD_INLINE float qsgdNorm(double sumSq) {
  const float f = static_cast<float>(sqrtRn(sumSq));
#if SQZ_DEVICE_COMPILE
  return fminf(f, FLT_MAX);
#else
  return __builtin_fminf(f, FLT_MAX);  // not a compare-and-select: GCC then vectorizes the
                                       // feedback loops of the same function better
#endif
}
SQZ_HD_INLINE float qsgdDivisor(float norm) { return norm > 0.0f ? norm : 1.0f; }
SQZ_HD_INLINE float qsgdStep(float norm, int levels) {
  return divRn(norm, static_cast<float>(levels));
}
// sign(x) * (floor(a) + [u < frac(a)]) with a = min(|x| / divisor * s, s), s = levels.
SQZ_HD_INLINE int8_t qsgdCode(float x, uint32_t r, float divisor, float s) {
  float a = mulRn(divRn(absOf(x), divisor), s);  // |x| <= norm: no overflow, even for tiny norms
  a = a >= 0.0f ? a : 0.0f;                      // NaN -> 0
  a = a <= s ? a : s;
  const int32_t whole = static_cast<int32_t>(a);
  const float frac = subRn(a, static_cast<float>(whole));
  const int32_t level = whole + (uniform24(r) < frac ? 1 : 0);
  return static_cast<int8_t>(x < 0.0f ? -level : level);
}
// Two 4-bit codes in a byte, the first in the low nibble.
SQZ_HD_INLINE uint8_t packNibblePair(int8_t first, int8_t second) {
  return static_cast<uint8_t>((first & 0x0f) | (second << 4));
}
SQZ_HD_INLINE int32_t lowNibbleCode(uint8_t b) {
  return static_cast<int8_t>(static_cast<uint8_t>(b << 4)) >> 4;
}
SQZ_HD_INLINE int32_t highNibbleCode(uint8_t b) { return static_cast<int8_t>(b) >> 4; }
SQZ_HD_INLINE float qsgdValue(int32_t code, float step) {
  return mulRn(static_cast<float>(code), step);
}

// 1-bit: the sign bit (1 for negative, -0 included), the two sides' parts of a value for the
// per-side sums (the value on its own side, +0 on the other: adding it leaves a sum unchanged),
// and the sides' means (0 for an empty side).
SQZ_HD_INLINE uint32_t signBit(float x) { return floatBits(x) >> 31; }
SQZ_HD_INLINE float clearSidePart(float x) {
  const uint32_t b = floatBits(x);
  return floatFromBits(b & ~static_cast<uint32_t>(static_cast<int32_t>(b) >> 31));
}
SQZ_HD_INLINE float setSidePart(float x) {
  const uint32_t b = floatBits(x);
  return floatFromBits(b & static_cast<uint32_t>(static_cast<int32_t>(b) >> 31));
}
SQZ_HD_INLINE float onebitMean(double sum, size_t count) {
  return count ? static_cast<float>(divRn(sum, static_cast<double>(count))) : 0.0f;
}
SQZ_HD_INLINE float onebitValue(uint32_t bit, float pos, float neg) { return bit ? neg : pos; }

// TernGrad: s = max|v|, and the probability divides by 1 for an all-zero block. Code 1 (+s)
// or 3 (-s) with probability |x| / s, else 0; 2 is never written and decodes as 0.
SQZ_HD_INLINE float terngradDivisor(float s) { return s > 0.0f ? s : 1.0f; }
SQZ_HD_INLINE uint32_t terngradCode(float x, uint32_t r, float divisor) {
  const float p = divRn(absOf(x), divisor);  // <= 1, even for tiny s
  const bool keep = uniform24(r) < p;
  return keep ? (x < 0.0f ? 3u : 1u) : 0u;
}
SQZ_HD_INLINE float terngradValue(uint32_t code, float s) {
  return code == 1 ? s : (code == 3 ? -s : 0.0f);
}

}  // namespace squeeze::device
