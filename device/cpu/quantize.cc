// CPU quantizer kernels, run by QuantSetting through cpuQuantEncodeJob and cpuQuantDecodeJob
// (device/batch.h; the layout and the draws: device/quantize.h). What the CUDA stand-in runs for
// each job of a batch, and what the tests compare a GPU's batch with. Each block is processed in
// passes over plain arrays that GCC vectorizes at -O2/-O3, once for baseline x86-64 and once for
// AVX2 (chosen at run time: the counter hash's 32-bit multiplies need it to be fast): a reduction
// pass for the block's scale (kept in 8 fixed lanes, so the result does not depend on the vector
// width), which with feedback also adds the input's squares to the norms (QuantNorms), then tiles
// of kTile values, hot in L1: counter-hash draws into a small buffer, quantize into codes, pack,
// and for encodeFeedback decode the tile back and update the residual. Where the CPU has AVX2, the
// whole rows of 8 of encodeFeedback (and the scale passes) run as one fused loop of intrinsics
// instead (device/cpu/quantize_rows.h; QSGD's and TernGrad's, bound by their arithmetic, as AVX-512
// rows of 16 where the CPU has it), with the same float operations per value, so the same bits;
// their draws are computed in registers, and they prefetch the next block as they go. The portable
// passes take the rest. Decode and decode-add share one loop per codec, templated on where the
// value goes; "add in place" is its own instantiation so that no loop has to guess whether out and
// local overlap. The 1-bit sign packing and expansion use SSE2 (baseline on x86-64), which GCC does
// not derive from the plain loops; the portable loops below them give the same bits. Both
// instruction sets run the same IEEE operations in the same order (the reductions' 8 lanes are
// fixed; the only FMAs add exact squares, so they round as an add), so payloads and decoded values
// do not depend on the CPU: mixed hosts agree bit for bit. Each value's math is
// device/elementwise.h's (int8Code, qsgdCode, ...), which device/cuda/quantize.cu runs too, so the
// GPU's payloads are these bit for bit as well.
#include "device/quantize.h"

#include <algorithm>
#include <cstring>

#include "device/batch.h"
#include "device/cpu/dispatch.h"
#include "device/cpu/quantize_rows.h"
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

// The norms of an encode with feedback (device::Feedback::norms). The input's squares are added
// by the scale pass, which reads each block first (QSGD's scale is that very sum). The sent
// values' are counted from the codes: a block sends code * unit (int8: the scale, QSGD: the
// step, 1-bit: each side's mean with code 1, TernGrad: s), so its share is unit^2 * sum(code^2),
// where the codes' squares are whole numbers summed exactly. That is the payload's values before
// the decoder rounds code * unit to float (at most 2^-23 from the decoded values' own squares),
// and device/cuda/quantize.cu counts them the same way. So the rows that make the codes carry no
// second sum in double. Payloads, decoded values and residuals are bit for bit the GPU's; the
// norms agree to rounding (the GPU adds its threads' parts in another order).
struct QuantNorms {
  cpu::Double8 in;  // lane j: squares of values j, j + 8, ... (tails: lanes 0, 1, ...)
  double inTotal = 0, sentTotal = 0;

  // For a block part whose codes' squares sum to codeSq, each code sent as code * unit.
  SQZ_INLINE void addSent(double codeSq, float unit) {
    if (codeSq != 0) sentTotal += codeSq * squareOf(unit);  // 0 * inf would be NaN
  }
  SQZ_INLINE void flush(Feedback* fb) const {
    if (!fb->norms) return;
    double inSq = inTotal;
    for (int j = 0; j < 8; ++j) inSq += in.at(j);
    fb->norms->inputSq += inSq;
    fb->norms->sentSq += sentTotal;
  }
  // Lane j += squareOf(x[i]) over rows of 8, then the tail into lanes 0, 1, ...
  SQZ_INLINE static void addSquares(const float* __restrict x, size_t n, cpu::Double8& lanes) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) lanes.addSquaresOf(x + i);
    for (int j = 0; i < n; ++i, ++j) lanes.addAt(j, squareOf(x[i]));
  }
};

// The sum of n signed byte codes' squares (whole numbers: exact).
SQZ_INLINE double codeSquares(const int8_t* __restrict c, size_t n) {
  int64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += int32_t{c[i]} * c[i];
  return static_cast<double>(sum);
}

// residual += x - d over a tile (the residual, the codec handle's own array, never overlaps x or
// the tile buffer d).
SQZ_INLINE void tileResidual(const float* __restrict x, const float* __restrict d, size_t n,
                             float* __restrict residual) {
  for (size_t i = 0; i < n; ++i) residual[i] = residualAfter(residual[i], x[i], d[i]);
}

#if SQZ_CPU_X86
// Runs rows(draws) with the draws of indices first .. first + len: computed in registers, or
// from r (filled here) where they cross a multiple of 2^32; W: the rows' width (8 for AVX2, 16
// for AVX-512).
template <int W = 8, class Rows>
SQZ_INLINE auto withDraws(uint64_t key, uint64_t first, size_t len, uint32_t* r, Rows rows) {
  const uint32_t low = static_cast<uint32_t>(first);
  if (uint64_t{low} + len <= (uint64_t{1} << 32))
    return rows(DrawCounter<W>{low, counterRunKey(key, first >> 32)});
  fillRandom(key, first, len, r);
  return rows(DrawBuffer<W>{r});
}
#endif


// sqrt(sum x[i]^2), summed in double in 8 fixed lanes (no overflow for any finite float), then
// the tail, then the lanes in order (quantize.cu sums in this order too); qsgdNorm caps it. The
// sum itself goes to *sumSq.
SQZ_INLINE float l2Norm(const float* __restrict x, size_t n, [[maybe_unused]] bool avx2,
                        double* sumSq) {
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
  *sumSq = s;
  return qsgdNorm(s);
}

// The block's max |x| (maxAbs), with its squares into *squares where the norms are asked for.
SQZ_INLINE float maxAbsAndSquares(const float* __restrict x, size_t n, [[maybe_unused]] bool avx2,
                                  cpu::Double8* squares) {
#if SQZ_CPU_X86
  if (avx2) {
    const size_t whole = n / 8 * 8;
    uint32_t m = maxAbsRowsAvx2(x, whole, squares);
    const uint32_t tail = floatBits(maxAbs(x + whole, n - whole));
    if (squares) QuantNorms::addSquares(x + whole, n - whole, *squares);
    return floatFromBits(tail > m ? tail : m);
  }
#endif
  if (squares) QuantNorms::addSquares(x, n, *squares);
  return maxAbs(x, n);
}

// ---- int8: one scale per block (max|v| / 127), 8-bit two's complement codes ------------------
// code = round_to_nearest_even(v * 127 / max|v|) clamped to [-127, 127]; value = code * scale.

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

// ---- QSGD: one scale per block (the block's L2 norm), sign * level as `bits`-bit two's
// complement (bits is 4 when 2 * levels + 1 <= 16, else 8) ------------------------------------
// level = floor(|v| / norm * levels + u), u uniform in [0, 1) from the counter hash of element
// index0 + i (drawn as 24 bits, and clamped to levels); value = code * (norm / levels).

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

// ---- 1-bit: one bit per value, its sign bit (1: negative, -0 included), and two scales per
// block, the mean of the values whose sign bit is clear and the mean of those whose sign bit is
// set (0 for an empty side) -------------------------------------------------------------------

// Sums of the values with the sign bit clear and set, and how many have it set, in 8 double
// lanes (a float sum could overflow; a double one of at most 2^24 floats cannot), then the lanes
// in order, then the tail (quantize.cu sums in this order too). Selecting by bit masks keeps the
// loop branch-free and vectorizable; adding a masked-out +0 leaves a sum unchanged.
SQZ_INLINE void signSums(const float* __restrict x, size_t n, double* pos, double* neg,
                         size_t* nneg, [[maybe_unused]] bool avx2, cpu::Double8* squares) {
  cpu::Double8 sp, sn;
  cpu::Bits8 cn = {};
  size_t i = 0, c = 0;
#if SQZ_CPU_X86
  if (avx2) {
    i = n / 8 * 8;
    c = signSumRowsAvx2(x, i, sp, sn, squares);
  }
#endif
  if (squares) QuantNorms::addSquares(x + i, n - i, *squares);
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

// ---- TernGrad: one scale per block (s = max|v|), 2 bits per value: 0 -> 0, 1 -> +s, 3 -> -s
// (2, never written, decodes as 0); the value is kept with probability |v| / s, drawn from the
// counter hash of element index0 + i as 24 bits ---------------------------------------------

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

// The norms' input lanes when the norms are asked for, else null (the scale pass then only
// scales).
SQZ_INLINE cpu::Double8* inputSquares(const Feedback* feedback, QuantNorms& norms) {
  return feedback && feedback->norms ? &norms.in : nullptr;
}

SQZ_INLINE void int8Encode(const float* x, size_t n, size_t block, void* scales, uint8_t* codes,
                           Feedback* feedback, [[maybe_unused]] bool avx2) {
  QuantNorms norms;
  float d[kTile];
  for (size_t b = 0, at = 0; at < n; ++b, at += block) {
    const size_t len = std::min(block, n - at);
    if (!(feedback && avx2)) prefetchNextBlock(x, feedback, at, len, n);
    const float scale =
        int8Scale(maxAbsAndSquares(x + at, len, avx2, inputSquares(feedback, norms)));
    storeScale(scales, b, scale);
    const float divisor = int8Divisor(scale);
    float* residual = feedback && feedback->residual ? feedback->residual + at : nullptr;
    size_t done = 0;  // the values the AVX2 rows took
    double codeSq = 0;
#if SQZ_CPU_X86
    if (feedback && avx2) {
      done = len / 8 * 8;
      codeSq = int8RowsAvx2(x + at, done, divisor, scale, codes + at, residual, aheadOf(len));
    }
#endif
    for (size_t t0 = done; t0 < len; t0 += kTile) {
      const size_t m = std::min(kTile, len - t0), i = at + t0;
      int8Quantize(x + i, m, divisor, codes + i);
      if (!feedback) continue;
      codeSq += codeSquares(reinterpret_cast<const int8_t*>(codes + i), m);
      if (!residual) continue;
      int8Dequant<kStore>(codes + i, m, scale, d, nullptr);
      tileResidual(x + i, d, m, residual + t0);
    }
    if (feedback) norms.addSent(codeSq, scale);
  }
  if (feedback) norms.flush(feedback);
}

SQZ_INLINE void qsgdEncode(const float* x, size_t n, size_t block, int levels, int bits,
                           uint64_t key, uint64_t index0, void* scales, uint8_t* codes,
                           Feedback* feedback, [[maybe_unused]] bool avx2,
                           [[maybe_unused]] bool avx512) {
  const size_t stride = packedBytes(block, bits);
  const float s = static_cast<float>(levels);
  QuantNorms norms;
  uint32_t r[kTile];
  int8_t c[kTile];
  float d[kTile];
  for (size_t b = 0, at = 0; at < n; ++b, at += block) {
    const size_t len = std::min(block, n - at);
    if (!(feedback && avx2)) prefetchNextBlock(x, feedback, at, len, n);
    double sumSq;
    const float norm = l2Norm(x + at, len, avx2, &sumSq);
    norms.inTotal += sumSq;  // the input's squares: the scale's own sum
    storeScale(scales, b, norm);
    const float divisor = qsgdDivisor(norm);
    const float step = qsgdStep(norm, levels);
    double codeSq = 0;  // the block's levels' squares
    for (size_t t0 = 0; t0 < len; t0 += kTile) {
      const size_t m = std::min(kTile, len - t0), i = at + t0;
      uint8_t* out = codes + b * stride + t0 * bits / 8;
      float* residual = feedback && feedback->residual ? feedback->residual + i : nullptr;
      int8_t* levels8 = bits == 8 ? reinterpret_cast<int8_t*>(out) : c;
      size_t done = 0;
#if SQZ_CPU_X86
      if (feedback && avx512) {
        done = m / 16 * 16;
        codeSq += withDraws<16>(
            key, index0 + i, done, r, [&](auto draws) {
              return qsgdRowsAvx512(x + i, draws, done, divisor, s, step, levels8, residual,
                                    aheadOf(len));
            });
      }
      if (feedback && avx2 && m - done >= 8) {
        const size_t rows = (m - done) / 8 * 8;
        codeSq += withDraws(key, index0 + i + done, rows, r + done, [&](auto draws) {
          return qsgdRowsAvx2(x + i + done, draws, rows, divisor, s, step, levels8 + done,
                              residual ? residual + done : nullptr, aheadOf(len));
        });
        done += rows;
      }
#endif
      fillRandom(key, index0 + i + done, m - done, r + done);
      qsgdLevels(x + i + done, r + done, m - done, divisor, s, levels8 + done);
      if (bits != 8) packNibbles(c, m, out);
      if (!feedback || done == m) continue;
      codeSq += codeSquares(levels8 + done, m - done);
      if (!residual) continue;
      qsgdDequant<kStore>(out + done * bits / 8, m - done, bits, step, d, nullptr);
      tileResidual(x + i + done, d, m - done, residual + done);
    }
    if (feedback) norms.addSent(codeSq, step);
  }
  if (feedback) norms.flush(feedback);
}

SQZ_INLINE void onebitEncode(const float* x, size_t n, size_t block, void* scales, uint8_t* codes,
                             Feedback* feedback, [[maybe_unused]] bool avx2) {
  const size_t stride = packedBytes(block, 1);
  QuantNorms norms;
  float d[kTile];
  for (size_t b = 0, at = 0; at < n; ++b, at += block) {
    const size_t len = std::min(block, n - at);
    if (!(feedback && avx2)) prefetchNextBlock(x, feedback, at, len, n);
    double sumPos, sumNeg;
    size_t nneg;
    signSums(x + at, len, &sumPos, &sumNeg, &nneg, avx2, inputSquares(feedback, norms));
    const size_t npos = len - nneg;
    const float pos = onebitMean(sumPos, npos);
    const float neg = onebitMean(sumNeg, nneg);
    storeScale(scales, 2 * b, pos);
    storeScale(scales, 2 * b + 1, neg);
    norms.addSent(static_cast<double>(npos), pos);  // every value is sent as its side's mean
    norms.addSent(static_cast<double>(nneg), neg);
    for (size_t t0 = 0; t0 < len; t0 += kTile) {
      const size_t m = std::min(kTile, len - t0), i = at + t0;
      uint8_t* out = codes + b * stride + t0 / 8;
      float* residual = feedback && feedback->residual ? feedback->residual + i : nullptr;
      size_t done = 0;
#if SQZ_CPU_X86
      if (feedback && avx2) {
        done = m / 8 * 8;
        onebitRowsAvx2(x + i, done, pos, neg, out, residual, aheadOf(len));
      }
#endif
      packSigns(x + i + done, m - done, out + done / 8);
      if (!residual || done == m) continue;
      onebitDequant<kStore>(out + done / 8, m - done, pos, neg, d, nullptr);
      tileResidual(x + i + done, d, m - done, residual + done);
    }
  }
  if (feedback) norms.flush(feedback);
}

SQZ_INLINE void terngradEncode(const float* x, size_t n, size_t block, uint64_t key,
                               uint64_t index0, void* scales, uint8_t* codes, Feedback* feedback,
                               [[maybe_unused]] bool avx2, [[maybe_unused]] bool avx512) {
  const size_t stride = packedBytes(block, 2);
  QuantNorms norms;
  uint32_t r[kTile];
  float d[kTile];
  for (size_t b = 0, at = 0; at < n; ++b, at += block) {
    const size_t len = std::min(block, n - at);
    if (!(feedback && avx2)) prefetchNextBlock(x, feedback, at, len, n);
    const float s = maxAbsAndSquares(x + at, len, avx2, inputSquares(feedback, norms));
    storeScale(scales, b, s);
    size_t kept = 0;  // values sent as +s or -s
    for (size_t t0 = 0; t0 < len; t0 += kTile) {
      const size_t m = std::min(kTile, len - t0), i = at + t0;
      uint8_t* out = codes + b * stride + t0 / 4;
      float* residual = feedback && feedback->residual ? feedback->residual + i : nullptr;
      size_t done = 0;
#if SQZ_CPU_X86
      if (feedback && avx512) {
        done = m / 16 * 16;
        kept += withDraws<16>(key, index0 + i, done, r, [&](auto draws) {
          return terngradRowsAvx512(x + i, draws, done, s, terngradDivisor(s), out, residual,
                                    aheadOf(len));
        });
      }
      if (feedback && avx2 && m - done >= 8) {
        const size_t rows = (m - done) / 8 * 8;
        kept += withDraws(key, index0 + i + done, rows, r + done, [&](auto draws) {
          return terngradRowsAvx2(x + i + done, draws, rows, s, terngradDivisor(s),
                                  out + done / 4, residual ? residual + done : nullptr,
                                  aheadOf(len));
        });
        done += rows;
      }
#endif
      fillRandom(key, index0 + i + done, m - done, r + done);
      ternPack(x + i + done, r + done, m - done, terngradDivisor(s), out + done / 4);
      if (!feedback || done == m) continue;
      ternDequant<kStore>(out + done / 4, m - done, s, d, nullptr);
      for (size_t t = 0; t < m - done; ++t) kept += d[t] != 0.0f;  // s > 0 where one is kept
      if (residual) tileResidual(x + i + done, d, m - done, residual + done);
    }
    norms.addSent(static_cast<double>(kept), s);
  }
  if (feedback) norms.flush(feedback);
}

}  // namespace

// ---- entry points ------------------------------------------------------------------------
// Each quantizer's encode, decode and decode-add as the instruction set's code (dispatch), then
// the one entry device/batch.h declares for all of them: a new quantizer adds its case there.

void cpuQuantizeAllowIsa(CpuIsa widest) {
  cpu::allowedIsa.store(static_cast<int>(widest), std::memory_order_relaxed);
}
CpuIsa cpuQuantizeIsa() {
  return cpu::usesAvx512() ? CpuIsa::kAvx512 : cpu::usesAvx2() ? CpuIsa::kAvx2 : CpuIsa::kBaseline;
}

namespace {

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
  const bool avx2 = cpu::usesAvx2(), avx512 = cpu::usesAvx512();
  dispatch([&]() SQZ_LAMBDA_INLINE {
    qsgdEncode(x, n, block, levels, bits, key, index0, scales, codes, feedback, avx2, avx512);
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
  const bool avx2 = cpu::usesAvx2(), avx512 = cpu::usesAvx512();
  dispatch([&]() SQZ_LAMBDA_INLINE {
    terngradEncode(x, n, block, key, index0, scales, codes, feedback, avx2, avx512);
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

}  // namespace

void cpuQuantEncodeJob(const QuantSetting& s, const QuantEncodeJob& j, Feedback* feedback) {
  switch (s.kind) {
    case QuantKind::kInt8:
      return cpuInt8Encode(j.x, j.n, s.block, j.scales, j.codes, feedback);
    case QuantKind::kQsgd:
      return cpuQsgdEncode(j.x, j.n, s.block, s.levels, s.bits, s.key, j.index0, j.scales, j.codes,
                           feedback);
    case QuantKind::kOnebit:
      return cpuOnebitEncode(j.x, j.n, s.block, j.scales, j.codes, feedback);
    case QuantKind::kTerngrad:
      return cpuTerngradEncode(j.x, j.n, s.block, s.key, j.index0, j.scales, j.codes, feedback);
  }
}

void cpuQuantDecodeJob(const QuantSetting& s, const QuantDecodeJob& j, bool add) {
  switch (s.kind) {
    case QuantKind::kInt8:
      return add ? cpuInt8DecodeAdd(j.out, j.local, j.scales, j.codes, j.n, s.block)
                 : cpuInt8Decode(j.scales, j.codes, j.n, s.block, j.out);
    case QuantKind::kQsgd:
      return add ? cpuQsgdDecodeAdd(j.out, j.local, j.scales, j.codes, j.n, s.block, s.levels,
                                    s.bits)
                 : cpuQsgdDecode(j.scales, j.codes, j.n, s.block, s.levels, s.bits, j.out);
    case QuantKind::kOnebit:
      return add ? cpuOnebitDecodeAdd(j.out, j.local, j.scales, j.codes, j.n, s.block)
                 : cpuOnebitDecode(j.scales, j.codes, j.n, s.block, j.out);
    case QuantKind::kTerngrad:
      return add ? cpuTerngradDecodeAdd(j.out, j.local, j.scales, j.codes, j.n, s.block)
                 : cpuTerngradDecode(j.scales, j.codes, j.n, s.block, j.out);
  }
}

}  // namespace squeeze::device
