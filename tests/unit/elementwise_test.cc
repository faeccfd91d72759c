// Unit tests for device/elementwise.h, the per-element math both backends compile (the CUDA
// kernels run exactly these functions, so checking them here checks the GPU's arithmetic too):
//   - the 16-bit conversions against references built from exact double arithmetic (ldexp and
//     nearest-of-two-neighbours), over every float16 and bfloat16 bit pattern, every tie
//     between adjacent values and a sample of all floats, and what happens to NaN;
//   - the reduction of two elements for every datatype and op against straightforward
//     references, with two's-complement wrap-around for the signed integers and one rounding
//     per operation for the 16-bit floats; avg's per-element divide;
//   - each quantizer's per-value encode and decode at the edges (clamping, ties, NaN, zero
//     blocks, the extremes of the random draw).
#include "device/elementwise.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>

#include "device/quantize.h"

namespace squeeze::device {
namespace {

float fromBits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t toBits(float f) { return std::bit_cast<uint32_t>(f); }

// ---- references for the 16-bit formats ------------------------------------------------------

// The value of a finite float16, from its fields.
double halfValue(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
bool halfIsNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16IsNan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// The nearer of lo and hi (magnitudes, hi = lo + 1 as patterns) to |v|; ties to the even one.
uint16_t nearer(double v, uint16_t lo, double vlo, double vhi) {
  const double dlo = v - vlo, dhi = vhi - v;
  if (dlo < dhi) return lo;
  if (dlo > dhi) return static_cast<uint16_t>(lo + 1);
  return (lo & 1) ? static_cast<uint16_t>(lo + 1) : lo;
}

// Nearest float16 to a non-NaN float, ties to even, as if 65536 (the pattern after the largest
// finite) were a value: what rounds there is infinity.
uint16_t refFloatToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(f)) return sign | 0x7c00;
  uint16_t lo = 0, hi = 0x7c00;  // binary search: the largest finite pattern <= a
  while (hi - lo > 1) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    (halfValue(mid) <= a ? lo : hi) = mid;
  }
  const double vhi = lo == 0x7bff ? 65536.0 : halfValue(static_cast<uint16_t>(lo + 1));
  return sign | nearer(a, lo, halfValue(lo), vhi);
}

// Nearest bfloat16 to a non-NaN float (bfloat16 is float's top half: the neighbours are the
// truncation and the next pattern; 2^128 stands for the one past the largest finite).
uint16_t refFloatToBf16(float f) {
  const uint32_t x = toBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t mag = x & 0x7fffffffu;
  if (mag == 0x7f800000u) return sign | 0x7f80;
  const uint16_t lo = static_cast<uint16_t>(mag >> 16);
  const double vlo = fromBits(static_cast<uint32_t>(lo) << 16);
  const double vhi =
      lo == 0x7f7f ? std::ldexp(1.0, 128) : fromBits(static_cast<uint32_t>(lo + 1) << 16);
  return sign | nearer(fromBits(mag), lo, vlo, vhi);
}

// ---- conversions -----------------------------------------------------------------------------

TEST(ElementwiseHalf, EveryPatternWidensToItsValue) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = halfToFloat(h);
    if ((h & 0x7c00) == 0x7c00) {
      if (h & 0x3ff) {  // NaN: sign and payload kept (payload in the top mantissa bits)
        ASSERT_TRUE(std::isnan(f)) << std::hex << b;
        ASSERT_EQ(toBits(f), (static_cast<uint32_t>(h & 0x8000) << 16) | 0x7f800000u |
                                 (static_cast<uint32_t>(h & 0x3ff) << 13))
            << std::hex << b;
      } else {
        ASSERT_TRUE(std::isinf(f)) << std::hex << b;
        ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << b;
      }
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), halfValue(h)) << std::hex << b;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << b;  // -0 stays -0
    ASSERT_EQ(floatToHalf(f), h) << "round trip 0x" << std::hex << b;
  }
}

TEST(ElementwiseHalf, NanNarrowsToAQuietNanWithItsSign) {
  for (uint32_t x : {0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00000u}) {
    const uint16_t h = floatToHalf(fromBits(x));
    EXPECT_TRUE(halfIsNan(h)) << std::hex << x;
    EXPECT_EQ(h & 0x8000, (x >> 16) & 0x8000) << std::hex << x;
    EXPECT_NE(h & 0x200, 0) << std::hex << x;  // quiet, whatever the payload was
  }
}

TEST(ElementwiseHalf, EveryTieAndItsNeighboursRoundAsTheReference) {
  for (uint32_t b = 0; b < 0x7c00; ++b) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const double lo = halfValue(static_cast<uint16_t>(b | sign));
      const double hi = b + 1 == 0x7c00 ? (sign ? -65536.0 : 65536.0)
                                        : halfValue(static_cast<uint16_t>((b + 1) | sign));
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
      for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)})
        ASSERT_EQ(floatToHalf(f), refFloatToHalf(f)) << "0x" << std::hex << toBits(f);
    }
  }
}

TEST(ElementwiseHalf, SampledFloatsRoundAsTheReference) {
  for (uint64_t b = 0; b <= 0xffffffffull; b += 65537) {  // every exponent, both signs
    const float f = fromBits(static_cast<uint32_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(floatToHalf(f), refFloatToHalf(f)) << "0x" << std::hex << b;
  }
}

TEST(ElementwiseBfloat16, EveryPatternWidensExactlyAndRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t v = static_cast<uint16_t>(b);
    const float f = bfloat16ToFloat(v);
    ASSERT_EQ(toBits(f), b << 16);
    if (bf16IsNan(v)) {
      const uint16_t back = floatToBfloat16(f);
      ASSERT_TRUE(bf16IsNan(back)) << std::hex << b;
      ASSERT_EQ(back, v | 0x40) << std::hex << b;  // quietened, sign and payload kept
      continue;
    }
    ASSERT_EQ(floatToBfloat16(f), v) << std::hex << b;
  }
}

TEST(ElementwiseBfloat16, EveryTieAndItsNeighboursRoundAsTheReference) {
  for (uint32_t b = 0; b < 0x7f80; ++b) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const uint32_t lo = (b | sign) << 16;
      // The midpoint is the pattern with the dropped half's top bit set: exactly a tie.
      const float mid = fromBits(lo | 0x8000u);
      for (float f : {mid, fromBits(lo | 0x7fffu), fromBits(lo | 0x8001u)})
        ASSERT_EQ(floatToBfloat16(f), refFloatToBf16(f)) << "0x" << std::hex << toBits(f);
    }
  }
  EXPECT_EQ(floatToBfloat16(fromBits(0x7f7f8000u)), 0x7f80);  // ties up to infinity
  EXPECT_EQ(floatToBfloat16(fromBits(0x3f808000u)), 0x3f80);  // tie to even (down)
  EXPECT_EQ(floatToBfloat16(fromBits(0x3f818000u)), 0x3f82);  // tie to even (up)
}

TEST(ElementwiseBfloat16, SampledFloatsRoundAsTheReference) {
  for (uint64_t b = 0; b <= 0xffffffffull; b += 65521) {
    const float f = fromBits(static_cast<uint32_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(floatToBfloat16(f), refFloatToBf16(f)) << "0x" << std::hex << b;
  }
}

TEST(ElementwiseBits, CastsAndAbs) {
  EXPECT_EQ(floatBits(1.0f), 0x3f800000u);
  EXPECT_EQ(floatFromBits(0xc0000000u), -2.0f);
  EXPECT_EQ(floatBits(absOf(-0.0f)), 0u);
  EXPECT_EQ(floatBits(absOf(fromBits(0xffc00001u))), 0x7fc00001u);  // NaN keeps its payload
  EXPECT_EQ(absOf(-FLT_MAX), FLT_MAX);
}

// ---- reduction of two elements ---------------------------------------------------------------

template <class T, class Op>
T reducePlain(T a, T b) {
  return reduceElement<PlainElem<T>, Op>(a, b);
}

TEST(ElementwiseReduce, SignedIntegersWrapAround) {
  constexpr int32_t i32max = std::numeric_limits<int32_t>::max();
  constexpr int64_t i64max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ((reducePlain<int32_t, OpSum>(i32max, 1)), std::numeric_limits<int32_t>::min());
  EXPECT_EQ((reducePlain<int32_t, OpSum>(-1, -1)), -2);
  EXPECT_EQ((reducePlain<int64_t, OpSum>(i64max, 2)), std::numeric_limits<int64_t>::min() + 1);
  EXPECT_EQ((reducePlain<int32_t, OpProd>(0x10000, 0x10000)), 0);
  EXPECT_EQ((reducePlain<int32_t, OpProd>(i32max, 2)), -2);
  EXPECT_EQ((reducePlain<int64_t, OpProd>(int64_t{1} << 62, 4)), 0);
  EXPECT_EQ((reducePlain<int64_t, OpProd>(-3, 5)), -15);
  EXPECT_EQ((reducePlain<int8_t, OpSum>(127, 1)), -128);
  EXPECT_EQ((reducePlain<int8_t, OpProd>(-128, -1)), -128);
  EXPECT_EQ((reducePlain<uint8_t, OpSum>(255, 1)), 0);
  EXPECT_EQ((reducePlain<uint32_t, OpProd>(0x80000000u, 2)), 0u);
  EXPECT_EQ((reducePlain<uint64_t, OpSum>(~uint64_t{0}, 2)), 1u);
}

TEST(ElementwiseReduce, MaxMinAndFloats) {
  EXPECT_EQ((reducePlain<int8_t, OpMax>(-5, 3)), 3);
  EXPECT_EQ((reducePlain<int64_t, OpMin>(-5, 3)), -5);
  EXPECT_EQ((reducePlain<uint32_t, OpMax>(0xffffffffu, 1)), 0xffffffffu);
  EXPECT_EQ((reducePlain<float, OpSum>(0.1f, 0.2f)), 0.1f + 0.2f);
  EXPECT_EQ((reducePlain<double, OpProd>(0.1, 3.0)), 0.1 * 3.0);
  // a op b with a NaN: the comparison decides, so NaN b wins only when a does not compare.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ((reducePlain<float, OpMax>(nan, 1.0f)), 1.0f);
  EXPECT_TRUE(std::isnan((reducePlain<float, OpMax>(1.0f, nan))));
  EXPECT_EQ((reducePlain<float, OpMin>(nan, 1.0f)), 1.0f);
}

TEST(ElementwiseReduce, SixteenBitFloatsCombineInFloatAndRoundOnce) {
  std::mt19937 gen(11);
  for (int i = 0; i < 200000; ++i) {
    const auto a = static_cast<uint16_t>(gen()), b = static_cast<uint16_t>(gen());
    if (!halfIsNan(a) && !halfIsNan(b) && (a & 0x7c00) != 0x7c00 && (b & 0x7c00) != 0x7c00) {
      const double x = halfValue(a), y = halfValue(b);
      // The sum and product of two halves are exact in double, so converting them gives
      // float32's correctly rounded result; then one rounding to half.
      EXPECT_EQ((reduceElement<HalfElem, OpSum>(a, b)), refFloatToHalf(static_cast<float>(x + y)));
      EXPECT_EQ((reduceElement<HalfElem, OpProd>(a, b)), refFloatToHalf(static_cast<float>(x * y)));
      EXPECT_EQ((reduceElement<HalfElem, OpMax>(a, b)), x > y ? a : b);
    }
    if (!bf16IsNan(a) && !bf16IsNan(b)) {
      const float x = bfloat16ToFloat(a), y = bfloat16ToFloat(b);
      const float sum = x + y;  // float32's own rounding first, then one to bfloat16
      if (!std::isnan(sum)) {
        EXPECT_EQ((reduceElement<Bfloat16Elem, OpSum>(a, b)), refFloatToBf16(sum));
      }
      EXPECT_EQ((reduceElement<Bfloat16Elem, OpMin>(a, b)), x < y ? a : b);
    }
  }
  // 1 + 2^-11 is a tie between 1 and the next half: even wins.
  EXPECT_EQ((reduceElement<HalfElem, OpSum>(0x3c00, floatToHalf(std::ldexp(1.0f, -11)))), 0x3c00);
  EXPECT_EQ((reduceElement<HalfElem, OpSum>(0x7bff, 0x7bff)), 0x7c00);  // overflow to inf
}

TEST(ElementwiseReduce, DivideTruncatesIntegersAndRoundsFloatsOnce) {
  EXPECT_EQ(divideElement<PlainElem<int32_t>>(-7, 2), -3);
  EXPECT_EQ(divideElement<PlainElem<int8_t>>(-128, 3), -42);
  EXPECT_EQ(divideElement<PlainElem<uint64_t>>(~uint64_t{0}, 2), ~uint64_t{0} / 2);
  EXPECT_EQ(divideElement<PlainElem<float>>(1.0f, 3), 1.0f / 3.0f);
  EXPECT_EQ(divideElement<PlainElem<double>>(1.0, 3), 1.0 / 3.0);
  EXPECT_EQ(divideElement<HalfElem>(0x3c00, 3), floatToHalf(1.0f / 3.0f));
  EXPECT_EQ(divideElement<Bfloat16Elem>(0x3f80, 3), floatToBfloat16(1.0f / 3.0f));
}

TEST(ElementwiseReduce, DispatchPicksTheElementAndOp) {
  EXPECT_TRUE(visitElement(DataType::kFloat16,
                           [](auto e) { return std::is_same_v<decltype(e), HalfElem>; }));
  EXPECT_TRUE(visitElement(DataType::kBfloat16,
                           [](auto e) { return std::is_same_v<decltype(e), Bfloat16Elem>; }));
  EXPECT_TRUE(visitElement(
      DataType::kUint64, [](auto e) { return std::is_same_v<decltype(e), PlainElem<uint64_t>>; }));
  EXPECT_TRUE(visitOp(RedOp::kAvg, [](auto o) { return std::is_same_v<decltype(o), OpSum>; }));
  EXPECT_TRUE(visitOp(RedOp::kMin, [](auto o) { return std::is_same_v<decltype(o), OpMin>; }));
  EXPECT_FALSE(visitOp(static_cast<RedOp>(99), [](auto) { return true; }));
}

// ---- quantizers ------------------------------------------------------------------------------

TEST(ElementwiseQuantize, UniformDrawsSpanZeroToOneExclusive) {
  EXPECT_EQ(uniform24(0), 0.0f);
  EXPECT_EQ(uniform24(0xff), 0.0f);  // the low 8 bits are dropped
  EXPECT_EQ(uniform24(0x100), std::ldexp(1.0f, -24));
  EXPECT_EQ(uniform24(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
}

TEST(ElementwiseQuantize, Int8RoundsToEvenAndClamps) {
  const auto code = [](float x) { return static_cast<int8_t>(int8Code(x, 1.0f)); };
  EXPECT_EQ(code(0.5f), 0);
  EXPECT_EQ(code(1.5f), 2);
  EXPECT_EQ(code(2.5f), 2);
  EXPECT_EQ(code(-0.5f), 0);
  EXPECT_EQ(code(-1.5f), -2);
  EXPECT_EQ(code(126.6f), 127);
  EXPECT_EQ(code(1e30f), 127);
  EXPECT_EQ(code(-1e30f), -127);  // never -128
  EXPECT_EQ(code(std::numeric_limits<float>::quiet_NaN()), -127);
  EXPECT_EQ(int8Code(127.0f * 3.0f, 3.0f), 127);
  EXPECT_EQ(int8Scale(127.0f), 1.0f);
  EXPECT_EQ(int8Divisor(0.0f), 1.0f);
  EXPECT_EQ(int8Divisor(0.25f), 0.25f);
  EXPECT_EQ(int8Value(0x81, 2.0f), -254.0f);
  EXPECT_EQ(int8Value(0x7f, 0.5f), 63.5f);
}

TEST(ElementwiseQuantize, QsgdLevelsRoundStochasticallyAndKeepTheSign) {
  const uint32_t low = 0, high = 0xffffffffu;     // u = 0 and u = 1 - 2^-24
  EXPECT_EQ(qsgdCode(0.5f, low, 1.0f, 4.0f), 2);  // a = 2 exactly: no draw can change it
  EXPECT_EQ(qsgdCode(0.5f, high, 1.0f, 4.0f), 2);
  EXPECT_EQ(qsgdCode(0.3f, low, 1.0f, 1.0f), 1);  // u < 0.3
  EXPECT_EQ(qsgdCode(0.3f, high, 1.0f, 1.0f), 0);
  EXPECT_EQ(qsgdCode(-0.3f, low, 1.0f, 1.0f), -1);
  EXPECT_EQ(qsgdCode(-0.0f, low, 1.0f, 7.0f), 0);
  EXPECT_EQ(qsgdCode(5.0f, high, 1.0f, 7.0f), 7);  // beyond the norm: clamped to s
  EXPECT_EQ(qsgdCode(-5.0f, high, 1.0f, 7.0f), -7);
  EXPECT_EQ(qsgdCode(std::numeric_limits<float>::quiet_NaN(), low, 1.0f, 7.0f), 0);
  EXPECT_EQ(qsgdNorm(4.0), 2.0f);
  EXPECT_EQ(qsgdNorm(1e300), FLT_MAX);
  EXPECT_EQ(qsgdNorm(std::numeric_limits<double>::infinity()), FLT_MAX);
  EXPECT_EQ(qsgdNorm(std::numeric_limits<double>::quiet_NaN()), FLT_MAX);
  EXPECT_EQ(qsgdDivisor(0.0f), 1.0f);
  EXPECT_EQ(qsgdStep(3.0f, 4), 0.75f);
  EXPECT_EQ(qsgdValue(-3, 0.75f), -2.25f);
  EXPECT_EQ(squareOf(3.0f), 9.0);
  EXPECT_EQ(squareOf(FLT_MAX), double(FLT_MAX) * double(FLT_MAX));  // exact in double
}

TEST(ElementwiseQuantize, NibblesRoundTripEveryCode) {
  for (int a = -8; a < 8; ++a)
    for (int b = -8; b < 8; ++b) {
      const uint8_t byte = packNibblePair(static_cast<int8_t>(a), static_cast<int8_t>(b));
      ASSERT_EQ(lowNibbleCode(byte), a);
      ASSERT_EQ(highNibbleCode(byte), b);
    }
  EXPECT_EQ(packNibblePair(-7, 7), 0x79);
  EXPECT_EQ(packNibblePair(3, 0), 0x03);
}

TEST(ElementwiseQuantize, OnebitSidesFollowTheSignBit) {
  EXPECT_EQ(signBit(-0.0f), 1u);
  EXPECT_EQ(signBit(0.0f), 0u);
  EXPECT_EQ(signBit(-1e-45f), 1u);
  EXPECT_EQ(clearSidePart(3.0f), 3.0f);
  EXPECT_EQ(floatBits(clearSidePart(-3.0f)), 0u);  // +0 on the other side
  EXPECT_EQ(setSidePart(-3.0f), -3.0f);
  EXPECT_EQ(floatBits(setSidePart(3.0f)), 0u);
  EXPECT_EQ(floatBits(setSidePart(-0.0f)), 0x80000000u);
  EXPECT_EQ(onebitMean(6.0, 3), 2.0f);
  EXPECT_EQ(onebitMean(-1.0, 3), static_cast<float>(-1.0 / 3.0));  // divided in double
  EXPECT_EQ(onebitMean(5.0, 0), 0.0f);
  EXPECT_EQ(onebitValue(0, 1.5f, -2.5f), 1.5f);
  EXPECT_EQ(onebitValue(1, 1.5f, -2.5f), -2.5f);
}

TEST(ElementwiseQuantize, TerngradKeepsWithProbabilityMagnitudeOverScale) {
  const uint32_t low = 0, high = 0xffffffffu;
  EXPECT_EQ(terngradCode(2.0f, high, 2.0f), 1u);  // p = 1: always kept
  EXPECT_EQ(terngradCode(-2.0f, high, 2.0f), 3u);
  EXPECT_EQ(terngradCode(0.0f, low, 2.0f), 0u);  // p = 0: never (u < 0 is false)
  EXPECT_EQ(terngradCode(1.0f, low, 2.0f), 1u);
  EXPECT_EQ(terngradCode(1.0f, high, 2.0f), 0u);
  EXPECT_EQ(terngradCode(-1.0f, low, 2.0f), 3u);
  EXPECT_EQ(terngradDivisor(0.0f), 1.0f);
  EXPECT_EQ(terngradValue(1, 2.0f), 2.0f);
  EXPECT_EQ(terngradValue(3, 2.0f), -2.0f);
  EXPECT_EQ(terngradValue(0, 2.0f), 0.0f);
  EXPECT_EQ(terngradValue(2, 2.0f), 0.0f);  // never written; decodes as 0
}

TEST(ElementwiseQuantize, FeedbackAndDecodeAddRoundEachStep) {
  EXPECT_EQ(residualAfter(1.0f, 3.0f, 2.5f), 1.5f);
  // x - decoded first, then the add: 1 + (2^-24 + 2^-24) is exact, while (1 + 2^-24) would
  // round back to 1 (a tie, to even) and lose both halves.
  const float big = 1.0f, tiny = std::ldexp(1.0f, -24);
  EXPECT_EQ(residualAfter(big, tiny, -tiny), big + (tiny + tiny));
  EXPECT_EQ(addDecoded(1.0f, int8Value(0x01, 0.1f)), 1.0f + 0.1f);
}

TEST(ElementwiseQuantize, CounterHashIsTheRunKeyedMix) {
  const uint64_t key = counterKey(7, 3, 1);
  for (uint64_t index : {uint64_t{0}, uint64_t{12345}, (uint64_t{1} << 32) - 1, uint64_t{1} << 32,
                         (uint64_t{5} << 32) + 77}) {
    const uint32_t expect =
        mix32(static_cast<uint32_t>(index) * 0x9e3779b9u ^
              static_cast<uint32_t>(mix64(key + (index >> 32) * 0x9e3779b97f4a7c15ull)));
    EXPECT_EQ(counterHash(key, index), expect) << index;
  }
  EXPECT_NE(counterKey(7, 3, 1), counterKey(7, 3, 2));
}

}  // namespace
}  // namespace squeeze::device
