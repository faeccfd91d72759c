// Kernels of the sparsifiers (topk, randk, threshold, dgc): magnitude selection (exact, and
// DGC's sampled threshold), gather, scatter-add, dense <-> sparse, and the error-feedback pass
// over what a sparse payload left out. Index lists are u32 positions relative to a chunk, always
// strictly ascending, so the scatters stream through memory and a payload carries no duplicate.
//
// Magnitudes are compared as keys: the float's bits with the sign cleared. For every non-NaN
// float the key order is the |x| order; NaN keys sort above infinity, so a NaN is selected (and
// seen downstream) rather than hidden in a residual. A zero (key 0) is never selected: it
// carries nothing. An index list may still name zeros, as padding: a GPU's top-k fills its
// selection up to k with them so that nothing waits for its count (cpuPadSelection). The
// scatters skip an entry whose value is zero and the feedback counts it unsent, so a padded
// payload decodes, combines and leaves a residual exactly as the unpadded one.
//
// Every cpu* function has a gpu* twin (built with the cuda feature) that takes the same
// arguments plus a stream and selects the same indices: the per-element and per-index math both
// use (keys, sample positions, strata, the sampled passes' ranks and caps) is written once below.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "device/elementwise.h"
#include "device/hd.h"
#include "device/quantize.h"  // mix64
#include "squeeze_config.h"

namespace squeeze::device {

// ---- shared math -----------------------------------------------------------------------------

// The magnitude key of x (see above).
SQZ_HD inline uint32_t magnitudeKey(float x) { return floatBits(x) & 0x7fffffffu; }

// splitmix64's whole step (the golden-ratio increment, then the finalizer): the counter-based
// hash of the sparsifiers.
SQZ_HD inline uint64_t sparseHash(uint64_t z) { return mix64(z + 0x9e3779b97f4a7c15ull); }

// A uniform value in [0, size) from the high 32 bits of h (size < 2^32).
SQZ_HD inline uint32_t uniformBelow(uint64_t h, uint64_t size) {
  return static_cast<uint32_t>(((h >> 32) * size) >> 32);
}

// Sampled top-k (cpuSelectTopk): chunks below kSampledFrom values are selected exactly in one
// go, since the sample (at least kMinSample values) would be most of the chunk.
constexpr size_t kMinSample = 512;
constexpr size_t kSampledFrom = 64 * kMinSample;

// A GPU selects chunks of up to this many values in one thread block, one launch, whichever
// the route (gpuSelectTopk): a pipeline piece's selection (SQZ_CHUNK_BYTES, 512K by default:
// 131072 floats) is then one launch, not ten or more.
constexpr size_t kOneBlockSelectMax = 131072;

// The sample's size for a chunk of n >= kSampledFrom values (~1%).
inline size_t topkSampleSize(size_t n) { return std::max(kMinSample, n / 100); }

// Sample j of s lies in stratum [j * step, (j + 1) * step), step = n / s, at a hashed position:
// deterministic, so a chunk always gives the same payload.
SQZ_HD inline size_t topkSamplePosition(size_t j, size_t step) {
  return j * step + uniformBelow(sparseHash(j), step);
}

// Rank r1 in the sample (1-based, descending) estimates rank k in the chunk; the margin (3
// standard deviations of a Poisson count, +2) puts t1 just above rank k so that a pass usually
// keeps k or more.
inline size_t topkFirstRank(size_t n, size_t k, size_t s) {
  const double e = double(k) * double(s) / double(n);
  return std::min(s, static_cast<size_t>(std::ceil(e + 3 * std::sqrt(e) + 2)));
}

// The rank of the lowered threshold t2, used when the pass at t1 kept fewer than k.
inline size_t topkLoweredRank(size_t r1, size_t s) { return std::min(s, 4 * r1 + 16); }

// How many hits a pass at the sample's rank `rank` may keep before it gives up (masses of ties).
inline size_t topkPassCap(size_t n, size_t k, size_t rank, size_t s) {
  const double expected = double(rank) * double(n) / double(s);
  return std::min(n, std::max<size_t>(2 * k, static_cast<size_t>(2 * expected)) + 1024);
}

// randk: the hash key of one (seed, call, offset), and the index drawn from stratum j of k over
// [0, n) (k <= n < 2^32): stratum [floor(j*n/k), floor((j+1)*n/k)), never empty.
SQZ_HD inline uint64_t strataKey(uint64_t seed, uint64_t call, uint64_t offset) {
  return sparseHash(sparseHash(sparseHash(seed) ^ call) ^ offset);
}
SQZ_HD inline uint32_t strataIndex(uint64_t key, uint64_t j, uint64_t n, uint64_t k) {
  const uint64_t lo = j * n / k, hi = (j + 1) * n / k;
  return static_cast<uint32_t>(lo + uniformBelow(sparseHash(key + j), hi - lo));
}

// ---- kernels ---------------------------------------------------------------------------------

// Selects the k largest magnitudes of x[0..n) (zeros excluded) and writes their indices,
// ascending, to idx (capacity k); returns how many: k, fewer only when x has fewer than k
// nonzeros. Ties at the k-th magnitude go to the lowest indices. n must be < 2^32. `sampled`
// names the route, never the result:
//   sampled = true: DGC's sampled threshold: read ~1% of x (at least 512 values, deterministic
//     stratified hashed positions), take the threshold t1 that the sample puts a little above
//     rank k (3 standard deviations of the estimate), then ONE streaming pass keeps every
//     |x| >= t1 (vector compare and compaction) and the exact selection runs among those ~k.
//     Where the pass cannot hold the k largest (fewer than k kept above a threshold over the
//     smallest nonzero, or masses of ties past the pass's cap, max(2k, 2 x expected) + 1024),
//     the exact selection runs over the whole chunk. The CPU lowers the threshold once first
//     (t2, the sample's value at rank 4 r1 + 16).
//   sampled = false: exact selection over the whole chunk (the GPU's radix select); the CPU
//     takes the sampled route for both, as it is its fastest.
// Chunks under 32768 values (kSampledFrom) always take the whole-chunk route; a GPU selects
// chunks of up to kOneBlockSelectMax values in one block, the same set.
size_t cpuSelectTopk(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx);

// What a GPU's selection writes (gpuSelectTopk): the m indices of idx (ascending) joined by the
// lowest-index zeros of x outside them, up to min(k, n) indices in all, ascending; returns that.
// idx has room for k.
size_t cpuPadSelection(const float* x, size_t n, uint32_t* idx, size_t m, size_t k);

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

// dst[0..n) = 0, then dst[idx[j]] = vals[j] where vals[j] is not zero (padding). Indices must
// be checked by the caller.
void cpuDensify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n);

// out[0..n) = local[0..n) (skipped when out == local), then out[idx[j]] += vals[j] where
// vals[j] is not zero (padding: adding a zero could still turn a -0 into +0). Indices must be
// checked by the caller and distinct.
void cpuScatterAdd(float* out, const float* local, size_t n, const uint32_t* idx, const float* vals,
                   size_t k);

// Error feedback for a sparse payload that carries x exactly at idx (ascending) and 0
// elsewhere: residual[i] += x[i] where i is not in idx or x[i] is zero (the payload's zero
// entries are padding, skipped by the scatters) (when residual is not null); inputSq +=
// sum x^2 over all i, sentSq += sum x[idx]^2. Equal to Codec::encodeFeedback's generic
// residual += x - decode(payload), without the decode.
void cpuSparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* residual,
                       double* inputSq, double* sentSq);

// cpuSelectTopk, then cpuSparseFeedback over its selection, fused: the same indices, residual
// bits and (to rounding: another summation order) norms. One pass over x and the residual
// compares against DGC's sampled threshold, collects the candidates and adds every value below
// it to the residual at once; the selection among the candidates then knows what was sent, and
// only the candidates left out are added. Where an add could not be undone exactly (a nonzero
// residual in general; never where the residual is 0, as after a handle's prepare) the pass stops
// adding and the rest is fed back after the selection; where the selection needs a value the
// pass added (its fallback routes), the add is undone (r - x, exact).
// It also writes the m selected values right after the m indices, (float*)(idx + m): the
// sparse payload's body (topk.h); idx has room for 2k words.
size_t cpuSelectTopkFeedback(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx,
                             float* residual, double* inputSq, double* sentSq);

// cpuSelectAtLeast, then (unless more than cap match: then the residual and the norms are left as
// they were) cpuSparseFeedback over its selection, fused as cpuSelectTopkFeedback.
size_t cpuSelectAtLeastFeedback(const float* x, size_t n, uint32_t minKey, uint32_t* idx,
                                size_t cap, float* residual, double* inputSq, double* sentSq);

// cpuGather(x, idx, k, values), then cpuSparseFeedback, in one pass (values null: the
// feedback only).
void cpuGatherFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* values,
                       float* residual, double* inputSq, double* sentSq);

// randk's index set for a chunk: k distinct indices of [0, n), ascending, one from each of k
// strata [floor(j*n/k), floor((j+1)*n/k)), the position inside a stratum from a counter-based
// hash of (seed, call, offset, j) (strataIndex). The same on every rank for the same arguments.
void cpuRandomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                     uint32_t* idx);

#if SQZ_HAVE_CUDA
// ---- CUDA twins (device/cuda/sparse.cu) --------------------------------------------------------
// Same arguments and results as the cpu* function of the same name, plus the stream the work
// is enqueued on. Pointers are device memory or pinned, mapped host memory (unified
// addressing: the kernels access them directly). gpuSelectAtLeast (its count) and a feedback
// that adds to host doubles synchronize the stream before returning; the others only enqueue.
// Scratch (a selection's state, a pinned slot, device buffers grown, never shrunk, in the order of
// the work that uses them) is the `scratch` given: an execution context's own (makeSparseScratch,
// made where waiting for the device is allowed; the context's work is one sequence whatever
// stream it is on, so one scratch serves it), or, where null, the calling thread's for `stream`,
// made at first use (cudaMalloc, cudaHostAlloc: a wait for the device). The steady state
// allocates nothing. Throw Error(kCuda) on a CUDA failure. Thread-safe: distinct threads may call
// them concurrently, on the same stream or not, with distinct scratch. `stream` belongs to the
// current device (CUDA's rule for launches; the scratch is the current device's).
struct SparseScratch;
struct SparseScratchFree {
  void operator()(SparseScratch* s) const;
};
using SparseScratchPtr = std::unique_ptr<SparseScratch, SparseScratchFree>;
// For the current device.
SparseScratchPtr makeSparseScratch();

// The indices cpuSelectTopk selects (the same set by either route), padded with zeros to
// min(k, n) (cpuPadSelection), and min(k, n): the count is known before the selection runs, so
// nothing waits for it; the sampled route's steps (the pass's count, the fallback) are steered
// on the device. Exact selection is a radix select on the keys, zeros included, with the
// lowest-index tie rule: that is the padded set.
size_t gpuSelectTopk(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx,
                     GpuStream stream, SparseScratch* scratch = nullptr);
// cpuSelectAtLeast's indices (ascending) and count, or SIZE_MAX past cap; idx needs room for cap
// entries (cap + kSelectSlack, as for the CPU, is more than enough).
size_t gpuSelectAtLeast(const float* x, size_t n, uint32_t minKey, uint32_t* idx, size_t cap,
                        GpuStream stream, SparseScratch* scratch = nullptr);
void gpuGather(const float* x, const uint32_t* idx, size_t k, float* out, GpuStream stream);
// Indices distinct (as the CPU's callers check them), else the winner of a duplicate is
// unspecified.
void gpuDensify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n,
                GpuStream stream);
void gpuScatterAdd(float* out, const float* local, size_t n, const uint32_t* idx, const float* vals,
                   size_t k, GpuStream stream);
// The residual bit for bit as the CPU's; inputSq / sentSq (host pointers) get sums in double
// over a fixed reduction tree, so the same bits on every run (they may differ from the CPU's
// in the last bits: another summation order). Synchronizes only when one of them is not null
// and deviceSums is: deviceSums (two doubles in device memory) gets both sums added on the device
// instead, and nothing waits; *inputSq and *sentSq are left to whoever reads them back.
void gpuSparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* residual,
                       double* inputSq, double* sentSq, double* deviceSums, GpuStream stream,
                       SparseScratch* scratch = nullptr);
void gpuRandomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                     uint32_t* idx, GpuStream stream);
#endif

}  // namespace squeeze::device
