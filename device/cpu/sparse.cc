// CPU sparsifier kernels (see device/sparse.h). The selection's hot loop is one streaming pass
// of vector compares over the keys with compaction of the hits: AVX-512 skips hitless groups of
// 64 and compresses the hit positions of 16 keys at a time, AVX2 skips hitless groups of 32 and
// extracts hits bit by bit, the scalar loop goes one value at a time; all select the same
// indices. The sampled top-k thus costs about one read of the chunk plus radix selects over ~1%
// of it and over the ~k candidates. With error feedback (AVX-512) that read is also the
// feedback's pass: one pass over x and the residual in all (cpuSelectTopkFeedback). The math the
// CUDA twins share (keys, sample positions, ranks, caps, strata) is in device/sparse.h.
#include "device/sparse.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

namespace squeeze::device {
namespace {

constexpr size_t kNone = static_cast<size_t>(-1);
// How far ahead the streaming passes over x and the residual prefetch (both arrays): 4 KiB, where
// 1 KiB left the DGC and threshold encodes a few points of memcpy's speed short (codec bench).
constexpr size_t kPrefetchBytes = 4096;

// Per-thread scratch, grown on demand and kept: encodes run on the executor's thread.
struct Scratch {
  std::vector<uint32_t> keys, sample, cand;
  std::vector<uint32_t> fused;  // the fused pass's hits (cpuSelectTopkFeedback)
  std::vector<float> values;    // the candidates' values
  std::vector<uint32_t> narrowed;  // kthLargest's keys for its last level
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

std::atomic<SelectPath>& forcedPath() {
  static std::atomic<SelectPath> path{SelectPath::kBest};
  return path;
}

bool haveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("popcnt");
  return have;
}

bool haveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
  return have;
}

// The vector part of cpuSelectAtLeast with AVX-512: 64 keys per step; a step without hits costs
// one predictable branch, a step with hits compacts each group of 16 hit positions with a
// compress (stored whole, hence kSelectSlack). Returns the count so far or kNone, and leaves
// *at where the scalar tail continues.
__attribute__((target("avx512f,popcnt"))) size_t atLeastAvx512(const float* x, size_t n,
                                                               uint32_t minKey, uint32_t* idx,
                                                               size_t cap, size_t* at) {
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(minKey));
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  size_t cnt = 0, i = 0;
  for (; i + 64 <= n; i += 64) {
    __mmask16 hit[4];
    for (int g = 0; g < 4; ++g)
      hit[g] = _mm512_cmpge_epu32_mask(
          _mm512_and_si512(_mm512_loadu_si512(x + i + 16 * g), absMask), limit);
    if ((hit[0] | hit[1] | hit[2] | hit[3]) == 0) continue;
    for (int g = 0; g < 4; ++g) {
      const __m512i pos = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int>(i + 16 * g)));
      _mm512_storeu_si512(idx + cnt, _mm512_maskz_compress_epi32(hit[g], pos));
      cnt += static_cast<size_t>(__builtin_popcount(hit[g]));
      if (cnt > cap) return kNone;
    }
  }
  *at = i;
  return cnt;
}

// The vector part of cpuSelectAtLeast with AVX2: 32 values per step, a branch skips hitless
// steps and the rare hits are extracted bit by bit; returns the count so far or kNone, and
// leaves *at where the scalar tail continues.
__attribute__((target("avx2,popcnt"))) size_t atLeastAvx2(const float* x, size_t n, uint32_t minKey,
                                                          uint32_t* idx, size_t cap, size_t* at) {
  const __m256i absMask = _mm256_set1_epi32(0x7fffffff);
  // Keys and minKey - 1 are in [0, 2^31): the signed compare is the unsigned one.
  const __m256i limit = _mm256_set1_epi32(static_cast<int>(minKey - 1));
  size_t cnt = 0, i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i* p = reinterpret_cast<const __m256i*>(x + i);
    __m256i a = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p), absMask), limit);
    __m256i b = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 1), absMask), limit);
    __m256i c = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 2), absMask), limit);
    __m256i d = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 3), absMask), limit);
    __m256i any = _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d));
    if (_mm256_testz_si256(any, any)) continue;
    uint32_t mask = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(a))) |
                    static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(b))) << 8 |
                    static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c))) << 16 |
                    static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(d))) << 24;
    if (cnt + static_cast<size_t>(__builtin_popcount(mask)) > cap) return kNone;
    for (; mask; mask &= mask - 1) idx[cnt++] = static_cast<uint32_t>(i + __builtin_ctz(mask));
  }
  *at = i;
  return cnt;
}

// The rank-th largest (1-based, 1 <= rank <= m) of key(0..m), and how many keys lie above it:
// a radix select of three counting passes (11, 11 and 9 bits of the 31-bit keys), the last over
// the keys that share the first 22 bits only.
template <class Key>
std::pair<uint32_t, size_t> kthLargest(size_t m, size_t rank, Key key) {
  static constexpr int kShift[3] = {20, 9, 0}, kBits[3] = {11, 11, 9};
  uint32_t count[2048];
  uint32_t prefix = 0;
  size_t above = 0;
  std::vector<uint32_t>& narrowed = scratch().narrowed;
  size_t narrowedCount = 0;
  for (int level = 0; level < 3; ++level) {
    const int high = kShift[level] + kBits[level];
    const uint32_t digits = (1u << kBits[level]) - 1, want = prefix >> high;
    std::fill(count, count + digits + 1, 0u);
    if (level == 0) {
      for (size_t j = 0; j < m; ++j) ++count[key(j) >> kShift[0]];
    } else if (level == 1) {  // also keeps the keys that can still match, for the last level
      narrowed.resize(m);
      for (size_t j = 0; j < m; ++j) {
        const uint32_t kj = key(j);
        const bool match = (kj >> high) == want;
        count[(kj >> kShift[1]) & digits] += match;
        narrowed[narrowedCount] = kj;
        narrowedCount += match;
      }
    } else {
      for (size_t j = 0; j < narrowedCount; ++j) {
        const uint32_t kj = narrowed[j];
        count[kj & digits] += (kj >> high) == want;
      }
    }
    uint32_t d = digits;
    for (; d > 0 && above + count[d] < rank; --d) above += count[d];
    prefix |= d << kShift[level];
  }
  return {prefix, above};
}

// The k largest magnitude keys among the m values v[0..m) at positions cand[0..m) (cand null:
// positions 0..m-1), ascending, ties to the lowest positions, zeros never: at most k indices to
// out.
size_t selectAmong(const float* v, const uint32_t* cand, size_t m, size_t k, uint32_t* out) {
  if (k == 0) return 0;
  auto index = [cand](size_t j) { return cand ? cand[j] : static_cast<uint32_t>(j); };
  uint32_t kth = 1;                           // smallest key taken
  size_t tiesLeft = static_cast<size_t>(-1);  // how many keys equal to kth may still be taken
  if (m > k) {
    const auto [key, above] = kthLargest(m, k, [v](size_t j) { return magnitudeKey(v[j]); });
    if (key > 0) {  // else fewer than k nonzeros: take them all
      kth = key;
      tiesLeft = k - above;
    }
  }
  // Branch-free: about a third of the candidates are dropped, at random.
  size_t w = 0;
  for (size_t j = 0; j < m && w < k; ++j) {
    const uint32_t key = magnitudeKey(v[j]);
    const bool tie = key == kth && tiesLeft > 0;
    out[w] = index(j);
    w += (key > kth) | tie;
    tiesLeft -= tie;
  }
  return w;
}

// DGC's sampled threshold t1 for the k largest of x[0..n) (n >= kSampledFrom): the sample's
// value at rank r1 (topkFirstRank), at least 1. The sample is s values at stratified, hashed
// positions (deterministic: the same chunk always gives the same payload); sc.sample keeps it,
// for a lowered threshold.
// The sample's key at rank r (1-based, descending).
uint32_t sampleKeyAt(Scratch& sc, size_t r) {
  const uint32_t* keys = sc.sample.data();
  return kthLargest(sc.sample.size(), r, [keys](size_t j) { return keys[j]; }).first;
}

struct SampledThreshold {
  uint32_t key;
  size_t rank;
};
SampledThreshold sampleThreshold(const float* x, size_t n, size_t k, Scratch& sc) {
  const size_t s = topkSampleSize(n), step = n / s;
  sc.sample.resize(s);
  // The sampled values are cache misses the prefetcher cannot foresee: asked for ahead.
  constexpr size_t kAhead = 32;
  for (size_t j = 0; j < s; ++j) {
    if (j + kAhead < s) __builtin_prefetch(x + topkSamplePosition(j + kAhead, step));
    sc.sample[j] = magnitudeKey(x[topkSamplePosition(j, step)]);
  }
  const size_t r1 = topkFirstRank(n, k, s);
  return {std::max<uint32_t>(1, sampleKeyAt(sc, r1)), r1};
}

// Per-ISA clones picked by an ifunc resolver at load time. Under ThreadSanitizer the resolver is
// instrumented and runs before the runtime is up (a crash at load), so that build has one version.
#if defined(__SANITIZE_THREAD__)
#define SQZ_ISA_CLONES
#else
#define SQZ_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// sum x^2 in double, eight partial sums (the norms are statistics: the order is free).
SQZ_ISA_CLONES double squareSum(const float* x, size_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += double(x[i + l]) * x[i + l];
  for (; i < n; ++i) acc[0] += double(x[i]) * x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// r[i] += x[i]; returns sum x^2 in double (eight partial sums, as squareSum): error feedback's
// pass and the input's norm in one read of x.
SQZ_ISA_CLONES double addToSquareSum(float* __restrict r, const float* __restrict x, size_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      r[i + l] += x[i + l];
      acc[l] += double(x[i + l]) * x[i + l];
    }
  for (; i < n; ++i) {
    r[i] += x[i];
    acc[0] += double(x[i]) * x[i];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// The vector path the kernels take now: the forced one, else the best the CPU has.
SelectPath activePath() {
  const SelectPath path = forcedPath().load(std::memory_order_relaxed);
  if (path != SelectPath::kBest) return path;
  return haveAvx512() ? SelectPath::kAvx512 : haveAvx2() ? SelectPath::kAvx2 : SelectPath::kScalar;
}

// ---- error feedback ----------------------------------------------------------------------------
// Unsent values add to the residual (residual[i] += x[i]); sent ones leave it as it is. The
// norms are statistics: summed in double, in whatever order the pass runs.

// acc0 and acc1 += the squares of xv's 16 values, in double. (The maskz forms: the plain ones
// leave GCC 12 warning about its own undefined registers.)
__attribute__((target("avx512f"))) inline void addSquares(__m512 xv, __m512d& acc0,
                                                         __m512d& acc1) {
  const __m512d lo8 = _mm512_maskz_cvtps_pd(
      0xff, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(xv), 0)));
  const __m512d hi8 = _mm512_maskz_cvtps_pd(
      0xff, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(xv), 1)));
  acc0 = _mm512_fmadd_pd(lo8, lo8, acc0);
  acc1 = _mm512_fmadd_pd(hi8, hi8, acc1);
}
__attribute__((target("avx512f"))) inline double sumOf(__m512d acc0, __m512d acc1) {
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, _mm512_add_pd(acc0, acc1));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// residual[i] += x[i] over [lo, hi) except at the sent entries idx[0..m) (ascending, inside
// [lo, hi); an entry whose value is zero is padding and counts unsent); returns sum x^2 over
// [lo, hi). On the way, *sentSq += sum x[idx]^2 and gathered (null: not wanted) gets x[idx]: the
// entries' values are read while their block is in the cache. AVX-512, by blocks that stay in
// L1: the sent entries' residuals are kept aside, the whole block is added without a branch, and
// they are put back.
__attribute__((target("avx512f"))) double feedbackRangeAvx512(const float* x, float* residual,
                                                             size_t lo, size_t hi,
                                                             const uint32_t* idx, size_t m,
                                                             float* gathered, double* sentSq) {
  constexpr size_t kBlock = 1024;
  float kept[kBlock];
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  double tail = 0, sent = 0;
  size_t j = 0;
  for (size_t b = lo; b < hi; b += kBlock) {
    const size_t e = std::min(hi, b + kBlock), j0 = j;
    // (At most kBlock entries: the indices are strictly ascending; the bound keeps a broken
    // list inside kept.)
    for (; j < m && idx[j] < e && j - j0 < kBlock; ++j) {
      const float v = x[idx[j]];
      if (gathered) gathered[j] = v;
      sent += double(v) * v;
      kept[j - j0] = residual[idx[j]];
    }
    size_t i = b;
    for (; i + 16 <= e; i += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(x + i) + kPrefetchBytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(residual + i) + kPrefetchBytes, _MM_HINT_T0);
      const __m512 xv = _mm512_loadu_ps(x + i);
      _mm512_storeu_ps(residual + i, _mm512_add_ps(_mm512_loadu_ps(residual + i), xv));
      addSquares(xv, acc0, acc1);
    }
    for (; i < e; ++i) {
      residual[i] += x[i];
      tail += double(x[i]) * x[i];
    }
    for (size_t t = j0; t < j; ++t)
      if (x[idx[t]] != 0.0f) residual[idx[t]] = kept[t - j0];
  }
  *sentSq += sent;
  return sumOf(acc0, acc1) + tail;
}

double feedbackRange(const float* x, float* residual, size_t lo, size_t hi, const uint32_t* idx,
                     size_t m, float* gathered, double* sentSq) {
  if (activePath() == SelectPath::kAvx512)
    return feedbackRangeAvx512(x, residual, lo, hi, idx, m, gathered, sentSq);
  // Runs between the sent entries: the vectorized add-and-square over each.
  double kept = 0, sent = 0;
  size_t from = lo;
  for (size_t j = 0; j <= m; ++j) {
    if (j < m) {
      if (gathered) gathered[j] = x[idx[j]];
      *sentSq += double(x[idx[j]]) * x[idx[j]];
      if (x[idx[j]] == 0.0f) continue;  // a zero entry sends nothing: i stays in the run
    }
    const size_t to = j < m ? idx[j] : hi;
    if (to - from >= 32) {
      kept += addToSquareSum(residual + from, x + from, to - from);
    } else {
      for (size_t t = from; t < to; ++t) {
        residual[t] += x[t];
        kept += double(x[t]) * x[t];
      }
    }
    if (j < m) sent += double(x[to]) * x[to];
    from = to + 1;
  }
  return kept + sent;
}

// The fused select-and-feedback pass (cpuSelectTopkFeedback, cpuSelectAtLeastFeedback) over
// x[0..n): the positions of key >= minKey go to cand (as cpuSelectAtLeast: at most cap, with
// kSelectSlack room), and every other value is added to the residual at once, as if unsent,
// while that add can be undone exactly: fl(fl(r + x) - x) == r, bit for bit (always so where the
// residual is 0, as after a handle's prepare). From the first value where it cannot (or once cand
// is past cap), the pass stops writing: fedEnd says where, and whoever knows the selection
// undoes the adds of values it sends below fedEnd (r - x) and feeds the rest back
// (fixFeedback). fedSq gets sum x^2 over [0, fedEnd).
struct FusedPass {
  size_t count = 0;    // hits in cand (kNone: more than cap)
  size_t fedEnd = 0;   // residual written over [0, fedEnd)
  size_t fedHits = 0;  // hits below fedEnd (the first ones in cand, even past cap)
  double fedSq = 0;
  double hitSq = 0;    // sum x^2 over the hits below fedEnd (where the pass keeps no values)
};

// One value of the fused pass; false where it stops writing (past cap, or an add that cannot be
// undone).
inline bool fuseOne(const float* x, size_t i, uint32_t minKey, uint32_t* cand, float* values,
                    size_t cap, float* residual, FusedPass& f) {
  if (magnitudeKey(x[i]) >= minKey) {
    if (f.count == cap) return false;
    if (values) values[f.count] = x[i];
    cand[f.count++] = static_cast<uint32_t>(i);
    f.hitSq += double(x[i]) * x[i];
  } else {
    const float r = residual[i] + x[i];
    if (floatBits(r - x[i]) != floatBits(residual[i])) return false;
    residual[i] = r;
  }
  f.fedSq += double(x[i]) * x[i];
  return true;
}

// The AVX-512 part of the fused pass: whole vectors of 16 from f.fedEnd; returns false where
// the pass stopped (f.fedEnd is then where; the vector's hits are not taken). kValues: the hits'
// values go to `values`, and f.hitSq is not summed (fixFeedback takes the sent squares from the
// values then, so two conversions and multiply-adds a vector are spared).
template <bool kValues>
__attribute__((target("avx512f,popcnt"))) bool fusedAvx512(const float* x, size_t n,
                                                           uint32_t minKey, uint32_t* cand,
                                                           float* values, size_t cap,
                                                           float* residual, FusedPass& f) {
  const __m512i absMask = _mm512_set1_epi32(0x7fffffff);
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(minKey));
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  __m512d hit0 = _mm512_setzero_pd(), hit1 = _mm512_setzero_pd();
  size_t i = f.fedEnd, cnt = f.count;
  bool whole = true;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(x + i) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(residual + i) + kPrefetchBytes, _MM_HINT_T0);
    const __m512 xv = _mm512_loadu_ps(x + i), rv = _mm512_loadu_ps(residual + i);
    const __mmask16 hit = _mm512_cmpge_epu32_mask(
        _mm512_and_si512(_mm512_castps_si512(xv), absMask), limit);
    const __m512 sum = _mm512_add_ps(rv, xv);
    const __mmask16 undoable = _mm512_cmpeq_epi32_mask(
        _mm512_castps_si512(_mm512_sub_ps(sum, xv)), _mm512_castps_si512(rv));
    if (static_cast<__mmask16>(undoable | hit) != 0xffff) {
      whole = false;
      break;
    }
    // Hits are rare and random (a branch on them would mispredict): stored every time.
    const size_t hits = static_cast<size_t>(__builtin_popcount(hit));
    if (cnt + hits > cap) {
      whole = false;
      break;
    }
    const __m512i pos = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int>(i)));
    _mm512_storeu_si512(cand + cnt, _mm512_maskz_compress_epi32(hit, pos));
    if constexpr (kValues) _mm512_storeu_ps(values + cnt, _mm512_maskz_compress_ps(hit, xv));
    cnt += hits;
    _mm512_storeu_ps(residual + i, _mm512_mask_blend_ps(hit, sum, rv));
    addSquares(xv, acc0, acc1);
    if constexpr (!kValues) addSquares(_mm512_maskz_mov_ps(hit, xv), hit0, hit1);
  }
  f.fedSq += sumOf(acc0, acc1);
  f.hitSq += sumOf(hit0, hit1);
  f.fedEnd = i;
  f.count = cnt;
  return whole;
}

// The fused pass (see FusedPass): f.count is kNone where more than cap hit.
FusedPass fusedSelect(const float* x, size_t n, uint32_t minKey, uint32_t* cand, float* values,
                      size_t cap, float* residual) {
  FusedPass f;
  bool writing = true;
  if (activePath() == SelectPath::kAvx512)
    writing = values ? fusedAvx512<true>(x, n, minKey, cand, values, cap, residual, f)
                     : fusedAvx512<false>(x, n, minKey, cand, values, cap, residual, f);
  while (writing && f.fedEnd < n)
    if ((writing = fuseOne(x, f.fedEnd, minKey, cand, values, cap, residual, f))) ++f.fedEnd;
  f.fedHits = f.count;
  if (f.fedEnd == n) return f;
  // Stopped writing at fedEnd: the selection goes on over the rest, as cpuSelectAtLeast.
  const size_t rest = cpuSelectAtLeast(x + f.fedEnd, n - f.fedEnd, minKey, cand + f.count,
                                       cap - f.count);
  if (rest == kNone) {
    f.count = kNone;
    return f;
  }
  for (size_t j = f.count; j < f.count + rest; ++j) {
    cand[j] += static_cast<uint32_t>(f.fedEnd);
    if (values) values[j] = x[cand[j]];
  }
  f.count += rest;
  return f;
}

// Completes the error feedback of a fused pass at minKey once the selection idx[0..m) is known
// (ascending; zero values unsent): below f.fedEnd, the hits that are not sent add to the
// residual and the values the pass added but that are sent get it back (r - x: exact, as the
// pass checked); from f.fedEnd on, the plain pass. cand holds the pass's hits (f.fedHits of them
// below fedEnd) and values theirs, or null where every hit below fedEnd is sent (their squares
// are then f.hitSq). gathered (null: not wanted) gets x[idx[0..m)]. The hits' values come from
// values, not from x: x has left the cache by now.
void fixFeedback(const float* x, size_t n, uint32_t minKey, const FusedPass& f,
                 const uint32_t* cand, const float* values, const uint32_t* idx, size_t m,
                 float* residual, float* gathered, double* inputSq, double* sentSq) {
  double sent = values ? 0 : f.hitSq;
  size_t j = 0;
  auto notHits = [&](size_t end) {  // sent entries below end that are no hits: the pass added
    for (; j < m && idx[j] < end; ++j) {
      const float v = x[idx[j]];
      sent += double(v) * v;
      if (gathered) gathered[j] = v;
      if (idx[j] < f.fedEnd && v != 0.0f && magnitudeKey(v) < minKey)
        residual[idx[j]] = residual[idx[j]] - v;
    }
  };
  for (size_t c = 0; c < f.fedHits; ++c) {
    notHits(cand[c]);
    if (j < m && idx[j] == cand[c]) {  // sent
      if (values) {
        sent += double(values[c]) * values[c];
        if (gathered) gathered[j] = values[c];
      } else if (gathered) {
        gathered[j] = x[cand[c]];
      }
      ++j;
      continue;
    }
    residual[cand[c]] += values ? values[c] : x[cand[c]];
  }
  notHits(f.fedEnd);
  const double restSq = feedbackRange(x, residual, f.fedEnd, n, idx + j, m - j,
                                      gathered ? gathered + j : nullptr, &sent);
  if (sentSq) *sentSq += sent;
  if (inputSq) *inputSq += f.fedSq + restSq;
}

}  // namespace

bool cpuForceSelectPath(SelectPath path) {
  if ((path == SelectPath::kAvx512 && !haveAvx512()) || (path == SelectPath::kAvx2 && !haveAvx2()))
    return false;
  forcedPath().store(path, std::memory_order_relaxed);
  return true;
}

size_t cpuSelectAtLeast(const float* x, size_t n, uint32_t minKey, uint32_t* idx, size_t cap) {
  if (minKey == 0) minKey = 1;
  if (minKey > 0x7fffffffu) return 0;
  const SelectPath path = activePath();
  size_t i = 0, cnt = 0;
  if (path == SelectPath::kAvx512)
    cnt = atLeastAvx512(x, n, minKey, idx, cap, &i);
  else if (path == SelectPath::kAvx2)
    cnt = atLeastAvx2(x, n, minKey, idx, cap, &i);
  if (cnt == kNone) return kNone;
  for (; i < n; ++i)
    if (magnitudeKey(x[i]) >= minKey) {
      if (cnt == cap) return kNone;
      idx[cnt++] = static_cast<uint32_t>(i);
    }
  return cnt;
}

size_t cpuSelectTopk(const float* x, size_t n, size_t k, bool, uint32_t* idx) {
  k = std::min(k, n);
  if (k == 0) return 0;
  if (n < kSampledFrom || k == n) return selectAmong(x, nullptr, n, k, idx);

  // Both routes select the same set; the CPU takes the sampled one, its fastest, for both.
  Scratch& sc = scratch();
  const SampledThreshold first = sampleThreshold(x, n, k, sc);
  const size_t s = sc.sample.size(), r1 = first.rank;
  const uint32_t t1 = first.key;

  uint32_t t = t1;
  size_t rank = r1;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {  // pass 0 kept fewer than k: lower the threshold to rank r2 of the sample
      const size_t r2 = topkLoweredRank(r1, s);
      t = 1;
      if (r2 > r1) t = std::max<uint32_t>(1, sampleKeyAt(sc, r2));
      if (t >= t1) break;  // the sample cannot lower it
      rank = r2;
    }
    const size_t cap = topkPassCap(n, k, rank, s);
    if (sc.cand.size() < cap + kSelectSlack) sc.cand.resize(cap + kSelectSlack);
    const size_t kept = cpuSelectAtLeast(x, n, t, sc.cand.data(), cap);
    if (kept == kNone) break;  // a mass of ties: exact below
    // kept >= k: the k largest are all among the candidates. t == 1: every nonzero is.
    if (kept >= k || t == 1) {
      if (sc.values.size() < kept) sc.values.resize(kept);
      cpuGather(x, sc.cand.data(), kept, sc.values.data());
      return selectAmong(sc.values.data(), sc.cand.data(), kept, k, idx);
    }
  }
  // The passes do not hold the k largest (fewer than k keys >= t, or too many ties): the
  // whole chunk.
  return selectAmong(x, nullptr, n, k, idx);
}

size_t cpuPadSelection(const float* x, size_t n, uint32_t* idx, size_t m, size_t k) {
  k = std::min(k, n);
  if (m >= k) return m;
  // Merge from the back, in place: the selected indices shift up past the zeros taken below
  // them. The zeros taken are the lowest-index ones of x outside the selection.
  size_t zeros = 0;
  std::vector<uint32_t>& picked = scratch().keys;
  picked.clear();
  for (size_t i = 0, j = 0; i < n && zeros < k - m; ++i) {
    if (j < m && idx[j] == i) {
      ++j;
      continue;
    }
    if (magnitudeKey(x[i]) == 0) {
      picked.push_back(static_cast<uint32_t>(i));
      ++zeros;
    }
  }
  size_t w = m + zeros, a = m, b = zeros;
  while (b > 0) idx[--w] = (a > 0 && idx[a - 1] > picked[b - 1]) ? idx[--a] : picked[--b];
  return m + zeros;
}

void cpuGather(const float* x, const uint32_t* idx, size_t k, float* out) {
  for (size_t j = 0; j < k; ++j) out[j] = x[idx[j]];
}

void cpuDensify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n) {
  if (n > 0) std::memset(dst, 0, n * sizeof(float));  // dst may be null for none
  for (size_t j = 0; j < k; ++j)
    if (vals[j] != 0.0f) dst[idx[j]] = vals[j];
}

void cpuScatterAdd(float* out, const float* local, size_t n, const uint32_t* idx, const float* vals,
                   size_t k) {
  if (out != local) std::memcpy(out, local, n * sizeof(float));
  for (size_t j = 0; j < k; ++j)
    if (vals[j] != 0.0f) out[idx[j]] += vals[j];
}

void cpuSparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* residual,
                       double* inputSq, double* sentSq) {
  if (!residual) {
    double sent = 0;
    for (size_t j = 0; j < k; ++j) sent += double(x[idx[j]]) * x[idx[j]];
    if (sentSq) *sentSq += sent;
    if (inputSq) *inputSq += squareSum(x, n);
    return;
  }
  cpuGatherFeedback(x, n, idx, k, nullptr, residual, inputSq, sentSq);
}

void cpuGatherFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* values,
                       float* residual, double* inputSq, double* sentSq) {
  if (!residual) {
    if (values) cpuGather(x, idx, k, values);
    cpuSparseFeedback(x, n, idx, k, nullptr, inputSq, sentSq);
    return;
  }
  // One pass reads x for the residual, the norm and the values.
  const FusedPass none;
  fixFeedback(x, n, 1, none, nullptr, nullptr, idx, k, residual, values, inputSq, sentSq);
}

size_t cpuSelectTopkFeedback(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx,
                             float* residual, double* inputSq, double* sentSq) {
  k = std::min(k, n);
  // No pass to fuse with, or no AVX-512 (the fused pass is written for it; elsewhere the two
  // steps are the faster).
  if (!residual || k == 0 || k == n || n < kSampledFrom || activePath() != SelectPath::kAvx512) {
    const size_t m = cpuSelectTopk(x, n, k, sampled, idx);
    cpuGatherFeedback(x, n, idx, m, reinterpret_cast<float*>(idx + m), residual, inputSq, sentSq);
    return m;
  }
  Scratch& sc = scratch();
  const SampledThreshold t = sampleThreshold(x, n, k, sc);
  const size_t cap = topkPassCap(n, k, t.rank, sc.sample.size());
  if (sc.fused.size() < cap + kSelectSlack) sc.fused.resize(cap + kSelectSlack);
  if (sc.values.size() < cap + kSelectSlack) sc.values.resize(cap + kSelectSlack);
  const FusedPass f = fusedSelect(x, n, t.key, sc.fused.data(), sc.values.data(), cap, residual);
  size_t m;
  if (f.count != kNone && (f.count >= k || t.key == 1)) {
    // as cpuSelectTopk's first pass
    m = selectAmong(sc.values.data(), sc.fused.data(), f.count, k, idx);
  } else {
    // The pass does not hold the k largest: cpuSelectTopk's other routes (the same set).
    m = cpuSelectTopk(x, n, k, sampled, idx);
  }
  fixFeedback(x, n, t.key, f, sc.fused.data(), sc.values.data(), idx, m, residual,
              reinterpret_cast<float*>(idx + m), inputSq, sentSq);
  return m;
}

size_t cpuSelectAtLeastFeedback(const float* x, size_t n, uint32_t minKey, uint32_t* idx,
                                size_t cap, float* residual, double* inputSq, double* sentSq) {
  if (minKey == 0) minKey = 1;
  if (!residual || minKey > 0x7fffffffu || activePath() != SelectPath::kAvx512) {
    const size_t m = cpuSelectAtLeast(x, n, minKey, idx, cap);
    if (m != kNone) cpuSparseFeedback(x, n, idx, m, residual, inputSq, sentSq);
    return m;
  }
  const FusedPass f = fusedSelect(x, n, minKey, idx, nullptr, cap, residual);
  if (f.count == kNone) {  // dense: nothing stays; the pass's adds are undone (exactly)
    for (size_t i = 0; i < f.fedEnd; ++i)
      if (magnitudeKey(x[i]) < minKey) residual[i] = residual[i] - x[i];
    return kNone;
  }
  fixFeedback(x, n, minKey, f, idx, nullptr, idx, f.count, residual, nullptr, inputSq, sentSq);
  return f.count;
}

void cpuRandomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                     uint32_t* idx) {
  const uint64_t key = strataKey(seed, call, offset);
  for (size_t j = 0; j < k; ++j) idx[j] = strataIndex(key, j, n, k);
}

}  // namespace squeeze::device
