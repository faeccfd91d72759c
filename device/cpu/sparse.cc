// CPU sparsifier kernels (see device/sparse.h). The selection's hot loop is one streaming pass
// of vector compares over the keys with compaction of the hits: AVX-512 skips hitless groups of
// 64 and compresses the hit positions of 16 keys at a time, AVX2 skips hitless groups of 32 and
// extracts hits bit by bit, the scalar loop goes one value at a time; all select the same
// indices. The sampled top-k thus costs about one read of the chunk plus nth_elements over ~1%
// of it and over the ~k candidates. The math the CUDA twins share (keys, sample positions, ranks,
// caps, strata) is in device/sparse.h.
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

// Per-thread scratch, grown on demand and kept: encodes run on the executor's thread.
struct Scratch {
  std::vector<uint32_t> keys, sample, cand;
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

// The k largest keys among x at cand[0..m) (cand null: all of x[0..m)), ascending, ties to the
// lowest positions, zeros never: at most k indices to out.
size_t selectAmong(const float* x, const uint32_t* cand, size_t m, size_t k, uint32_t* out) {
  if (k == 0) return 0;
  auto index = [cand](size_t j) { return cand ? cand[j] : static_cast<uint32_t>(j); };
  uint32_t kth = 1;                           // smallest key taken
  size_t tiesLeft = static_cast<size_t>(-1);  // how many keys equal to kth may still be taken
  if (m > k) {
    std::vector<uint32_t>& keys = scratch().keys;
    keys.resize(m);
    for (size_t j = 0; j < m; ++j) keys[j] = magnitudeKey(x[index(j)]);
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<uint32_t>());
    if (keys[k - 1] > 0) {  // else fewer than k nonzeros: take them all
      kth = keys[k - 1];
      size_t above = 0;
      for (size_t j = 0; j + 1 < k; ++j) above += keys[j] > kth;
      tiesLeft = k - above;
    }
  }
  // Branch-free: about a third of the candidates are dropped, at random.
  size_t w = 0;
  for (size_t j = 0; j < m && w < k; ++j) {
    const uint32_t key = magnitudeKey(x[index(j)]);
    const bool tie = key == kth && tiesLeft > 0;
    out[w] = index(j);
    w += (key > kth) | tie;
    tiesLeft -= tie;
  }
  return w;
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
  SelectPath path = forcedPath().load(std::memory_order_relaxed);
  if (path == SelectPath::kBest)
    path = haveAvx512() ? SelectPath::kAvx512
           : haveAvx2() ? SelectPath::kAvx2
                        : SelectPath::kScalar;
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
  // The sample: s values at stratified, hashed positions (deterministic: the same chunk
  // always gives the same payload).
  Scratch& sc = scratch();
  const size_t s = topkSampleSize(n), step = n / s;
  sc.sample.resize(s);
  for (size_t j = 0; j < s; ++j) sc.sample[j] = magnitudeKey(x[topkSamplePosition(j, step)]);
  const size_t r1 = topkFirstRank(n, k, s);
  auto desc = std::greater<uint32_t>();
  std::nth_element(sc.sample.begin(), sc.sample.begin() + (r1 - 1), sc.sample.end(), desc);
  const uint32_t t1 = std::max<uint32_t>(1, sc.sample[r1 - 1]);

  uint32_t t = t1;
  size_t rank = r1;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {  // pass 0 kept fewer than k: lower the threshold to rank r2 of the sample
      const size_t r2 = topkLoweredRank(r1, s);
      t = 1;
      if (r2 > r1) {
        std::nth_element(sc.sample.begin() + r1, sc.sample.begin() + (r2 - 1), sc.sample.end(),
                         desc);
        t = std::max<uint32_t>(1, sc.sample[r2 - 1]);
      }
      if (t >= t1) break;  // the sample cannot lower it
      rank = r2;
    }
    const size_t cap = topkPassCap(n, k, rank, s);
    if (sc.cand.size() < cap + kSelectSlack) sc.cand.resize(cap + kSelectSlack);
    const size_t kept = cpuSelectAtLeast(x, n, t, sc.cand.data(), cap);
    if (kept == kNone) break;  // a mass of ties: exact below
    // kept >= k: the k largest are all among the candidates. t == 1: every nonzero is.
    if (kept >= k || t == 1) return selectAmong(x, sc.cand.data(), kept, k, idx);
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
  std::memset(dst, 0, n * sizeof(float));
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
  double sent = 0;
  for (size_t j = 0; j < k; ++j) sent += double(x[idx[j]]) * x[idx[j]];
  if (sentSq) *sentSq += sent;
  if (!residual) {
    if (inputSq) *inputSq += squareSum(x, n);
    return;
  }
  // The pass over what stays reads x once for the residual and the norm: |x|^2 is what it
  // kept plus what was sent (the norms are statistics; their summation order is free).
  double kept = 0;
  size_t from = 0;
  for (size_t j = 0; j <= k; ++j) {
    if (j < k && x[idx[j]] == 0.0f) continue;  // a zero entry sends nothing: i stays in the run
    const size_t to = j < k ? idx[j] : n;
    if (to - from >= 32) {
      kept += addToSquareSum(residual + from, x + from, to - from);
    } else {
      for (size_t t = from; t < to; ++t) {
        residual[t] += x[t];
        kept += double(x[t]) * x[t];
      }
    }
    from = to + 1;
  }
  if (inputSq) *inputSq += kept + sent;
}

void cpuRandomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                     uint32_t* idx) {
  const uint64_t key = strataKey(seed, call, offset);
  for (size_t j = 0; j < k; ++j) idx[j] = strataIndex(key, j, n, k);
}

}  // namespace squeeze::device
