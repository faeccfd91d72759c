// The perf drivers' datatype and op names, sizes and 16-bit conversions; see datatypes.h.
#include "datatypes.h"

#include <bit>
#include <cmath>

namespace squeeze::perf {

const char* typeName(sqzDataType_t t) {
  for (const TypeName& n : kTypes)
    if (n.type == t) return n.name;
  return "?";
}

const char* opName(sqzRedOp_t op) {
  for (const OpName& n : kOps)
    if (n.op == op) return n.name;
  return "?";
}

bool isFloating(sqzDataType_t t) {
  return t == sqzFloat16 || t == sqzFloat32 || t == sqzFloat64 || t == sqzBfloat16;
}

bool isUnsigned(sqzDataType_t t) { return t == sqzUint8 || t == sqzUint32 || t == sqzUint64; }

size_t typeSize(sqzDataType_t type) {
  switch (type) {
    case sqzInt8:
    case sqzUint8:
      return 1;
    case sqzFloat16:
    case sqzBfloat16:
      return 2;
    case sqzInt32:
    case sqzUint32:
    case sqzFloat32:
      return 4;
    case sqzInt64:
    case sqzUint64:
    case sqzFloat64:
      return 8;
    default:
      return 0;
  }
}

uint16_t floatToHalf(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: keep it quiet and keep the top payload bits
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (a >= 0x38800000u) {                                              // normal half (>= 2^-14)
    uint32_t h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry bumps the exponent
    return static_cast<uint16_t>(sign | h);
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (the tie goes to even 0)
  // Subnormal half: units of 2^-24. a's value is m * 2^(e-23) with e in [-25, -15].
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  int e = static_cast<int>(a >> 23) - 127;
  int shift = -e - 1;  // 14 .. 24
  uint32_t h = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t floatToBfloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; overflow carries into inf
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace squeeze::perf
