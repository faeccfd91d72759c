// Unit tests for device/reduce.h: every (datatype, op) kernel against a straightforward
// reference, aliasing, avg's division, and the float16 / bfloat16 conversions (exact integers,
// round-to-nearest-even at the boundaries, inf/nan, subnormals, all 65536 bit patterns).
//
// The float16 reference is the compiler's _Float16 where it has one (GCC 12 on x86-64 and
// aarch64), which is independent of the code under test; the bfloat16 reference picks the
// nearer of the two neighbouring bfloat16 values in double arithmetic.
#include "device/reduce.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "base/types.h"

namespace squeeze::device {
namespace {

#if defined(__FLT16_MAX__)
#define SQZ_TEST_HAVE_FLOAT16 1
#else
#define SQZ_TEST_HAVE_FLOAT16 0
#endif

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                  DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBfloat16};
constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};

float bitsToFloat(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t floatToBits(float f) { return std::bit_cast<uint32_t>(f); }

// ---- independent references for the 16-bit conversions ----------------------------------

// Nearest bfloat16 to f, ties to even, overflow to inf (as if the exponent were unbounded).
uint16_t refFloatToBf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t x = floatToBits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) return sign | 0x7f80;  // inf
  uint16_t lo = static_cast<uint16_t>(mag >> 16);
  uint16_t hi = static_cast<uint16_t>(lo + 1);
  double d = std::fabs(static_cast<double>(f));
  double dlo = static_cast<double>(bitsToFloat(static_cast<uint32_t>(lo) << 16));
  double dhi = hi == 0x7f80 ? std::ldexp(1.0, 128)
                            : static_cast<double>(bitsToFloat(static_cast<uint32_t>(hi) << 16));
  uint16_t pick;
  if (d - dlo < dhi - d)
    pick = lo;
  else if (d - dlo > dhi - d)
    pick = hi;
  else
    pick = (lo & 1) ? hi : lo;
  return sign | pick;
}

#if SQZ_TEST_HAVE_FLOAT16
uint16_t refFloatToHalf(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
float refHalfToFloat(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
#else
uint16_t refFloatToHalf(float f) { return floatToHalf(f); }
float refHalfToFloat(uint16_t h) { return halfToFloat(h); }
#endif

bool isHalfNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool isBf16Nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// ---- conversions --------------------------------------------------------------------------

TEST(Half, SmallIntegersAreExact) {
  for (int i = -2048; i <= 2048; ++i) {
    float f = static_cast<float>(i);
    uint16_t h = floatToHalf(f);
    ASSERT_EQ(halfToFloat(h), f) << i;
    ASSERT_EQ(h, refFloatToHalf(f)) << i;
  }
}

TEST(Half, KnownEncodings) {
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(0.5f), 0x3800);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);       // largest finite
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(floatToHalf(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(floatToHalf(0.1f), 0x2e66);
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(halfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(halfToFloat(0x8000), 0.0f);
  EXPECT_TRUE(std::signbit(halfToFloat(0x8000)));
}

TEST(Half, RoundsToNearestEven) {
  const float one = 1.0f;
  const float u = std::ldexp(1.0f, -11);  // half an ulp of half at 1.0
  // Ties go to the even mantissa.
  EXPECT_EQ(floatToHalf(one + u), 0x3c00);          // 1 + 2^-11: tie between 1 and 1+2^-10
  EXPECT_EQ(floatToHalf(one + 3 * u), 0x3c02);      // tie between 1+2^-10 (odd) and 1+2^-9
  EXPECT_EQ(floatToHalf(one + 5 * u), 0x3c02);      // tie between 1+2^-9 (even) and 1+3*2^-10
  EXPECT_EQ(floatToHalf(-(one + u)), 0xbc00);
  EXPECT_EQ(floatToHalf(-(one + 3 * u)), 0xbc02);
  // Just off the tie goes to the nearer value.
  EXPECT_EQ(floatToHalf(std::nextafter(one + u, 2.0f)), 0x3c01);
  EXPECT_EQ(floatToHalf(std::nextafter(one + u, 0.0f)), 0x3c00);
  EXPECT_EQ(floatToHalf(std::nextafter(one + 3 * u, 0.0f)), 0x3c01);
  // Integers above 2048 step by 2.
  EXPECT_EQ(floatToHalf(2048.0f), 0x6800);
  EXPECT_EQ(floatToHalf(2049.0f), 0x6800);
  EXPECT_EQ(floatToHalf(2050.0f), 0x6801);
  EXPECT_EQ(floatToHalf(2051.0f), 0x6802);
  // Overflow: 65520 is the tie between 65504 (odd mantissa) and 65536, so it becomes inf.
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(floatToHalf(-65520.0f), 0xfc00);
  EXPECT_EQ(floatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(floatToHalf(FLT_MAX), 0x7c00);
  // Subnormal results: ties to even as well.
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24
  EXPECT_EQ(floatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // tie between 1 and 2 units
  EXPECT_EQ(floatToHalf(std::ldexp(5.0f, -25)), 0x0002);  // tie between 2 and 3 units
  EXPECT_EQ(floatToHalf(std::ldexp(-3.0f, -25)), 0x8002);
  EXPECT_EQ(floatToHalf(std::ldexp(2047.0f, -25)), 0x0400);  // tie 0x3ff/0x400 -> normal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(floatToHalf(-std::ldexp(1.0f, -26)), 0x8000);
  EXPECT_EQ(floatToHalf(bitsToFloat(0x00000001)), 0x0000);  // float subnormal
}

TEST(Half, InfAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(floatToHalf(inf), 0x7c00);
  EXPECT_EQ(floatToHalf(-inf), 0xfc00);
  EXPECT_TRUE(std::isinf(halfToFloat(0x7c00)));
  EXPECT_TRUE(std::isinf(halfToFloat(0xfc00)));
  EXPECT_LT(halfToFloat(0xfc00), 0.0f);
  EXPECT_TRUE(isHalfNan(floatToHalf(std::nanf(""))));
  EXPECT_TRUE(isHalfNan(floatToHalf(-std::nanf(""))));
  EXPECT_TRUE(isHalfNan(floatToHalf(bitsToFloat(0x7f800001))));  // payload only in low bits
  EXPECT_TRUE(isHalfNan(floatToHalf(bitsToFloat(0xffc00000))));
  EXPECT_TRUE(std::isnan(halfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(halfToFloat(0x7c01)));
  EXPECT_TRUE(std::isnan(halfToFloat(0xfe00)));
}

TEST(Half, AllBitPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = halfToFloat(h);
    if (isHalfNan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(isHalfNan(floatToHalf(f))) << std::hex << b;
      continue;
    }
    ASSERT_EQ(floatToBits(f), floatToBits(refHalfToFloat(h))) << "halfToFloat 0x" << std::hex << b;
    ASSERT_EQ(floatToHalf(f), h) << "round trip 0x" << std::hex << b;
  }
}

TEST(Half, MatchesReferenceAtEveryMidpoint) {
  // For each pair of adjacent finite halves: the midpoint (a tie) and the floats either side.
  for (uint32_t b = 0; b < 0x7c00; ++b) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const float lo = halfToFloat(static_cast<uint16_t>(b | sign));
      const float hi = b + 1 == 0x7c00 ? (sign ? -65536.0f : 65536.0f)
                                      : halfToFloat(static_cast<uint16_t>((b + 1) | sign));
      const float mid = (lo + hi) / 2;  // exact: 12 significant bits
      for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)}) {
        ASSERT_EQ(floatToHalf(f), refFloatToHalf(f))
            << "f=" << f << " (0x" << std::hex << floatToBits(f) << ")";
      }
    }
  }
}

TEST(Half, MatchesReferenceOnSampledFloats) {
#if !SQZ_TEST_HAVE_FLOAT16
  GTEST_SKIP() << "this compiler has no _Float16 to use as an independent reference";
#endif
  // Every 4099th float bit pattern (about a million), all exponents, both signs.
  for (uint64_t b = 0; b <= 0xffffffffull; b += 4099) {
    const float f = bitsToFloat(static_cast<uint32_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(floatToHalf(f), refFloatToHalf(f)) << "0x" << std::hex << b;
  }
}

TEST(Bfloat16, SmallIntegersAreExact) {
  for (int i = -256; i <= 256; ++i) {
    float f = static_cast<float>(i);
    uint16_t b = floatToBfloat16(f);
    ASSERT_EQ(bfloat16ToFloat(b), f) << i;
    ASSERT_EQ(b, floatToBits(f) >> 16) << i;  // exact values are the top half of the float
  }
}

TEST(Bfloat16, RoundsToNearestEven) {
  const float u = std::ldexp(1.0f, -8);  // half an ulp of bfloat16 at 1.0
  EXPECT_EQ(floatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBfloat16(1.0f + u), 0x3f80);  // tie -> even
  EXPECT_EQ(floatToBfloat16(1.0f + 3 * u), 0x3f82);
  EXPECT_EQ(floatToBfloat16(std::nextafter(1.0f + u, 2.0f)), 0x3f81);
  EXPECT_EQ(floatToBfloat16(std::nextafter(1.0f + u, 0.0f)), 0x3f80);
  EXPECT_EQ(floatToBfloat16(-(1.0f + 3 * u)), 0xbf82);
  EXPECT_EQ(floatToBfloat16(256.0f), 0x4380);
  EXPECT_EQ(floatToBfloat16(257.0f), 0x4380);  // tie between 256 and 258
  EXPECT_EQ(floatToBfloat16(258.0f), 0x4381);
  EXPECT_EQ(floatToBfloat16(259.0f), 0x4382);  // tie between 258 (odd) and 260
  EXPECT_EQ(floatToBfloat16(1.0f / 3.0f), 0x3eab);
  // Overflow: the largest finite bfloat16 is 0x7f7f; its tie with 2^128 goes to inf.
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x7f7f8000)), 0x7f80);
  EXPECT_EQ(floatToBfloat16(FLT_MAX), 0x7f80);
  EXPECT_EQ(floatToBfloat16(-FLT_MAX), 0xff80);
  // Subnormals.
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x00000001)), 0x0000);
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x00008000)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x00008001)), 0x0001);
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x00018000)), 0x0002);  // tie -> even (2)
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x00010000)), 0x0001);
  EXPECT_EQ(floatToBfloat16(-0.0f), 0x8000);
}

TEST(Bfloat16, InfAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(floatToBfloat16(inf), 0x7f80);
  EXPECT_EQ(floatToBfloat16(-inf), 0xff80);
  EXPECT_TRUE(std::isinf(bfloat16ToFloat(0x7f80)));
  EXPECT_TRUE(isBf16Nan(floatToBfloat16(std::nanf(""))));
  EXPECT_TRUE(isBf16Nan(floatToBfloat16(bitsToFloat(0x7f800001))));  // must not become inf
  EXPECT_TRUE(isBf16Nan(floatToBfloat16(bitsToFloat(0xff800001))));
  EXPECT_TRUE(isBf16Nan(floatToBfloat16(bitsToFloat(0x7fffffff))));  // must not carry into sign
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(0x7fc0)));
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(0x7f81)));
}

TEST(Bfloat16, AllBitPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t v = static_cast<uint16_t>(b);
    const float f = bfloat16ToFloat(v);
    ASSERT_EQ(floatToBits(f), b << 16) << std::hex << b;
    if (isBf16Nan(v)) {
      ASSERT_TRUE(isBf16Nan(floatToBfloat16(f))) << std::hex << b;
      continue;
    }
    ASSERT_EQ(floatToBfloat16(f), v) << "round trip 0x" << std::hex << b;
  }
}

TEST(Bfloat16, MatchesReferenceOnSampledFloats) {
  for (uint64_t b = 0; b <= 0xffffffffull; b += 4099) {
    const float f = bitsToFloat(static_cast<uint32_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(floatToBfloat16(f), refFloatToBf16(f)) << "0x" << std::hex << b;
  }
  // Every tie and its neighbours in the low 16 bits, for a spread of high halves.
  for (uint32_t hi = 0; hi < 0x7f80; hi += 37) {
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u, 0x0000u, 0xffffu}) {
      const float f = bitsToFloat(hi << 16 | low);
      ASSERT_EQ(floatToBfloat16(f), refFloatToBf16(f)) << "0x" << std::hex << (hi << 16 | low);
    }
  }
}

// ---- reduction kernels ---------------------------------------------------------------------

// A random element of dtype (as raw bytes), in a range where op has no undefined behaviour:
// 8-bit and unsigned types use their whole range (wrap-around is defined), signed 32/64-bit
// types a range whose products fit, 16-bit floats any finite value but -0.
template <class T>
T randomInt(std::mt19937_64& rng) {
  if constexpr (std::is_same_v<T, int32_t>) {
    return static_cast<T>(std::uniform_int_distribution<int64_t>(-40000, 40000)(rng));
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return std::uniform_int_distribution<int64_t>(-(1ll << 31), 1ll << 31)(rng);
  } else {
    return static_cast<T>(rng());
  }
}

uint16_t randomHalfBits(std::mt19937_64& rng) {
  for (;;) {
    uint16_t h = static_cast<uint16_t>(rng());
    if ((h & 0x7c00) != 0x7c00 && h != 0x8000) return h;
  }
}
uint16_t randomBf16Bits(std::mt19937_64& rng) {
  for (;;) {
    uint16_t h = static_cast<uint16_t>(rng());
    if ((h & 0x7f80) != 0x7f80 && h != 0x8000) return h;
  }
}

std::vector<uint8_t> randomBuffer(DataType t, size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> out(n * dataTypeSize(t) + 1);  // +1: never a zero-size vector
  auto put = [&](size_t i, auto v) { std::memcpy(out.data() + i * sizeof v, &v, sizeof v); };
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
      case DataType::kInt8: put(i, randomInt<int8_t>(rng)); break;
      case DataType::kUint8: put(i, randomInt<uint8_t>(rng)); break;
      case DataType::kInt32: put(i, randomInt<int32_t>(rng)); break;
      case DataType::kUint32: put(i, randomInt<uint32_t>(rng)); break;
      case DataType::kInt64: put(i, randomInt<int64_t>(rng)); break;
      case DataType::kUint64: put(i, randomInt<uint64_t>(rng)); break;
      case DataType::kFloat16: put(i, randomHalfBits(rng)); break;
      case DataType::kBfloat16: put(i, randomBf16Bits(rng)); break;
      case DataType::kFloat32:
        put(i, static_cast<float>(std::uniform_real_distribution<double>(-1e3, 1e3)(rng)));
        break;
      case DataType::kFloat64:
        put(i, std::uniform_real_distribution<double>(-1e6, 1e6)(rng));
        break;
    }
  }
  return out;
}

template <class W>
W applyOp(RedOp op, W a, W b) {
  switch (op) {
    case RedOp::kSum: case RedOp::kAvg: return a + b;
    case RedOp::kProd: return a * b;
    case RedOp::kMax: return a < b ? b : a;
    case RedOp::kMin: return b < a ? b : a;
  }
  return a;
}

// Integer reference: computed in the unsigned type of the same width, where wrap-around is
// defined, then converted back (modular since C++20).
template <class T>
void refIntLoop(RedOp op, const uint8_t* a, const uint8_t* b, uint8_t* out, size_t n) {
  using U = std::make_unsigned_t<T>;
  for (size_t i = 0; i < n; ++i) {
    T x, y, r;
    std::memcpy(&x, a + i * sizeof(T), sizeof(T));
    std::memcpy(&y, b + i * sizeof(T), sizeof(T));
    switch (op) {
      case RedOp::kSum: case RedOp::kAvg:
        r = static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
        break;
      case RedOp::kProd:  // 1ull * keeps uint8 from promoting to a signed int
        r = static_cast<T>(static_cast<U>(1ull * static_cast<U>(x) * static_cast<U>(y)));
        break;
      default: r = applyOp(op, x, y); break;
    }
    std::memcpy(out + i * sizeof(T), &r, sizeof(T));
  }
}

template <class T>
void refFloatLoop(RedOp op, const uint8_t* a, const uint8_t* b, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T x, y;
    std::memcpy(&x, a + i * sizeof(T), sizeof(T));
    std::memcpy(&y, b + i * sizeof(T), sizeof(T));
    T r = applyOp(op, x, y);
    std::memcpy(out + i * sizeof(T), &r, sizeof(T));
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void ref16Loop(RedOp op, const uint8_t* a, const uint8_t* b, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t x, y;
    std::memcpy(&x, a + 2 * i, 2);
    std::memcpy(&y, b + 2 * i, 2);
    uint16_t r = Store(applyOp(op, Load(x), Load(y)));
    std::memcpy(out + 2 * i, &r, 2);
  }
}

float refBf16ToFloat(uint16_t b) { return bitsToFloat(static_cast<uint32_t>(b) << 16); }

void reference(DataType t, RedOp op, const uint8_t* a, const uint8_t* b, uint8_t* out, size_t n) {
  switch (t) {
    case DataType::kInt8: return refIntLoop<int8_t>(op, a, b, out, n);
    case DataType::kUint8: return refIntLoop<uint8_t>(op, a, b, out, n);
    case DataType::kInt32: return refIntLoop<int32_t>(op, a, b, out, n);
    case DataType::kUint32: return refIntLoop<uint32_t>(op, a, b, out, n);
    case DataType::kInt64: return refIntLoop<int64_t>(op, a, b, out, n);
    case DataType::kUint64: return refIntLoop<uint64_t>(op, a, b, out, n);
    case DataType::kFloat16: return ref16Loop<refHalfToFloat, refFloatToHalf>(op, a, b, out, n);
    case DataType::kFloat32: return refFloatLoop<float>(op, a, b, out, n);
    case DataType::kFloat64: return refFloatLoop<double>(op, a, b, out, n);
    case DataType::kBfloat16: return ref16Loop<refBf16ToFloat, refFloatToBf16>(op, a, b, out, n);
  }
}

std::string describe(DataType t, RedOp op, size_t n) {
  return std::string(dataTypeName(t)) + " " + redOpName(op) + " n=" + std::to_string(n);
}

// The first element where two buffers differ, or -1.
long firstDifference(const std::vector<uint8_t>& x, const std::vector<uint8_t>& y, size_t n,
                     size_t esize) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(x.data() + i * esize, y.data() + i * esize, esize) != 0)
      return static_cast<long>(i);
  return -1;
}

const size_t kSizes[] = {0, 1, 2, 7, 16, 33, 64, 1031};

TEST(CpuReduce, EveryTypeAndOpMatchesReference) {
  std::mt19937_64 rng(12345);
  for (DataType t : kAllTypes) {
    const size_t es = dataTypeSize(t);
    for (RedOp op : kAllOps) {
      ReduceFn fn = cpuReduceFn(t, op);
      ASSERT_NE(fn, nullptr) << describe(t, op, 0);
      for (size_t n : kSizes) {
        auto a = randomBuffer(t, n, rng), b = randomBuffer(t, n, rng);
        std::vector<uint8_t> want(a.size(), 0xcd), got(a.size(), 0xcd);
        reference(t, op, a.data(), b.data(), want.data(), n);
        const auto a0 = a, b0 = b;
        fn(got.data(), a.data(), b.data(), n);
        EXPECT_EQ(firstDifference(got, want, n, es), -1) << describe(t, op, n);
        EXPECT_EQ(got.back(), 0xcd) << describe(t, op, n) << ": wrote past the end";
        EXPECT_EQ(a, a0) << describe(t, op, n) << ": modified an input";
        EXPECT_EQ(b, b0) << describe(t, op, n) << ": modified an input";
      }
    }
  }
}

TEST(CpuReduce, OutputMayAliasAnInput) {
  std::mt19937_64 rng(777);
  for (DataType t : kAllTypes) {
    const size_t es = dataTypeSize(t);
    for (RedOp op : kAllOps) {
      ReduceFn fn = cpuReduceFn(t, op);
      for (size_t n : {size_t{1}, size_t{7}, size_t{1031}}) {
        auto a = randomBuffer(t, n, rng), b = randomBuffer(t, n, rng);
        std::vector<uint8_t> want(a.size());
        reference(t, op, a.data(), b.data(), want.data(), n);

        auto outA = a;  // out == a
        fn(outA.data(), outA.data(), b.data(), n);
        EXPECT_EQ(firstDifference(outA, want, n, es), -1) << describe(t, op, n) << " out==a";

        auto outB = b;  // out == b
        fn(outB.data(), a.data(), outB.data(), n);
        EXPECT_EQ(firstDifference(outB, want, n, es), -1) << describe(t, op, n) << " out==b";

        std::vector<uint8_t> wantSelf(a.size());  // out == a == b
        reference(t, op, a.data(), a.data(), wantSelf.data(), n);
        auto self = a;
        fn(self.data(), self.data(), self.data(), n);
        EXPECT_EQ(firstDifference(self, wantSelf, n, es), -1) << describe(t, op, n) << " a==b";
      }
    }
  }
}

TEST(CpuReduce, AvgKernelIsTheSum) {
  std::mt19937_64 rng(99);
  for (DataType t : kAllTypes) {
    auto a = randomBuffer(t, 33, rng), b = randomBuffer(t, 33, rng);
    std::vector<uint8_t> sum(a.size()), avg(a.size());
    cpuReduceFn(t, RedOp::kSum)(sum.data(), a.data(), b.data(), 33);
    cpuReduceFn(t, RedOp::kAvg)(avg.data(), a.data(), b.data(), 33);
    EXPECT_EQ(firstDifference(sum, avg, 33, dataTypeSize(t)), -1) << dataTypeName(t);
  }
}

TEST(CpuReduce, SmallExactValues) {
  // Hand-checked values, independent of any reference code.
  int8_t a8[] = {100, -100, 3, -128}, b8[] = {100, -100, -5, -1}, o8[4];
  cpuReduceFn(DataType::kInt8, RedOp::kSum)(o8, a8, b8, 4);
  EXPECT_EQ(o8[0], -56);  // wraps
  EXPECT_EQ(o8[1], 56);
  EXPECT_EQ(o8[2], -2);
  EXPECT_EQ(o8[3], 127);
  cpuReduceFn(DataType::kInt8, RedOp::kMax)(o8, a8, b8, 4);
  EXPECT_EQ(o8[2], 3);
  EXPECT_EQ(o8[3], -1);
  uint8_t au[] = {200, 1}, bu[] = {100, 255}, ou[2];
  cpuReduceFn(DataType::kUint8, RedOp::kSum)(ou, au, bu, 2);
  EXPECT_EQ(ou[0], 44);
  EXPECT_EQ(ou[1], 0);
  cpuReduceFn(DataType::kUint8, RedOp::kMax)(ou, au, bu, 2);  // unsigned comparison
  EXPECT_EQ(ou[0], 200);
  EXPECT_EQ(ou[1], 255);
  uint64_t a64[] = {1ull << 63, 3}, b64[] = {1ull << 62, 1ull << 40}, o64[2];
  cpuReduceFn(DataType::kUint64, RedOp::kMin)(o64, a64, b64, 2);
  EXPECT_EQ(o64[0], 1ull << 62);
  EXPECT_EQ(o64[1], 3u);
  cpuReduceFn(DataType::kUint64, RedOp::kProd)(o64, a64, b64, 2);
  EXPECT_EQ(o64[1], 3ull << 40);
  uint16_t ha[] = {floatToHalf(1.5f), floatToHalf(-2.0f)}, hb[] = {floatToHalf(2.5f),
                                                                    floatToHalf(0.25f)};
  uint16_t ho[2];
  cpuReduceFn(DataType::kFloat16, RedOp::kSum)(ho, ha, hb, 2);
  EXPECT_EQ(ho[0], 0x4400);  // 4.0
  EXPECT_EQ(ho[1], floatToHalf(-1.75f));
  cpuReduceFn(DataType::kFloat16, RedOp::kProd)(ho, ha, hb, 2);
  EXPECT_EQ(ho[0], floatToHalf(3.75f));
  EXPECT_EQ(ho[1], 0xb800);  // -0.5
  uint16_t ba[] = {0x3f80, 0x4000}, bb[] = {0x3f80, 0xc040}, bo[2];  // {1, 2} and {1, -3}
  cpuReduceFn(DataType::kBfloat16, RedOp::kSum)(bo, ba, bb, 2);
  EXPECT_EQ(bo[0], 0x4000);  // 2
  EXPECT_EQ(bo[1], 0xbf80);  // -1
  cpuReduceFn(DataType::kBfloat16, RedOp::kMin)(bo, ba, bb, 2);
  EXPECT_EQ(bo[1], 0xc040);
}

TEST(CpuReduce, SignedIntegersWrapAroundWithoutUndefinedBehaviour) {
  // A peer's payload (or the user's data) may overflow: the sum and product wrap in two's
  // complement, as NCCL's do (the sanitize suite runs this under UBSan).
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  int32_t a32[] = {kMax32, kMin32, 1 << 30}, b32[] = {1, -1, 4}, o32[3];
  cpuReduceFn(DataType::kInt32, RedOp::kSum)(o32, a32, b32, 3);
  EXPECT_EQ(o32[0], kMin32);
  EXPECT_EQ(o32[1], kMax32);
  EXPECT_EQ(o32[2], (1 << 30) + 4);
  cpuReduceFn(DataType::kInt32, RedOp::kProd)(o32, a32, b32, 3);
  EXPECT_EQ(o32[0], kMax32);
  EXPECT_EQ(o32[1], kMin32);  // -INT_MIN wraps to itself
  EXPECT_EQ(o32[2], 0);       // 2^32 wraps to 0
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  int64_t a64[] = {kMax64, -3}, b64[] = {kMax64, 5}, o64[2];
  cpuReduceFn(DataType::kInt64, RedOp::kAvg)(o64, a64, b64, 2);  // avg's kernel is the sum
  EXPECT_EQ(o64[0], -2);
  EXPECT_EQ(o64[1], 2);
  cpuReduceFn(DataType::kInt64, RedOp::kProd)(o64, a64, b64, 2);
  EXPECT_EQ(o64[0], 1);  // (2^63 - 1)^2 = 2^126 - 2^64 + 1
  EXPECT_EQ(o64[1], -15);
}

TEST(CpuReduce, HalfSumRoundsOnce) {
  // 2048 + 1 is not representable in half: the result rounds to even (2048), and 2050 + 1 to
  // 2052; accumulating in float first and rounding once is what makes this exact.
  uint16_t a[] = {floatToHalf(2048.0f), floatToHalf(2050.0f)};
  uint16_t b[] = {floatToHalf(1.0f), floatToHalf(1.0f)};
  uint16_t o[2];
  cpuReduceFn(DataType::kFloat16, RedOp::kSum)(o, a, b, 2);
  EXPECT_EQ(o[0], 0x6800);
  EXPECT_EQ(o[1], 0x6802);
}

// ---- avg's division ---------------------------------------------------------------------------

TEST(CpuDivide, IntegersTruncateTowardZero) {
  int32_t v[] = {7, -7, 9, -9, 0, 100, -1, 1};
  cpuDivide(v, 8, DataType::kInt32, 2);
  EXPECT_EQ(std::vector<int32_t>(v, v + 8), (std::vector<int32_t>{3, -3, 4, -4, 0, 50, 0, 0}));
  int32_t w[] = {7, -7, 16, -16};
  cpuDivide(w, 4, DataType::kInt32, 3);
  EXPECT_EQ(std::vector<int32_t>(w, w + 4), (std::vector<int32_t>{2, -2, 5, -5}));
  int8_t s8[] = {-128, 127, -7, 15};
  cpuDivide(s8, 4, DataType::kInt8, 8);
  EXPECT_EQ(std::vector<int8_t>(s8, s8 + 4), (std::vector<int8_t>{-16, 15, 0, 1}));
  uint8_t u8[] = {255, 7, 16};
  cpuDivide(u8, 3, DataType::kUint8, 8);
  EXPECT_EQ(std::vector<uint8_t>(u8, u8 + 3), (std::vector<uint8_t>{31, 0, 2}));
  uint32_t u32[] = {0xffffffffu, 10};
  cpuDivide(u32, 2, DataType::kUint32, 7);
  EXPECT_EQ(u32[0], 0xffffffffu / 7);
  EXPECT_EQ(u32[1], 1u);
  int64_t s64[] = {-(1ll << 62) - 1, (1ll << 62) + 5, -5};
  cpuDivide(s64, 3, DataType::kInt64, 4);
  EXPECT_EQ(s64[0], -(1ll << 60));
  EXPECT_EQ(s64[1], (1ll << 60) + 1);
  EXPECT_EQ(s64[2], -1);
  uint64_t u64[] = {UINT64_MAX, 5};
  cpuDivide(u64, 2, DataType::kUint64, 3);
  EXPECT_EQ(u64[0], UINT64_MAX / 3);  // the divisor must not turn the dividend signed
  EXPECT_EQ(u64[1], 1u);
}

TEST(CpuDivide, FloatsDivideInTheirType) {
  float f[] = {1.0f, -7.0f, 3.0f};
  cpuDivide(f, 3, DataType::kFloat32, 3);
  EXPECT_EQ(floatToBits(f[0]), floatToBits(1.0f / 3.0f));
  EXPECT_EQ(floatToBits(f[1]), floatToBits(-7.0f / 3.0f));
  EXPECT_EQ(f[2], 1.0f);
  double d[] = {1.0, 10.0};
  cpuDivide(d, 2, DataType::kFloat64, 7);
  EXPECT_EQ(std::bit_cast<uint64_t>(d[0]), std::bit_cast<uint64_t>(1.0 / 7.0));
  EXPECT_EQ(std::bit_cast<uint64_t>(d[1]), std::bit_cast<uint64_t>(10.0 / 7.0));
}

TEST(CpuDivide, SixteenBitFloatsGoThroughFloat32) {
  uint16_t h[] = {floatToHalf(3.0f), floatToHalf(1.0f), floatToHalf(-5.0f)};
  cpuDivide(h, 3, DataType::kFloat16, 2);
  EXPECT_EQ(h[0], 0x3e00);  // 1.5
  EXPECT_EQ(h[1], 0x3800);  // 0.5
  EXPECT_EQ(h[2], floatToHalf(-2.5f));
  uint16_t h3[] = {floatToHalf(1.0f)};
  cpuDivide(h3, 1, DataType::kFloat16, 3);
  EXPECT_EQ(h3[0], 0x3555);  // nearest half to 1/3
  uint16_t b[] = {0x3f80, 0x4040};  // 1, 3
  cpuDivide(b, 2, DataType::kBfloat16, 3);
  EXPECT_EQ(b[0], 0x3eab);  // nearest bfloat16 to 1/3
  EXPECT_EQ(b[1], 0x3f80);
}

TEST(CpuDivide, ByOneAndEmpty) {
  std::mt19937_64 rng(5);
  for (DataType t : kAllTypes) {
    auto a = randomBuffer(t, 17, rng);
    auto copy = a;
    cpuDivide(a.data(), 17, t, 1);
    EXPECT_EQ(a, copy) << dataTypeName(t) << " / 1";
    cpuDivide(a.data(), 0, t, 3);
    EXPECT_EQ(a, copy) << dataTypeName(t) << " n=0";
  }
}

}  // namespace
}  // namespace squeeze::device
