// The perf drivers' input and expected values; see inputs.h.
#include "inputs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "datatypes.h"

namespace squeeze::perf {
namespace {

// The inputs repeat with this period (a prime, so it lines up with no chunk size): the pattern
// of one period is computed element by element and then copied, so filling 256 MB stays cheap
// even when the expected value sums over many ranks.
constexpr size_t kPeriod = 65521;

// Whether `rank` gives a non-zero value to element j of a sum: all ranks up to 8, else 8 of them,
// rotating with j, so sums stay within [-40, 40] (exact in int8 and bfloat16).
bool sumContributes(int rank, int nranks, size_t j) {
  return nranks <= 8 || (static_cast<size_t>(rank) + j) % static_cast<size_t>(nranks) < 8;
}

int64_t inputValue(sqzRedOp_t op, bool unsignedType, int rank, int nranks, size_t j,
                   uint64_t seed) {
  switch (op) {
    case sqzSum:
    case sqzAvg: {
      if (!sumContributes(rank, nranks, j)) return 0;
      int64_t v = static_cast<int64_t>(elementHash(j, rank, seed) % 11);  // 0..10
      return unsignedType ? v : v - 5;
    }
    case sqzProd: {
      // Up to 3 ranks (rotating with j) give 2, the others 1 (or -1 for signed types).
      size_t m = static_cast<size_t>(std::max(nranks, 3));
      size_t twos = mix64(j ^ (seed << 20)) % 4;
      if ((static_cast<size_t>(rank) + j) % m < twos) return 2;
      if (!unsignedType && elementHash(j, rank, seed) % 7 == 0) return -1;
      return 1;
    }
    case sqzMax:
    case sqzMin:
    default: {
      int64_t v = static_cast<int64_t>(elementHash(j, rank, seed) % 41);  // 0..40
      return unsignedType ? v : v - 20;
    }
  }
}

void storeInt(sqzDataType_t t, void* buf, size_t i, int64_t v) {
  switch (t) {
    case sqzInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      break;
    case sqzUint8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case sqzInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      break;
    case sqzUint32:
      static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(v);
      break;
    case sqzInt64:
      static_cast<int64_t*>(buf)[i] = v;
      break;
    case sqzUint64:
      static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(v);
      break;
    case sqzFloat16:
      static_cast<uint16_t*>(buf)[i] = floatToHalf(static_cast<float>(v));
      break;
    case sqzFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case sqzFloat64:
      static_cast<double*>(buf)[i] = static_cast<double>(v);
      break;
    case sqzBfloat16:
      static_cast<uint16_t*>(buf)[i] = floatToBfloat16(static_cast<float>(v));
      break;
    default:
      break;
  }
}

// A floating type's value from the exactly rounded double q. Going through float first is still
// one correct rounding: float has more than 2p+2 bits for half's and bfloat16's p.
void storeReal(sqzDataType_t t, void* buf, size_t i, double q) {
  switch (t) {
    case sqzFloat16:
      static_cast<uint16_t*>(buf)[i] = floatToHalf(static_cast<float>(q));
      break;
    case sqzFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(q);
      break;
    case sqzFloat64:
      static_cast<double*>(buf)[i] = q;
      break;
    case sqzBfloat16:
      static_cast<uint16_t*>(buf)[i] = floatToBfloat16(static_cast<float>(q));
      break;
    default:
      break;
  }
}

// Fills buf[0 .. count) with value(j) for j = (first + i) % kPeriod: one period computed, the
// rest copied.
template <typename ValueFn>
void fillPeriodic(void* buf, size_t count, size_t first, sqzDataType_t type, ValueFn value) {
  size_t esz = typeSize(type);
  size_t n = std::min(count, kPeriod);
  for (size_t i = 0; i < n; ++i) value(buf, i, (first + i) % kPeriod);
  char* base = static_cast<char*>(buf);
  for (size_t done = n; done < count;) {
    size_t chunk = std::min(done, count - done);
    std::memcpy(base + done * esz, base, chunk * esz);
    done += chunk;
  }
}

}  // namespace

void fillInput(void* buf, size_t count, size_t first, sqzDataType_t type, sqzRedOp_t op, int rank,
               int nranks, uint64_t seed) {
  bool uns = isUnsigned(type);
  fillPeriodic(buf, count, first, type, [&](void* b, size_t i, size_t j) {
    storeInt(type, b, i, inputValue(op, uns, rank, nranks, j, seed));
  });
}

void fillReduced(void* buf, size_t count, size_t first, sqzDataType_t type, sqzRedOp_t op,
                 int nranks, uint64_t seed) {
  bool uns = isUnsigned(type);
  fillPeriodic(buf, count, first, type, [&](void* b, size_t i, size_t j) {
    int64_t acc = inputValue(op, uns, 0, nranks, j, seed);
    for (int r = 1; r < nranks; ++r) {
      int64_t v = inputValue(op, uns, r, nranks, j, seed);
      switch (op) {
        case sqzProd:
          acc *= v;
          break;
        case sqzMax:
          acc = std::max(acc, v);
          break;
        case sqzMin:
          acc = std::min(acc, v);
          break;
        default:
          acc += v;
          break;  // sum, avg
      }
    }
    if (op != sqzAvg) {
      storeInt(type, b, i, acc);
    } else if (isFloating(type)) {
      storeReal(type, b, i, static_cast<double>(acc) / nranks);
    } else {
      storeInt(type, b, i, acc / nranks);  // truncates toward zero
    }
  });
}

float gradientFromHashes(uint64_t shared, uint64_t noise) {
  // Four 16-bit uniforms summed: mean 2, variance 1/3, so (sum - 2) * sqrt(3) is roughly
  // standard normal (and bounded by 2 sqrt(3), so no outlier dominates a norm by chance).
  auto normal = [](uint64_t h) {
    double sum = 0;
    for (int k = 0; k < 4; ++k) sum += static_cast<double>((h >> (16 * k)) & 0xffffu) / 65536.0;
    return (sum - 2.0) * 1.7320508075688772;
  };
  double scale = std::exp2(-8.0 * static_cast<double>(shared >> 40) / 16777216.0);
  return static_cast<float>(scale * (0.5 * normal(mix64(shared)) + normal(noise)));
}

float gradientValue(size_t j, int rank, uint64_t seed) {
  constexpr uint64_t kShared = 0x9d1c3f27a5b4e681ull;  // not a rank: the ranks' common part
  return gradientFromHashes(
      elementHash(j, kShared, seed),
      elementHash(j, static_cast<uint64_t>(rank) + 1, seed ^ 0x6a09e667f3bcc909ull));
}

void fillGradient(float* buf, size_t count, size_t first, int rank, uint64_t seed) {
  for (size_t i = 0; i < count; ++i) buf[i] = gradientValue(first + i, rank, seed);
}

void fillPattern(void* buf, size_t count, size_t first, sqzDataType_t type, int rank,
                 uint64_t seed) {
  // The max/min values of a lone rank: 41 small integers, exact in every datatype.
  fillInput(buf, count, first, type, sqzMax, rank, 1, seed);
}

}  // namespace squeeze::perf
