// CPU quantizer kernels (see device/quantize.h). Each block is processed in passes over plain
// arrays that GCC vectorizes at -O2/-O3, once for baseline x86-64 and once for AVX2 (chosen at
// run time: the counter hash's 32-bit multiplies need it to be fast): a reduction pass for
// the block's scale (kept in 8 fixed lanes, so the result does not depend on the vector width),
// then tiles of kTile values, hot in L1: counter-hash draws into a small buffer, quantize into
// codes, pack, and for encodeFeedback decode the tile back and update the residual and norms.
// Where the CPU has AVX2, the whole rows of 8 of encodeFeedback (and the scale passes of 1-bit
// and QSGD) run as one fused loop of intrinsics instead ("AVX2 rows" below), with the same
// float operations per value, so the same bits; the portable passes take the rest.
// Decode and decode-add share one loop per codec, templated on where the value goes; "add in
// place" is its own instantiation so that no loop has to guess whether out and local overlap.
// The 1-bit sign packing and expansion use SSE2 (baseline on x86-64), which GCC does not derive
// from the plain loops; the portable loops below them give the same bits. Both instruction sets
// run the same IEEE operations in the same order (the reductions' 8 lanes are fixed, no FMA),
// so payloads and decoded values do not depend on the CPU: mixed hosts agree bit for bit. Each
// value's math is device/elementwise.h's (int8Code, qsgdCode, ...), which device/cuda/quantize.cu
// runs too, so the GPU's payloads are these bit for bit as well.
#include "device/quantize.h"

#include <algorithm>
#include <cstring>

#include "device/cpu/dispatch.h"
#include "device/elementwise.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if SQZ_CPU_X86
#include <immintrin.h>
#endif

namespace squeeze::device {
namespace {

using cpu::dispatch;

constexpr size_t kTile = 256;  // values per inner pass; a multiple of 8 (whole code bytes)

// Where decoded values go: stored, added to a separate local array, or added in place.
enum Sink { kStore, kAdd, kAddInPlace };

SQZ_INLINE float loadScale(const void* scales, size_t i) {
  float f;
  std::memcpy(&f, static_cast<const char*>(scales) + 4 * i, 4);
  return f;
}
SQZ_INLINE void storeScale(void* scales, size_t i, float f) {
  std::memcpy(static_cast<char*>(scales) + 4 * i, &f, 4);
}

template <Sink S>
SQZ_INLINE void put(float* __restrict out, const float* __restrict local, size_t i, float v) {
  if constexpr (S == kStore) out[i] = v;
  if constexpr (S == kAdd) out[i] = addDecoded(local[i], v);
  if constexpr (S == kAddInPlace) out[i] = addDecoded(out[i], v);
}

// max |x[i]| as the largest magnitude bit pattern: exact and order-free (NaN wins over inf).
SQZ_INLINE float maxAbs(const float* __restrict x, size_t n) {
  uint32_t lane[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const uint32_t b = floatBits(x[i + j]) & 0x7fffffffu;
      lane[j] = b > lane[j] ? b : lane[j];
    }
  uint32_t m = 0;
  for (; i < n; ++i) {
    const uint32_t b = floatBits(x[i]) & 0x7fffffffu;
    m = b > m ? b : m;
  }
  for (int j = 0; j < 8; ++j) m = lane[j] > m ? lane[j] : m;
  return floatFromBits(m);
}

// r[t] = counterHash(key, first + t) for t < len; split where the index crosses 2^32.
SQZ_INLINE void fillRandom(uint64_t key, uint64_t first, size_t len, uint32_t* __restrict r) {
  size_t t = 0;
  while (t < len) {
    const uint64_t index = first + t;
    const uint32_t lo = static_cast<uint32_t>(index);
    const size_t run = std::min<uint64_t>(len - t, (uint64_t{1} << 32) - lo);
    const uint32_t k = counterRunKey(key, index >> 32);
    uint32_t* __restrict o = r + t;
    for (size_t j = 0; j < run; ++j)
      o[j] = mix32((lo + static_cast<uint32_t>(j)) * 0x9e3779b9u ^ k);
    t += run;
  }
}

// Error feedback of one tile in one loop over it: norms in 8 double lanes (the tile's tail in
// lanes 0, 1, ...), then residual += x - decoded. The residual (the codec handle's own array)
// never overlaps x or the tile buffer d.
class FeedbackLanes {
 public:
  SQZ_INLINE void tile(const float* __restrict x, const float* __restrict d, size_t n,
                       float* __restrict residual) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const cpu::Float8 xv = cpu::loadFloat8(x + i), dv = cpu::loadFloat8(d + i);
      in_.addSquaresOf(x + i);
      sent_.addSquaresOf(d + i);
      if (residual) cpu::storeFloat8(residual + i, cpu::loadFloat8(residual + i) + (xv - dv));
    }
    for (int j = 0; i < n; ++i, ++j) {
      in_.addAt(j, squareOf(x[i]));
      sent_.addAt(j, squareOf(d[i]));
      if (residual) residual[i] = residualAfter(residual[i], x[i], d[i]);
    }
  }
  // For the AVX2 rows below, which carry the lanes on.
  cpu::Double8& inputLanes() { return in_; }
  cpu::Double8& sentLanes() { return sent_; }
  SQZ_INLINE void flush(Feedback* fb) const {
    if (!fb->norms) return;
    for (int j = 0; j < 8; ++j) {
      fb->norms->inputSq += in_.at(j);
      fb->norms->sentSq += sent_.at(j);
    }
  }

 private:
  cpu::Double8 in_, sent_;
};

// ---- AVX2 rows ---------------------------------------------------------------------------
// A fused encode with feedback over whole rows of 8 values of one block, in AVX2 registers:
// codes, the decoded values (never stored), the residual and the norm lanes in one loop, with
// the same IEEE operations per value as the portable passes (which the baseline code and the
// block tails run; quantize_test's SameBitsOnEveryInstructionSet holds the two to the same bits).
// GCC's own vectorization of those passes keeps the decoded tile in memory and converts floats
// to double 2 at a time; these do each once per row.
#if SQZ_CPU_X86
#define SQZ_AVX2 __attribute__((target("avx2"), always_inline)) inline

// The residual and the norm lanes of rows of values x and their decoded values d (row at k).
struct RowFeedback {
  __m256d in0, in1, sent0, sent1;
  float* residual;
  SQZ_AVX2 static __m256d square(__m128 v) {
    const __m256d w = _mm256_cvtps_pd(v);
    return _mm256_mul_pd(w, w);
  }
  SQZ_AVX2 void add(__m256 xv, __m256 d, size_t k) {
    in0 = _mm256_add_pd(in0, square(_mm256_castps256_ps128(xv)));
    in1 = _mm256_add_pd(in1, square(_mm256_extractf128_ps(xv, 1)));
    sent0 = _mm256_add_pd(sent0, square(_mm256_castps256_ps128(d)));
    sent1 = _mm256_add_pd(sent1, square(_mm256_extractf128_ps(d, 1)));
    if (residual) {  // residualAfter: residual + (x - d)
      float* r = residual + k;
      _mm256_storeu_ps(r, _mm256_add_ps(_mm256_loadu_ps(r), _mm256_sub_ps(xv, d)));
    }
  }
};

SQZ_AVX2 RowFeedback rowsBegin(FeedbackLanes& lanes, float* residual) {
  cpu::Double8 &in = lanes.inputLanes(), &sent = lanes.sentLanes();
  return {in.lo, in.hi, sent.lo, sent.hi, residual};
}
SQZ_AVX2 void rowsEnd(const RowFeedback& f, FeedbackLanes& lanes) {
  lanes.inputLanes() = {f.in0, f.in1};
  lanes.sentLanes() = {f.sent0, f.sent1};
}

// int8 over rows * 8 values (rows of the block at x; codes and residual at the same place).
__attribute__((target("avx2"))) void int8RowsAvx2(const float* x, size_t len, float divisor,
                                                  float scale, uint8_t* codes, float* residual,
                                                  FeedbackLanes& lanes) {
  RowFeedback f = rowsBegin(lanes, residual);
  const __m256 div = _mm256_set1_ps(divisor), sc = _mm256_set1_ps(scale);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256 magic = _mm256_set1_ps(0x1.8p23f);
  const __m256i gather = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
  for (size_t k = 0; k < len; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    __m256 t = _mm256_div_ps(xv, div);
    t = _mm256_max_ps(t, lo);  // t >= -127 ? t : -127 (max gives its second operand for NaN)
    t = _mm256_min_ps(t, hi);  // t <= 127 ? t : 127
    t = _mm256_sub_ps(_mm256_add_ps(t, magic), magic);
    // The whole number t as a byte: to int32, then packed (no saturation at |t| <= 127).
    const __m256i w = _mm256_cvttps_epi32(t);
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(w, w), w);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + k),
                     _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, gather)));
    // int8Value: code * scale, and the code converted back is t itself.
    f.add(xv, _mm256_mul_ps(t, sc), k);
  }
  rowsEnd(f, lanes);
}

// 1-bit over rows: the sign bits, 8 to a byte, and each value decoded to its side's mean.
__attribute__((target("avx2"))) void onebitRowsAvx2(const float* x, size_t len, float pos,
                                                    float neg, uint8_t* codes, float* residual,
                                                    FeedbackLanes& lanes) {
  RowFeedback f = rowsBegin(lanes, residual);
  const __m256 p = _mm256_set1_ps(pos), q = _mm256_set1_ps(neg);
  for (size_t k = 0; k < len; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    codes[k / 8] = static_cast<uint8_t>(_mm256_movemask_ps(xv));  // signBit, low bit first
    f.add(xv, _mm256_blendv_ps(p, q, xv), k);                     // onebitValue: sign set -> neg
  }
  rowsEnd(f, lanes);
}

// The 1-bit sums' rows (signSums): lane j of sp and sn += the row's value j on its side (+0 on
// the other), and the number of set sign bits in rows * 8 values.
__attribute__((target("avx2"))) size_t signSumRowsAvx2(const float* x, size_t len, cpu::Double8& sp,
                                                       cpu::Double8& sn) {
  __m256d p0 = sp.lo, p1 = sp.hi, q0 = sn.lo, q1 = sn.hi;
  size_t count = 0;
  for (size_t k = 0; k < len; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    const __m256 side = _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(xv), 31));
    const __m256 clear = _mm256_andnot_ps(side, xv), set = _mm256_and_ps(side, xv);
    p0 = _mm256_add_pd(p0, _mm256_cvtps_pd(_mm256_castps256_ps128(clear)));
    p1 = _mm256_add_pd(p1, _mm256_cvtps_pd(_mm256_extractf128_ps(clear, 1)));
    q0 = _mm256_add_pd(q0, _mm256_cvtps_pd(_mm256_castps256_ps128(set)));
    q1 = _mm256_add_pd(q1, _mm256_cvtps_pd(_mm256_extractf128_ps(set, 1)));
    count += static_cast<size_t>(__builtin_popcount(_mm256_movemask_ps(xv)));
  }
  sp = {p0, p1};
  sn = {q0, q1};
  return count;
}

// l2Norm's rows: lane j += squareOf(the row's value j), over rows * 8 values.
__attribute__((target("avx2"))) void squareRowsAvx2(const float* x, size_t len,
                                                    cpu::Double8& lanes) {
  __m256d s0 = lanes.lo, s1 = lanes.hi;
  for (size_t k = 0; k < len; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    s0 = _mm256_add_pd(s0, RowFeedback::square(_mm256_castps256_ps128(xv)));
    s1 = _mm256_add_pd(s1, RowFeedback::square(_mm256_extractf128_ps(xv, 1)));
  }
  lanes = {s0, s1};
}

// uniform24 of eight draws.
SQZ_AVX2 __m256 uniform24Avx2(const uint32_t* r) {
  const __m256i v = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r)), 8);
  return _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(0x1p-24f));
}
SQZ_AVX2 __m256 absAvx2(__m256 x) {
  return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

// TernGrad over rows: 2-bit codes 4 to a byte from the draws r, decoded to +s, -s or 0.
__attribute__((target("avx2"))) void terngradRowsAvx2(const float* x, const uint32_t* r, size_t len,
                                                      float s, float divisor, uint8_t* codes,
                                                      float* residual, FeedbackLanes& lanes) {
  RowFeedback f = rowsBegin(lanes, residual);
  const __m256 div = _mm256_set1_ps(divisor), plus = _mm256_set1_ps(s), minus = _mm256_set1_ps(-s);
  const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  for (size_t k = 0; k < len; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    // terngradCode: kept when uniform24(r) < |x| / divisor; 3 (-s) below zero, else 1 (+s).
    const __m256 keep =
        _mm256_cmp_ps(uniform24Avx2(r + k), _mm256_div_ps(absAvx2(xv), div), _CMP_LT_OQ);
    const __m256 below = _mm256_cmp_ps(xv, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256i code = _mm256_and_si256(
        _mm256_castps_si256(keep),
        _mm256_or_si256(_mm256_set1_epi32(1),
                        _mm256_and_si256(_mm256_castps_si256(below), _mm256_set1_epi32(2))));
    __m256i packed = _mm256_sllv_epi32(code, shifts);
    packed = _mm256_or_si256(packed, _mm256_srli_si256(packed, 8));
    packed = _mm256_or_si256(packed, _mm256_srli_si256(packed, 4));
    codes[k / 4] = static_cast<uint8_t>(_mm256_cvtsi256_si32(packed));
    codes[k / 4 + 1] = static_cast<uint8_t>(_mm256_extract_epi32(packed, 4));
    // terngradValue: +s or -s where kept, +0 elsewhere.
    f.add(xv, _mm256_and_ps(keep, _mm256_blendv_ps(plus, minus, below)), k);
  }
  rowsEnd(f, lanes);
}

// QSGD over rows: signed levels from the draws r as bytes into c (bits == 4: packed by the
// caller) or the codes themselves, decoded to level * step.
__attribute__((target("avx2"))) void qsgdRowsAvx2(const float* x, const uint32_t* r, size_t len,
                                                  float divisor, float s, float step, int8_t* c,
                                                  float* residual, FeedbackLanes& lanes) {
  RowFeedback f = rowsBegin(lanes, residual);
  const __m256 div = _mm256_set1_ps(divisor), sv = _mm256_set1_ps(s), st = _mm256_set1_ps(step);
  const __m256i gather = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
  for (size_t k = 0; k < len; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    // qsgdCode: a = min(max(|x| / divisor * s, 0), s) (NaN -> 0), level = floor(a) + [u < frac]
    __m256 a = _mm256_mul_ps(_mm256_div_ps(absAvx2(xv), div), sv);
    a = _mm256_max_ps(a, _mm256_setzero_ps());  // a >= 0 ? a : 0
    a = _mm256_min_ps(a, sv);                   // a <= s ? a : s
    const __m256i whole = _mm256_cvttps_epi32(a);
    const __m256 frac = _mm256_sub_ps(a, _mm256_cvtepi32_ps(whole));
    const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(uniform24Avx2(r + k), frac, _CMP_LT_OQ));
    const __m256i level = _mm256_sub_epi32(whole, up);  // up is -1 where the draw rounds up
    const __m256i below = _mm256_castps_si256(_mm256_cmp_ps(xv, _mm256_setzero_ps(), _CMP_LT_OQ));
    const __m256i code =
        _mm256_blendv_epi8(level, _mm256_sub_epi32(_mm256_setzero_si256(), level), below);
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(code, code), code);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(c + k),
                     _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, gather)));
    f.add(xv, _mm256_mul_ps(_mm256_cvtepi32_ps(code), st), k);  // qsgdValue
  }
  rowsEnd(f, lanes);
}
#endif

// sqrt(sum x[i]^2), summed in double in 8 fixed lanes (no overflow for any finite float), then
// the tail, then the lanes in order (quantize.cu sums in this order too); qsgdNorm caps it.
SQZ_INLINE float l2Norm(const float* __restrict x, size_t n, [[maybe_unused]] bool avx2) {
  cpu::Double8 lane;
  size_t i = 0;
#if SQZ_CPU_X86
  if (avx2) {
    i = n / 8 * 8;
    squareRowsAvx2(x, i, lane);
  }
#endif
  for (; i + 8 <= n; i += 8) lane.addSquaresOf(x + i);
  double s = 0;
  for (; i < n; ++i) s += squareOf(x[i]);
  for (int j = 0; j < 8; ++j) s += lane.at(j);
  return qsgdNorm(s);
}

// ---- int8 --------------------------------------------------------------------------------

SQZ_INLINE void int8Quantize(const float* __restrict x, size_t n, float divisor,
                             uint8_t* __restrict c) {
  for (size_t i = 0; i < n; ++i) c[i] = int8Code(x[i], divisor);
}

template <Sink S>
SQZ_INLINE void int8Dequant(const uint8_t* __restrict c, size_t n, float scale,
                            float* __restrict out, const float* __restrict local) {
  for (size_t i = 0; i < n; ++i) put<S>(out, local, i, int8Value(c[i], scale));
}

template <Sink S>
SQZ_INLINE void int8Run(const void* scales, const uint8_t* codes, size_t n, size_t block,
                        float* out, const float* local) {
  for (size_t b = 0, at = 0; at < n; ++b, at += block)
    int8Dequant<S>(codes + at, std::min(block, n - at), loadScale(scales, b), out + at,
                   S == kAdd ? local + at : nullptr);
}

// ---- QSGD --------------------------------------------------------------------------------

// Signed levels of one tile: c[t] = sign(x) * (floor(a) + [u < frac(a)]) with
// a = min(|x| / norm * s, s); norm is the block's L2 norm, or 1 for an all-zero block.
SQZ_INLINE void qsgdLevels(const float* __restrict x, const uint32_t* __restrict r, size_t n,
                           float norm, float s, int8_t* __restrict c) {
  for (size_t t = 0; t < n; ++t) c[t] = qsgdCode(x[t], r[t], norm, s);
}

SQZ_INLINE void packNibbles(const int8_t* __restrict c, size_t n, uint8_t* __restrict out) {
  const size_t pairs = n / 2;
  for (size_t j = 0; j < pairs; ++j) out[j] = packNibblePair(c[2 * j], c[2 * j + 1]);
  if (n & 1) out[pairs] = packNibblePair(c[n - 1], 0);
}

template <Sink S>
SQZ_INLINE void qsgdDequant(const uint8_t* __restrict c, size_t n, int bits, float step,
                            float* __restrict out, const float* __restrict local) {
  if (bits == 8) {
    for (size_t i = 0; i < n; ++i)
      put<S>(out, local, i, qsgdValue(static_cast<int8_t>(c[i]), step));
    return;
  }
  const size_t pairs = n / 2;
  for (size_t j = 0; j < pairs; ++j) {
    put<S>(out, local, 2 * j, qsgdValue(lowNibbleCode(c[j]), step));
    put<S>(out, local, 2 * j + 1, qsgdValue(highNibbleCode(c[j]), step));
  }
  if (n & 1) put<S>(out, local, n - 1, qsgdValue(lowNibbleCode(c[pairs]), step));
}

template <Sink S>
SQZ_INLINE void qsgdRun(const void* scales, const uint8_t* codes, size_t n, size_t block,
                        int levels, int bits, float* out, const float* local) {
  const size_t stride = packedBytes(block, bits);
  for (size_t b = 0, at = 0; at < n; ++b, at += block)
    qsgdDequant<S>(codes + b * stride, std::min(block, n - at), bits,
                   qsgdStep(loadScale(scales, b), levels), out + at,
                   S == kAdd ? local + at : nullptr);
}

// ---- 1-bit -------------------------------------------------------------------------------

// Sums of the values with the sign bit clear and set, and how many have it set, in 8 double
// lanes (a float sum could overflow; a double one of at most 2^24 floats cannot), then the lanes
// in order, then the tail (quantize.cu sums in this order too). Selecting by bit masks keeps the
// loop branch-free and vectorizable; adding a masked-out +0 leaves a sum unchanged.
SQZ_INLINE void signSums(const float* __restrict x, size_t n, double* pos, double* neg,
                         size_t* nneg, [[maybe_unused]] bool avx2) {
  cpu::Double8 sp, sn;
  cpu::Bits8 cn = {};
  size_t i = 0, c = 0;
#if SQZ_CPU_X86
  if (avx2) {
    i = n / 8 * 8;
    c = signSumRowsAvx2(x, i, sp, sn);
  }
#endif
  for (; i + 8 <= n; i += 8) {
    const auto b = reinterpret_cast<cpu::Bits8>(cpu::loadFloat8(x + i));
    const auto side = reinterpret_cast<cpu::Bits8>(reinterpret_cast<cpu::Ints8>(b) >> 31);
    sp.add(reinterpret_cast<cpu::Float8>(b & ~side));  // clearSidePart
    sn.add(reinterpret_cast<cpu::Float8>(b & side));   // setSidePart
    cn += b >> 31;                                     // signBit
  }
  double p = 0, q = 0;
  for (int j = 0; j < 8; ++j) {
    p += sp.at(j);
    q += sn.at(j);
    c += cn[j];
  }
  for (; i < n; ++i) {
    p += double(clearSidePart(x[i]));
    q += double(setSidePart(x[i]));
    c += signBit(x[i]);
  }
  *pos = p;
  *neg = q;
  *nneg = c;
}

// Sign bits of x, 8 to a byte, low bit first.
SQZ_INLINE void packSigns(const float* __restrict x, size_t n, uint8_t* __restrict out) {
  const size_t whole = n / 8;
  size_t j = 0;
#if defined(__SSE2__)
  for (; j < whole; ++j)
    out[j] = static_cast<uint8_t>(_mm_movemask_ps(_mm_loadu_ps(x + 8 * j)) |
                                  _mm_movemask_ps(_mm_loadu_ps(x + 8 * j + 4)) << 4);
#endif
  for (; j < whole; ++j) {
    uint32_t b = 0;
    for (int k = 0; k < 8; ++k) b |= signBit(x[8 * j + k]) << k;
    out[j] = static_cast<uint8_t>(b);
  }
  if (n % 8) {
    uint32_t b = 0;
    for (size_t k = 0; k < n % 8; ++k) b |= signBit(x[8 * whole + k]) << k;
    out[whole] = static_cast<uint8_t>(b);
  }
}

template <Sink S>
SQZ_INLINE void onebitDequant(const uint8_t* __restrict c, size_t n, float pos, float neg,
                              float* __restrict out, const float* __restrict local) {
  const size_t whole = n / 8;
  size_t j = 0;
#if defined(__SSE2__)
  const __m128 p = _mm_set1_ps(pos), q = _mm_set1_ps(neg);
  const __m128i lo = _mm_setr_epi32(1, 2, 4, 8), hi = _mm_setr_epi32(16, 32, 64, 128);
  for (; j < whole; ++j) {
    const __m128i b = _mm_set1_epi32(c[j]);
    const __m128 m0 = _mm_castsi128_ps(_mm_cmpeq_epi32(_mm_and_si128(b, lo), lo));
    const __m128 m1 = _mm_castsi128_ps(_mm_cmpeq_epi32(_mm_and_si128(b, hi), hi));
    __m128 v0 = _mm_or_ps(_mm_and_ps(m0, q), _mm_andnot_ps(m0, p));
    __m128 v1 = _mm_or_ps(_mm_and_ps(m1, q), _mm_andnot_ps(m1, p));
    float* o = out + 8 * j;
    if constexpr (S == kAdd) {
      v0 = _mm_add_ps(_mm_loadu_ps(local + 8 * j), v0);
      v1 = _mm_add_ps(_mm_loadu_ps(local + 8 * j + 4), v1);
    }
    if constexpr (S == kAddInPlace) {
      v0 = _mm_add_ps(_mm_loadu_ps(o), v0);
      v1 = _mm_add_ps(_mm_loadu_ps(o + 4), v1);
    }
    _mm_storeu_ps(o, v0);
    _mm_storeu_ps(o + 4, v1);
  }
#endif
  for (; j < whole; ++j)
    for (int k = 0; k < 8; ++k)
      put<S>(out, local, 8 * j + k, onebitValue((c[j] >> k) & 1, pos, neg));
  for (size_t k = 0; k < n % 8; ++k)
    put<S>(out, local, 8 * whole + k, onebitValue((c[whole] >> k) & 1, pos, neg));
}

template <Sink S>
SQZ_INLINE void onebitRun(const void* scales, const uint8_t* codes, size_t n, size_t block,
                          float* out, const float* local) {
  const size_t stride = packedBytes(block, 1);
  for (size_t b = 0, at = 0; at < n; ++b, at += block)
    onebitDequant<S>(codes + b * stride, std::min(block, n - at), loadScale(scales, 2 * b),
                     loadScale(scales, 2 * b + 1), out + at, S == kAdd ? local + at : nullptr);
}

// ---- TernGrad ----------------------------------------------------------------------------

// 2-bit codes of one tile, packed 4 to a byte: 1 (+s) or 3 (-s) with probability |x| / s;
// s is the block's max |v|, or 1 for an all-zero block.
SQZ_INLINE void ternPack(const float* __restrict x, const uint32_t* __restrict r, size_t n, float s,
                         uint8_t* __restrict out) {
  uint8_t c[kTile];
  for (size_t t = 0; t < n; ++t) c[t] = static_cast<uint8_t>(terngradCode(x[t], r[t], s));
  const size_t whole = n / 4;
  for (size_t j = 0; j < whole; ++j)
    out[j] =
        static_cast<uint8_t>(c[4 * j] | c[4 * j + 1] << 2 | c[4 * j + 2] << 4 | c[4 * j + 3] << 6);
  if (n % 4) {
    uint32_t b = 0;
    for (size_t k = 0; k < n % 4; ++k) b |= static_cast<uint32_t>(c[4 * whole + k]) << (2 * k);
    out[whole] = static_cast<uint8_t>(b);
  }
}

template <Sink S>
SQZ_INLINE void ternDequant(const uint8_t* __restrict c, size_t n, float s, float* __restrict out,
                            const float* __restrict local) {
  const size_t whole = n / 4;
  for (size_t j = 0; j < whole; ++j) {
    const uint32_t b = c[j];
    for (int k = 0; k < 4; ++k) put<S>(out, local, 4 * j + k, terngradValue((b >> (2 * k)) & 3, s));
  }
  for (size_t k = 0; k < n % 4; ++k)
    put<S>(out, local, 4 * whole + k, terngradValue((c[whole] >> (2 * k)) & 3u, s));
}

template <Sink S>
SQZ_INLINE void ternRun(const void* scales, const uint8_t* codes, size_t n, size_t block,
                        float* out, const float* local) {
  const size_t stride = packedBytes(block, 2);
  for (size_t b = 0, at = 0; at < n; ++b, at += block)
    ternDequant<S>(codes + b * stride, std::min(block, n - at), loadScale(scales, b), out + at,
                   S == kAdd ? local + at : nullptr);
}

// The next block's input and residual, asked for while this block computes: an encode reads a
// block twice (its scale, then its codes), and with the codes' arithmetic in between the hardware
// prefetcher does not run far enough ahead (the scale pass stalled on memory for a quarter of
// QSGD's encode).
SQZ_INLINE void prefetchNextBlock(const float* x, const Feedback* feedback, size_t at, size_t len,
                                  size_t n) {
  const size_t end = std::min(n, at + 2 * len);
  const float* residual = feedback ? feedback->residual : nullptr;
  for (size_t i = at + len; i < end; i += 64 / sizeof(float)) {
    __builtin_prefetch(x + i);
    if (residual) __builtin_prefetch(residual + i, 1);
  }
}

SQZ_INLINE void int8Encode(const float* x, size_t n, size_t block, void* scales, uint8_t* codes,
                           Feedback* feedback, [[maybe_unused]] bool avx2) {
  FeedbackLanes lanes;
  float d[kTile];
  for (size_t b = 0, at = 0; at < n; ++b, at += block) {
    const size_t len = std::min(block, n - at);
    prefetchNextBlock(x, feedback, at, len, n);
    const float scale = int8Scale(maxAbs(x + at, len));
    storeScale(scales, b, scale);
    const float divisor = int8Divisor(scale);
    float* residual = feedback && feedback->residual ? feedback->residual + at : nullptr;
    size_t done = 0;  // the values the AVX2 rows took
#if SQZ_CPU_X86
    if (feedback && avx2) {
      done = len / 8 * 8;
      int8RowsAvx2(x + at, done, divisor, scale, codes + at, residual, lanes);
    }
#endif
    for (size_t t0 = done; t0 < len; t0 += kTile) {
      const size_t m = std::min(kTile, len - t0), i = at + t0;
      int8Quantize(x + i, m, divisor, codes + i);
      if (!feedback) continue;
      int8Dequant<kStore>(codes + i, m, scale, d, nullptr);
      lanes.tile(x + i, d, m, residual ? residual + t0 : nullptr);
    }
  }
  if (feedback) lanes.flush(feedback);
}

SQZ_INLINE void qsgdEncode(const float* x, size_t n, size_t block, int levels, int bits,
                           uint64_t key, uint64_t index0, void* scales, uint8_t* codes,
                           Feedback* feedback, [[maybe_unused]] bool avx2) {
  const size_t stride = packedBytes(block, bits);
  const float s = static_cast<float>(levels);
  FeedbackLanes lanes;
  uint32_t r[kTile];
  int8_t c[kTile];
  float d[kTile];
  for (size_t b = 0, at = 0; at < n; ++b, at += block) {
    const size_t len = std::min(block, n - at);
    prefetchNextBlock(x, feedback, at, len, n);
    const float norm = l2Norm(x + at, len, avx2);
    storeScale(scales, b, norm);
    const float divisor = qsgdDivisor(norm);
    const float step = qsgdStep(norm, levels);
    for (size_t t0 = 0; t0 < len; t0 += kTile) {
      const size_t m = std::min(kTile, len - t0), i = at + t0;
      uint8_t* out = codes + b * stride + t0 * bits / 8;
      fillRandom(key, index0 + i, m, r);
      float* residual = feedback && feedback->residual ? feedback->residual + i : nullptr;
      int8_t* levels8 = bits == 8 ? reinterpret_cast<int8_t*>(out) : c;
      size_t done = 0;
#if SQZ_CPU_X86
      if (feedback && avx2) {
        done = m / 8 * 8;
        qsgdRowsAvx2(x + i, r, done, divisor, s, step, levels8, residual, lanes);
      }
#endif
      qsgdLevels(x + i + done, r + done, m - done, divisor, s, levels8 + done);
      if (bits != 8) packNibbles(c, m, out);
      if (!feedback || done == m) continue;
      qsgdDequant<kStore>(out + done * bits / 8, m - done, bits, step, d, nullptr);
      lanes.tile(x + i + done, d, m - done, residual ? residual + done : nullptr);
    }
  }
  if (feedback) lanes.flush(feedback);
}

SQZ_INLINE void onebitEncode(const float* x, size_t n, size_t block, void* scales, uint8_t* codes,
                             Feedback* feedback, [[maybe_unused]] bool avx2) {
  const size_t stride = packedBytes(block, 1);
  FeedbackLanes lanes;
  float d[kTile];
  for (size_t b = 0, at = 0; at < n; ++b, at += block) {
    const size_t len = std::min(block, n - at);
    prefetchNextBlock(x, feedback, at, len, n);
    double sumPos, sumNeg;
    size_t nneg;
    signSums(x + at, len, &sumPos, &sumNeg, &nneg, avx2);
    const size_t npos = len - nneg;
    const float pos = onebitMean(sumPos, npos);
    const float neg = onebitMean(sumNeg, nneg);
    storeScale(scales, 2 * b, pos);
    storeScale(scales, 2 * b + 1, neg);
    for (size_t t0 = 0; t0 < len; t0 += kTile) {
      const size_t m = std::min(kTile, len - t0), i = at + t0;
      uint8_t* out = codes + b * stride + t0 / 8;
      float* residual = feedback && feedback->residual ? feedback->residual + i : nullptr;
      size_t done = 0;
#if SQZ_CPU_X86
      if (feedback && avx2) {
        done = m / 8 * 8;
        onebitRowsAvx2(x + i, done, pos, neg, out, residual, lanes);
      }
#endif
      packSigns(x + i + done, m - done, out + done / 8);
      if (!feedback || done == m) continue;
      onebitDequant<kStore>(out + done / 8, m - done, pos, neg, d, nullptr);
      lanes.tile(x + i + done, d, m - done, residual ? residual + done : nullptr);
    }
  }
  if (feedback) lanes.flush(feedback);
}

SQZ_INLINE void terngradEncode(const float* x, size_t n, size_t block, uint64_t key,
                               uint64_t index0, void* scales, uint8_t* codes, Feedback* feedback,
                               [[maybe_unused]] bool avx2) {
  const size_t stride = packedBytes(block, 2);
  FeedbackLanes lanes;
  uint32_t r[kTile];
  float d[kTile];
  for (size_t b = 0, at = 0; at < n; ++b, at += block) {
    const size_t len = std::min(block, n - at);
    prefetchNextBlock(x, feedback, at, len, n);
    const float s = maxAbs(x + at, len);
    storeScale(scales, b, s);
    for (size_t t0 = 0; t0 < len; t0 += kTile) {
      const size_t m = std::min(kTile, len - t0), i = at + t0;
      uint8_t* out = codes + b * stride + t0 / 4;
      fillRandom(key, index0 + i, m, r);
      float* residual = feedback && feedback->residual ? feedback->residual + i : nullptr;
      size_t done = 0;
#if SQZ_CPU_X86
      if (feedback && avx2) {
        done = m / 8 * 8;
        terngradRowsAvx2(x + i, r, done, s, terngradDivisor(s), out, residual, lanes);
      }
#endif
      ternPack(x + i + done, r + done, m - done, terngradDivisor(s), out + done / 4);
      if (!feedback || done == m) continue;
      ternDequant<kStore>(out + done / 4, m - done, s, d, nullptr);
      lanes.tile(x + i + done, d, m - done, residual ? residual + done : nullptr);
    }
  }
  if (feedback) lanes.flush(feedback);
}

}  // namespace

// ---- entry points ------------------------------------------------------------------------

void cpuQuantizeAllowAvx2(bool allow) { cpu::allowAvx2.store(allow, std::memory_order_relaxed); }
bool cpuQuantizeUsesAvx2() { return cpu::usesAvx2(); }

void cpuInt8Encode(const float* x, size_t n, size_t block, void* scales, uint8_t* codes,
                   Feedback* feedback) {
  const bool avx2 = cpu::usesAvx2();
  dispatch([&]() SQZ_LAMBDA_INLINE { int8Encode(x, n, block, scales, codes, feedback, avx2); });
}
void cpuInt8Decode(const void* scales, const uint8_t* codes, size_t n, size_t block, float* out) {
  dispatch([&]() SQZ_LAMBDA_INLINE { int8Run<kStore>(scales, codes, n, block, out, nullptr); });
}
void cpuInt8DecodeAdd(float* out, const float* local, const void* scales, const uint8_t* codes,
                      size_t n, size_t block) {
  if (out == local)
    dispatch(
        [&]() SQZ_LAMBDA_INLINE { int8Run<kAddInPlace>(scales, codes, n, block, out, nullptr); });
  else
    dispatch([&]() SQZ_LAMBDA_INLINE { int8Run<kAdd>(scales, codes, n, block, out, local); });
}

void cpuQsgdEncode(const float* x, size_t n, size_t block, int levels, int bits, uint64_t key,
                   uint64_t index0, void* scales, uint8_t* codes, Feedback* feedback) {
  const bool avx2 = cpu::usesAvx2();
  dispatch([&]() SQZ_LAMBDA_INLINE {
    qsgdEncode(x, n, block, levels, bits, key, index0, scales, codes, feedback, avx2);
  });
}
void cpuQsgdDecode(const void* scales, const uint8_t* codes, size_t n, size_t block, int levels,
                   int bits, float* out) {
  dispatch([&]() SQZ_LAMBDA_INLINE {
    qsgdRun<kStore>(scales, codes, n, block, levels, bits, out, nullptr);
  });
}
void cpuQsgdDecodeAdd(float* out, const float* local, const void* scales, const uint8_t* codes,
                      size_t n, size_t block, int levels, int bits) {
  if (out == local)
    dispatch([&]() SQZ_LAMBDA_INLINE {
      qsgdRun<kAddInPlace>(scales, codes, n, block, levels, bits, out, nullptr);
    });
  else
    dispatch([&]() SQZ_LAMBDA_INLINE {
      qsgdRun<kAdd>(scales, codes, n, block, levels, bits, out, local);
    });
}

void cpuOnebitEncode(const float* x, size_t n, size_t block, void* scales, uint8_t* codes,
                     Feedback* feedback) {
  const bool avx2 = cpu::usesAvx2();
  dispatch([&]() SQZ_LAMBDA_INLINE { onebitEncode(x, n, block, scales, codes, feedback, avx2); });
}
void cpuOnebitDecode(const void* scales, const uint8_t* codes, size_t n, size_t block, float* out) {
  dispatch([&]() SQZ_LAMBDA_INLINE { onebitRun<kStore>(scales, codes, n, block, out, nullptr); });
}
void cpuOnebitDecodeAdd(float* out, const float* local, const void* scales, const uint8_t* codes,
                        size_t n, size_t block) {
  if (out == local)
    dispatch(
        [&]() SQZ_LAMBDA_INLINE { onebitRun<kAddInPlace>(scales, codes, n, block, out, nullptr); });
  else
    dispatch([&]() SQZ_LAMBDA_INLINE { onebitRun<kAdd>(scales, codes, n, block, out, local); });
}

void cpuTerngradEncode(const float* x, size_t n, size_t block, uint64_t key, uint64_t index0,
                       void* scales, uint8_t* codes, Feedback* feedback) {
  const bool avx2 = cpu::usesAvx2();
  dispatch([&]() SQZ_LAMBDA_INLINE {
    terngradEncode(x, n, block, key, index0, scales, codes, feedback, avx2);
  });
}
void cpuTerngradDecode(const void* scales, const uint8_t* codes, size_t n, size_t block,
                       float* out) {
  dispatch([&]() SQZ_LAMBDA_INLINE { ternRun<kStore>(scales, codes, n, block, out, nullptr); });
}
void cpuTerngradDecodeAdd(float* out, const float* local, const void* scales, const uint8_t* codes,
                          size_t n, size_t block) {
  if (out == local)
    dispatch(
        [&]() SQZ_LAMBDA_INLINE { ternRun<kAddInPlace>(scales, codes, n, block, out, nullptr); });
  else
    dispatch([&]() SQZ_LAMBDA_INLINE { ternRun<kAdd>(scales, codes, n, block, out, local); });
}

}  // namespace squeeze::device
