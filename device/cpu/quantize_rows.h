// The CPU quantizers' AVX2 rows (device/cpu/quantize.cc, its only includer): an encode with
// feedback over whole rows of 8 values, codes, decoded values, residual and norms in one loop of
// intrinsics, and the scale passes' rows; QSGD's and TernGrad's also over rows of 16 in AVX-512.
// Each row runs the same IEEE operations per value as quantize.cc's portable passes, so the same
// bits. Private to that file: everything here is in an anonymous namespace.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "device/cpu/dispatch.h"

#if SQZ_CPU_X86
#include <immintrin.h>
#endif

namespace squeeze::device {
namespace {

// ---- AVX2 rows ---------------------------------------------------------------------------
// A fused encode with feedback over whole rows of 8 values of one block, in AVX2 registers:
// codes, the decoded values (never stored), the residual and the sent squares in one loop, with
// the same IEEE operations per value as the portable passes (which the baseline code and the
// block tails run; quantize_test's SameBitsOnEveryInstructionSet holds the two to the same bits).
// GCC's own vectorization of those passes keeps the decoded tile in memory and converts floats
// to double 2 at a time; these do each once per row. The squares in double are added with a
// fused multiply-add: a float's square is exact in double, so the FMA rounds where the add alone
// would, and the lanes keep their bits. Every CPU with AVX2 has FMA; dispatch.h asks for both.
// (GCC would also contract a separate multiply and add into an FMA in these functions; the
// kernels are built with -ffp-contract=off, device/meson.build, so only the FMAs written here are.)
#if SQZ_CPU_X86
#define SQZ_AVX2 __attribute__((target("avx2,fma"), always_inline)) inline
#define SQZ_AVX2_ROWS __attribute__((target("avx2,fma")))

// lo, hi (lanes 0-3, 4-7) += the squares of v's lanes, in double.
SQZ_AVX2 void addSquaresAvx2(__m256d& lo, __m256d& hi, __m256 v) {
  const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
  const __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  lo = _mm256_fmadd_pd(a, a, lo);
  hi = _mm256_fmadd_pd(b, b, hi);
}
// residualAfter over a row: residual + (x - d).
SQZ_AVX2 void rowResidual(float* residual, size_t k, __m256 xv, __m256 d) {
  float* r = residual + k;
  _mm256_storeu_ps(r, _mm256_add_ps(_mm256_loadu_ps(r), _mm256_sub_ps(xv, d)));
}

// The sum of the codes' squares over rows, the codes as whole floats (|code| <= 127): each row's
// squares go into float lanes, exact while a lane stays below 2^24, so the lanes move into a
// double (exact too) every 1024 rows.
struct CodeSquares {
  __m256 lanes = {};
  double sum = 0;
  SQZ_AVX2 void add(__m256 code, size_t k) {
    lanes = _mm256_fmadd_ps(code, code, lanes);  // whole numbers: exact, as a multiply and add
    if ((k & (1024 * 8 - 1)) == 1023 * 8) flush();
  }
  SQZ_AVX2 void flush() {
    const __m256d both = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(lanes)),
                                       _mm256_cvtps_pd(_mm256_extractf128_ps(lanes, 1)));
    alignas(32) double w[4];
    _mm256_store_pd(w, both);
    sum += (w[0] + w[1]) + (w[2] + w[3]);
    lanes = __m256{};
  }
  SQZ_AVX2 double total() {
    flush();
    return sum;
  }
};

// The input and residual `ahead` values on (the next block's, as the rows of this one run): spread
// over the rows, so that memory streams while the codes are computed, instead of a burst of
// prefetches that fills the line buffers and stalls (prefetchNextBlock's, which the portable
// passes keep). A prefetch past the arrays' end is harmless: it never faults.
SQZ_AVX2 void prefetchRow(const float* x, const float* residual, size_t k, size_t ahead) {
  _mm_prefetch(reinterpret_cast<const char*>(x + k + ahead), _MM_HINT_T0);
  if (residual) _mm_prefetch(reinterpret_cast<const char*>(residual + k + ahead), _MM_HINT_T0);
}

// How far ahead the rows prefetch: the next block, and at least 16 KiB of each array (small
// blocks leave too little time for a line to arrive; measured on the codec bench).
SQZ_INLINE size_t aheadOf(size_t len) { return std::max<size_t>(len, 4096); }

// max |x| as bits (maxAbs's rule) over rows * 8 values, with the squares into *lanes if given.
SQZ_AVX2_ROWS uint32_t maxAbsRowsAvx2(const float* x, size_t len, cpu::Double8* lanes) {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  __m256i m = _mm256_setzero_si256();
  if (lanes) {
    __m256d s0 = lanes->lo, s1 = lanes->hi;
    for (size_t k = 0; k < len; k += 8) {
      const __m256 xv = _mm256_loadu_ps(x + k);
      m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(xv), magnitude));
      addSquaresAvx2(s0, s1, xv);
    }
    *lanes = {s0, s1};
  } else {
    for (size_t k = 0; k < len; k += 8)
      m = _mm256_max_epu32(
          m, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k)),
                              magnitude));
  }
  alignas(32) uint32_t w[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(w), m);
  uint32_t r = 0;
  for (uint32_t v : w) r = v > r ? v : r;
  return r;
}

// int8 over rows * 8 values (rows of the block at x; codes and residual at the same place).
SQZ_AVX2_ROWS double int8RowsAvx2(const float* x, size_t len, float divisor, float scale,
                                  uint8_t* codes, float* residual, size_t ahead) {
  CodeSquares squares;
  const __m256 div = _mm256_set1_ps(divisor), sc = _mm256_set1_ps(scale);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256 magic = _mm256_set1_ps(0x1.8p23f);
  const __m256i gather = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
  for (size_t k = 0; k < len; k += 8) {
    prefetchRow(x, residual, k, ahead);
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
    const __m256 d = _mm256_mul_ps(t, sc);
    if (residual) rowResidual(residual, k, xv, d);
    squares.add(t, k);
  }
  return squares.total();
}

// 1-bit over rows: the sign bits, 8 to a byte, and each value decoded to its side's mean.
SQZ_AVX2_ROWS void onebitRowsAvx2(const float* x, size_t len, float pos, float neg,
                                  uint8_t* codes, float* residual, size_t ahead) {
  const __m256 p = _mm256_set1_ps(pos), q = _mm256_set1_ps(neg);
  for (size_t k = 0; k < len; k += 8) {
    prefetchRow(x, residual, k, ahead);
    const __m256 xv = _mm256_loadu_ps(x + k);
    codes[k / 8] = static_cast<uint8_t>(_mm256_movemask_ps(xv));  // signBit, low bit first
    if (residual) rowResidual(residual, k, xv, _mm256_blendv_ps(p, q, xv));  // sign set -> neg
  }
}

// The 1-bit sums' rows (signSums): lane j of sp and sn += the row's value j on its side (+0 on
// the other), the squares into *squares if given, and the number of set sign bits in rows * 8
// values.
SQZ_AVX2_ROWS size_t signSumRowsAvx2(const float* x, size_t len, cpu::Double8& sp,
                                     cpu::Double8& sn, cpu::Double8* squares) {
  __m256d p0 = sp.lo, p1 = sp.hi, q0 = sn.lo, q1 = sn.hi;
  __m256d s0 = squares ? squares->lo : __m256d{}, s1 = squares ? squares->hi : __m256d{};
  const __m256d zero = _mm256_setzero_pd();
  size_t count = 0;
  for (size_t k = 0; k < len; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    // Each half in double once; a double keeps its float's sign bit (-0 and NaN included), so
    // selecting by it there is clearSidePart and setSidePart converted: the same sums.
    const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(xv));
    const __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1));
    p0 = _mm256_add_pd(p0, _mm256_blendv_pd(a, zero, a));  // sign clear: a, set: +0
    p1 = _mm256_add_pd(p1, _mm256_blendv_pd(b, zero, b));
    q0 = _mm256_add_pd(q0, _mm256_blendv_pd(zero, a, a));  // sign set: a, clear: +0
    q1 = _mm256_add_pd(q1, _mm256_blendv_pd(zero, b, b));
    count += static_cast<size_t>(__builtin_popcount(_mm256_movemask_ps(xv)));
    if (squares) {
      s0 = _mm256_fmadd_pd(a, a, s0);
      s1 = _mm256_fmadd_pd(b, b, s1);
    }
  }
  sp = {p0, p1};
  sn = {q0, q1};
  if (squares) *squares = {s0, s1};
  return count;
}

// l2Norm's rows: lane j += squareOf(the row's value j), over rows * 8 values.
SQZ_AVX2_ROWS void squareRowsAvx2(const float* x, size_t len, cpu::Double8& lanes) {
  __m256d s0 = lanes.lo, s1 = lanes.hi;
  for (size_t k = 0; k < len; k += 8) addSquaresAvx2(s0, s1, _mm256_loadu_ps(x + k));
  lanes = {s0, s1};
}

// Where the rows' draws come from, a row of W at a time (next(), a vector of W uint32 lanes: 8
// for the AVX2 rows, 16 for the AVX-512 ones): a buffer fillRandom filled (DrawBuffer), or
// computed in registers (DrawCounter: counterHash of indices first, first + 1, ..., which must
// not cross a multiple of 2^32, where the run key changes). The counter saves the buffer's store
// and load and keeps low32(index) * golden as a running sum (a multiply's 10-cycle latency less
// in each draw's chain: the same bits, mod 2^32). Plain vector operations, so that one
// definition serves both widths: inlined into a row, they compile to its instruction set.
template <int W>
struct DrawLanesOf;
template <>
struct DrawLanesOf<8> {
  typedef uint32_t type __attribute__((vector_size(32)));
};
template <>
struct DrawLanesOf<16> {
  typedef uint32_t type __attribute__((vector_size(64)));
};
template <int W>
using DrawLanes = typename DrawLanesOf<W>::type;
template <int W>
struct DrawBuffer {
  const uint32_t* r;
  SQZ_INLINE void start() {}
  SQZ_INLINE DrawLanes<W> next() {
    DrawLanes<W> v;
    std::memcpy(&v, r, sizeof v);
    r += W;
    return v;
  }
};
template <int W>
struct DrawCounter {
  uint32_t low;     // low32(first)
  uint32_t runKey;  // counterRunKey(key, first >> 32)
  // Set by start(): low32(index) * golden of the row after the next, and the next row's draws,
  // made a row ahead so that their chain of multiplies overlaps a row's work.
  DrawLanes<W> scaled = {}, ready = {};
  SQZ_INLINE void start() {
    for (int j = 0; j < W; ++j) scaled[j] = (low + static_cast<uint32_t>(j)) * kGolden;
    ready = hashNext();
  }
  SQZ_INLINE DrawLanes<W> next() {
    const DrawLanes<W> v = ready;
    ready = hashNext();
    return v;
  }
  // mix32(low32(index) * golden ^ runKey), as counterHash (quantize.h)
  SQZ_INLINE DrawLanes<W> hashNext() {
    DrawLanes<W> v = scaled ^ runKey;
    scaled += W * kGolden;
    v ^= v >> 16;
    v *= 0x7feb352du;
    v ^= v >> 15;
    v *= 0x846ca68bu;
    return v ^ (v >> 16);
  }
  static constexpr uint32_t kGolden = 0x9e3779b9u;
};

// uniform24 of a row's draws.
SQZ_AVX2 __m256 uniform24Avx2(DrawLanes<8> r) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(reinterpret_cast<__m256i>(r >> 8)),
                       _mm256_set1_ps(0x1p-24f));
}

SQZ_AVX2 __m256 absAvx2(__m256 x) {
  return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

// TernGrad over rows: 2-bit codes 4 to a byte from the draws r, decoded to +s, -s or 0. Returns
// how many values were kept (sent as +s or -s).
template <class Draws>
SQZ_AVX2_ROWS size_t terngradRowsAvx2(const float* x, Draws r, size_t len, float s,
                                      float divisor, uint8_t* codes, float* residual,
                                      size_t ahead) {
  const __m256 div = _mm256_set1_ps(divisor), plus = _mm256_set1_ps(s), minus = _mm256_set1_ps(-s);
  const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  size_t kept = 0;
  r.start();
  for (size_t k = 0; k < len; k += 8) {
    prefetchRow(x, residual, k, ahead);
    const __m256 xv = _mm256_loadu_ps(x + k);
    // terngradCode: kept when uniform24(r) < |x| / divisor; 3 (-s) below zero, else 1 (+s).
    const __m256 keep =
        _mm256_cmp_ps(uniform24Avx2(r.next()), _mm256_div_ps(absAvx2(xv), div), _CMP_LT_OQ);
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
    kept += static_cast<size_t>(__builtin_popcount(_mm256_movemask_ps(keep)));
    // terngradValue: +s or -s where kept, +0 elsewhere.
    if (residual)
      rowResidual(residual, k, xv, _mm256_and_ps(keep, _mm256_blendv_ps(plus, minus, below)));
  }
  return kept;
}

// QSGD over rows: signed levels from the draws r as bytes into c (bits == 4: packed by the
// caller) or the codes themselves, decoded to level * step.
template <class Draws>
SQZ_AVX2_ROWS double qsgdRowsAvx2(const float* x, Draws r, size_t len, float divisor,
                                  float s, float step, int8_t* c, float* residual,
                                  size_t ahead) {
  CodeSquares squares;
  r.start();
  const __m256 div = _mm256_set1_ps(divisor), sv = _mm256_set1_ps(s), st = _mm256_set1_ps(step);
  const __m256i gather = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
  for (size_t k = 0; k < len; k += 8) {
    prefetchRow(x, residual, k, ahead);
    const __m256 xv = _mm256_loadu_ps(x + k);
    // qsgdCode: a = min(max(|x| / divisor * s, 0), s) (NaN -> 0), level = floor(a) + [u < frac]
    __m256 a = _mm256_mul_ps(_mm256_div_ps(absAvx2(xv), div), sv);
    a = _mm256_max_ps(a, _mm256_setzero_ps());  // a >= 0 ? a : 0
    a = _mm256_min_ps(a, sv);                   // a <= s ? a : s
    const __m256i whole = _mm256_cvttps_epi32(a);
    const __m256 frac = _mm256_sub_ps(a, _mm256_cvtepi32_ps(whole));
    const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(uniform24Avx2(r.next()), frac, _CMP_LT_OQ));
    const __m256i level = _mm256_sub_epi32(whole, up);  // up is -1 where the draw rounds up
    const __m256i below = _mm256_castps_si256(_mm256_cmp_ps(xv, _mm256_setzero_ps(), _CMP_LT_OQ));
    const __m256i code =
        _mm256_blendv_epi8(level, _mm256_sub_epi32(_mm256_setzero_si256(), level), below);
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(code, code), code);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(c + k),
                     _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, gather)));
    const __m256 codeValue = _mm256_cvtepi32_ps(code);
    const __m256 d = _mm256_mul_ps(codeValue, st);  // qsgdValue
    if (residual) rowResidual(residual, k, xv, d);
    squares.add(codeValue, k);
  }
  return squares.total();
}
// ---- AVX-512 rows (QSGD, TernGrad) -----------------------------------------------------------
// The two quantizers whose rows are bound by their arithmetic (the counter hash's multiplies and
// the division), not by memory: the same operations per value as their AVX2 rows over 16 lanes,
// so the same bits (codes, residual; the codes' squares and the kept count are whole numbers,
// summed exactly in any order). Called from the AVX2 code where the CPU has AVX-512 F
// (cpu::usesAvx512); the AVX2 rows and the portable passes take the rest of a tile.
#define SQZ_AVX512 __attribute__((target("avx512f,avx2,fma,bmi2"), always_inline)) inline
#define SQZ_AVX512_ROWS __attribute__((target("avx512f,avx2,fma,bmi2")))

// The sum of the codes' squares over rows of 16, as CodeSquares (16 float lanes stay exact for
// 1024 rows: 1024 * 127^2 < 2^24).
struct CodeSquares16 {
  __m512 lanes = {};
  double sum = 0;
  SQZ_AVX512 void add(__m512 code, size_t k) {
    lanes = _mm512_fmadd_ps(code, code, lanes);
    if ((k & (1024 * 16 - 1)) == 1023 * 16) flush();
  }
  SQZ_AVX512 void flush() {
    alignas(64) float w[16];
    _mm512_store_ps(w, lanes);
    for (float f : w) sum += f;  // whole numbers below 2^53: exact in any order
    lanes = __m512{};
  }
  SQZ_AVX512 double total() {
    flush();
    return sum;
  }
};

// rowResidual over a row of 16: residual + (x - d).
SQZ_AVX512 void rowResidualAvx512(float* residual, size_t k, __m512 xv, __m512 d) {
  float* r = residual + k;
  _mm512_storeu_ps(r, _mm512_add_ps(_mm512_loadu_ps(r), _mm512_sub_ps(xv, d)));
}

// uniform24 of sixteen draws.
SQZ_AVX512 __m512 uniform24Avx512(DrawLanes<16> r) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(reinterpret_cast<__m512i>(r >> 8)),
                       _mm512_set1_ps(0x1p-24f));
}

// TernGrad over rows of 16 (terngradRowsAvx2's operations): the 2-bit codes of a row are one
// 32-bit word, bit 2j the kept flag of value j and bit 2j + 1 its sign where kept.
template <class Draws>
SQZ_AVX512_ROWS size_t terngradRowsAvx512(const float* x, Draws r, size_t len, float s,
                                          float divisor, uint8_t* codes, float* residual,
                                          size_t ahead) {
  const __m512 div = _mm512_set1_ps(divisor), plus = _mm512_set1_ps(s),
               minus = _mm512_set1_ps(-s);
  size_t kept = 0;
  r.start();
  for (size_t k = 0; k < len; k += 16) {
    prefetchRow(x, residual, k, ahead);
    prefetchRow(x, residual, k + 8, ahead);
    const __m512 xv = _mm512_loadu_ps(x + k);
    const __mmask16 keep = _mm512_cmp_ps_mask(
        uniform24Avx512(r.next()), _mm512_div_ps(_mm512_abs_ps(xv), div), _CMP_LT_OQ);
    const __mmask16 below = _mm512_cmp_ps_mask(xv, _mm512_setzero_ps(), _CMP_LT_OQ);
    const uint32_t word = _pdep_u32(keep, 0x55555555u) | _pdep_u32(keep & below, 0xaaaaaaaau);
    std::memcpy(codes + k / 4, &word, 4);  // little-endian: values 0-3 in the first byte
    kept += static_cast<size_t>(__builtin_popcount(keep));
    if (residual)  // terngradValue: +s or -s where kept, +0 elsewhere
      rowResidualAvx512(residual, k, xv,
                        _mm512_maskz_mov_ps(keep, _mm512_mask_blend_ps(below, plus, minus)));
  }
  return kept;
}

// QSGD over rows of 16 (qsgdRowsAvx2's operations).
template <class Draws>
SQZ_AVX512_ROWS double qsgdRowsAvx512(const float* x, Draws r, size_t len, float divisor,
                                      float s, float step, int8_t* c, float* residual,
                                      size_t ahead) {
  CodeSquares16 squares;
  r.start();
  const __m512 div = _mm512_set1_ps(divisor), sv = _mm512_set1_ps(s), st = _mm512_set1_ps(step);
  for (size_t k = 0; k < len; k += 16) {
    prefetchRow(x, residual, k, ahead);
    prefetchRow(x, residual, k + 8, ahead);
    const __m512 xv = _mm512_loadu_ps(x + k);
    __m512 a = _mm512_mul_ps(_mm512_div_ps(_mm512_abs_ps(xv), div), sv);
    a = _mm512_max_ps(a, _mm512_setzero_ps());  // a >= 0 ? a : 0
    a = _mm512_min_ps(a, sv);                   // a <= s ? a : s
    const __m512i whole = _mm512_cvttps_epi32(a);
    const __m512 frac = _mm512_sub_ps(a, _mm512_cvtepi32_ps(whole));
    const __mmask16 up = _mm512_cmp_ps_mask(uniform24Avx512(r.next()), frac, _CMP_LT_OQ);
    const __m512i level = _mm512_mask_add_epi32(whole, up, whole, _mm512_set1_epi32(1));
    const __mmask16 below = _mm512_cmp_ps_mask(xv, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512i code = _mm512_mask_sub_epi32(level, below, _mm512_setzero_si512(), level);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(c + k), _mm512_cvtsepi32_epi8(code));
    const __m512 codeValue = _mm512_cvtepi32_ps(code);
    if (residual) rowResidualAvx512(residual, k, xv, _mm512_mul_ps(codeValue, st));  // qsgdValue
    squares.add(codeValue, k);
  }
  return squares.total();
}
#endif

}  // namespace
}  // namespace squeeze::device
