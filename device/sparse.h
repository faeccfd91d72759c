// Kernels of the sparsifiers (topk, randk, threshold, dgc): magnitude selection (exact, and
// DGC's sampled threshold), gather, scatter-add, dense <-> sparse, and the error-feedback pass
// over what a sparse payload left out. Index lists are u32 positions relative to a chunk, always
// strictly ascending, so the scatters stream through memory and a payload carries no duplicate.
//
// Magnitudes are compared as keys: the float's bits with the sign cleared. For every non-NaN
// float the key order is the |x| order; NaN keys sort above infinity, so a NaN is selected (and
// seen downstream) rather than hidden in a residual. A zero (key 0) is never selected: it
// carries nothing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace squeeze::device {

// The magnitude key of x (see above).
uint32_t magnitudeKey(float x);

// Selects the k largest magnitudes of x[0..n) (zeros excluded) and writes their indices,
// ascending, to idx (capacity k); returns how many (<= k). Ties at the k-th magnitude go to the
// lowest indices. n must be < 2^32.
//   sampled = true: DGC's sampled threshold: read ~1% of x (at least 512 values, deterministic
//     stratified hashed positions), take the threshold t1 that the sample puts a little above
//     rank k (3 standard deviations of the estimate), then ONE streaming pass keeps every
//     |x| >= t1 (vector compare and compaction). Kept more than k: exact selection among those
//     (nth_element over ~k). Kept fewer than k: the threshold is lowered once (t2, the sample's
//     value at rank 4 r1 + 16) and the pass repeated; still fewer: those are sent. Too many
//     kept to hold (max(2k, 2 x expected) + 1024, i.e. masses of ties): exact fallback below.
//     Guarantee: at most k indices, and every selected magnitude >= every unselected one; the
//     exact k largest whenever a pass kept at least k (the usual case).
//   sampled = false: exact: the k largest (fewer only when x has fewer than k nonzeros). The
//     same passes, but where they do not provably hold the k largest (still fewer than k after
//     lowering, or too many ties) it falls back to nth_element over the keys of the whole chunk
//     and one more pass. Chunks under 32768 values always take that direct route.
size_t cpuSelectTopk(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx);

// Writes the indices (ascending) of x[i] with magnitudeKey(x[i]) >= minKey (minKey >= 1) to idx,
// stopping early when more than cap match: returns the number written (<= cap), or SIZE_MAX
// when more than cap match. One streaming pass (vector compare and compaction). idx must have
// room for cap + kSelectSlack entries: the vector path stores whole registers of indices.
constexpr size_t kSelectSlack = 16;
size_t cpuSelectAtLeast(const float* x, size_t n, uint32_t minKey, uint32_t* idx, size_t cap);

// Which vector path cpuSelectAtLeast takes: the best the CPU has (the default), or a given one,
// for tests and benchmarks. Returns false, changing nothing, when the CPU lacks it. Process-wide;
// not to be changed while selections run on other threads.
enum class SelectPath { kBest, kScalar, kAvx2, kAvx512 };
bool cpuForceSelectPath(SelectPath path);

// out[j] = x[idx[j]] for j < k.
void cpuGather(const float* x, const uint32_t* idx, size_t k, float* out);

// dst[0..n) = 0, then dst[idx[j]] = vals[j]. Indices must be checked by the caller.
void cpuDensify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n);

// out[0..n) = local[0..n) (skipped when out == local), then out[idx[j]] += vals[j]. Indices
// must be checked by the caller and distinct.
void cpuScatterAdd(float* out, const float* local, size_t n, const uint32_t* idx, const float* vals,
                   size_t k);

// Error feedback for a sparse payload that carries x exactly at idx (ascending) and 0
// elsewhere: residual[i] += x[i] where i is not in idx (when residual is not null); inputSq +=
// sum x^2 over all i, sentSq += sum x[idx]^2. Equal to Codec::encodeFeedback's generic
// residual += x - decode(payload), without the decode.
void cpuSparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* residual,
                       double* inputSq, double* sentSq);

// randk's index set for a chunk: k distinct indices of [0, n), ascending, one from each of k
// strata [floor(j*n/k), floor((j+1)*n/k)), the position inside a stratum from a counter-based
// hash of (seed, call, offset, j). The same on every rank for the same arguments.
void cpuRandomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                     uint32_t* idx);

}  // namespace squeeze::device
