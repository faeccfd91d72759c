// CUDA kernels behind device/sparse.h: the gpu* twins of the CPU sparsifier kernels, choosing
// the same indices as the CPU for the same input.
//
// Top-k selects cpuSelectTopk's set (the k largest keys, ties to the lowest index) with these GPU
// forms, every step enqueued and none waited for:
//   sample       one thread per sample position (topkSamplePosition), then a CUB radix sort of
//                the ~1% sample keys; a kernel takes t1, its key at rank r1;
//   pass         an ordered compaction (below) of the keys >= t1 into the candidates, ascending,
//                at most the pass's cap of them: two reads of the chunk;
//   steer        the pass's write kernel (block 0) reads the pass's count: k or more that
//                fit, and the selection runs among the candidates; else over the whole chunk
//                (the CPU's fallback). Every later kernel reads that choice (Source::steered)
//                and its size from the device, their grids sized for the whole chunk;
//   exact        the k-th largest key by radix select: three histogram passes on the key bits
//                (11, 11, 9), each narrowing the prefix;
//   compaction   over tiles of 4096 (a count pass, a scan of the per-tile counts, a write pass):
//                every key above the k-th and the lowest-index ties, in index order.
// A chunk of up to kOneBlockSelectMax values (a pipeline piece) is selected by one block in one
// launch (selectBlockKernel: the same steps in shared memory); larger ones take the routes above.
// The radix select counts zeros as keys, so where fewer than k values are nonzero the
// lowest-index zeros fill the selection up to k: the CPU's set padded (cpuPadSelection), and
// the count is min(k, n) by construction, so the host never reads it back. The sampled route
// reads the chunk twice when the pass holds the k largest (the usual case), seven times when
// it falls back; the exact route five times.
//
// Scratch device memory is cached per thread, device and stream: each selection's scratch is
// used in its stream's order, and work still queued on one stream never shares it with another.
// The pinned slots the host reads results from (gpuSelectAtLeast, host-summed feedback) are read
// only after a synchronize.
//
// nvcc only warns when host-only code is called from device code, and compiles the call to
// nothing: the hashes shared with the CPU (device/quantize.h's mix64, under sparseHash) must be
// SQZ_HD, so that warning is an error here.
#pragma nv_diag_error 20011
#pragma nv_diag_error 20014

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cub/cub.cuh>
#include <memory>
#include <vector>

#include "device/batch.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/sparse.h"

namespace squeeze::device {
namespace {

constexpr uint32_t kTile = 4096;  // elements per tile of the ordered compaction
constexpr uint32_t kRounds = kTile / kThreads;
constexpr int kUnroll = 4;  // float4 loads in flight per thread in a pass
constexpr uint32_t kFullMask = 0xffffffffu;
constexpr int kSumBlocks = 1024;  // fixed grid of the sums: the same tree on any GPU
constexpr size_t kNone = static_cast<size_t>(-1);

// Radix select state (device memory). hist is zeroed when a selection starts and after each pick.
struct SelectState {
  uint32_t counter;   // hits of a pass
  uint32_t prefix;    // key bits fixed so far
  uint32_t mask;      // which bits prefix fixes
  uint32_t rank;      // 1-based rank still wanted among keys matching prefix
  uint32_t kth;       // the selection: every key > kth, and the first tiesLeft keys == kth
  uint32_t tiesLeft;
  uint32_t useCand;  // the steered source: the candidates (1) or the whole chunk (0)
  uint32_t m;        // and its size
  uint32_t hist[2048];
};

// What the host reads after a sync (pinned, mapped).
struct Slots {
  uint32_t count;
  double sums[2];
};

}  // namespace

struct SparseScratch {
  int sms = 0;
  cuda::DeviceBuffer state, sample, sampleAlt, cand, candAlt, tiles, temp, sums;
  cuda::PinnedBuffer slots;
};

void SparseScratchFree::operator()(SparseScratch* s) const { delete s; }

SparseScratchPtr makeSparseScratch() {
  SparseScratchPtr fresh(new SparseScratch);
  cuda::check(cudaDeviceGetAttribute(&fresh->sms, cudaDevAttrMultiProcessorCount,
                                     cuda::currentDevice()),
              "cudaDeviceGetAttribute(multiprocessors)");
  fresh->state = cuda::DeviceBuffer(sizeof(SelectState));
  fresh->slots = cuda::PinnedBuffer(sizeof(Slots));
  return fresh;
}

namespace {

using Scratch = SparseScratch;

// `given`, or the calling thread's scratch for `stream` on the current device.
Scratch& scratch(cudaStream_t stream, Scratch* given) {
  if (given) return *given;
  return *perThreadDeviceStream<SparseScratchPtr>(stream, [](int) {
    return std::make_unique<SparseScratchPtr>(makeSparseScratch());
  });
}

SelectState* stateOf(Scratch& sc) { return static_cast<SelectState*>(sc.state.data()); }
Slots* slotsOf(Scratch& sc) { return static_cast<Slots*>(sc.slots.data()); }

uint32_t* u32(cuda::DeviceBuffer& b, size_t count, cudaStream_t stream) {
  b.reserve(std::max<size_t>(count, 1) * sizeof(uint32_t), stream);
  return static_cast<uint32_t*>(b.data());
}

// Bits that hold every index below n.
int indexBits(size_t n) { return n <= 1 ? 1 : 32 - __builtin_clz(static_cast<uint32_t>(n - 1)); }

// ---- sources of keys: the chunk itself, or the chunk at candidate positions ------------------

// x[0..m) (cand null) or x at cand[0..m). A steered source is whichever the steer kernel chose
// (SelectState::useCand, m); kernels resolve it first.
struct Source {
  const float* x;
  const uint32_t* cand;
  uint32_t m;
  bool steered;
  __device__ uint32_t index(uint32_t j) const { return cand ? cand[j] : j; }
  __device__ uint32_t key(uint32_t j) const { return magnitudeKey(x[index(j)]); }
};

Source direct(const float* x, size_t n) {
  return Source{x, nullptr, static_cast<uint32_t>(n), false};
}
Source steered(const float* x, const uint32_t* cand) { return Source{x, cand, 0, true}; }

__device__ Source resolve(Source s, const SelectState* st) {
  if (!s.steered) return s;
  return Source{s.x, st->useCand ? s.cand : nullptr, st->m, false};
}

// ---- block helpers ----------------------------------------------------------------------------

// The number of threads before this one (in thread order) whose flag is set, and the block's
// total, in a block of kBlock threads (warpSums: kBlock / 32 words). Every thread of the block
// must call it.
template <int kBlock = kThreads>
__device__ uint32_t blockExclusiveCount(bool flag, uint32_t* warpSums, uint32_t* total) {
  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t ballot = __ballot_sync(kFullMask, flag);
  if (lane == 0) warpSums[warp] = __popc(ballot);
  __syncthreads();
  uint32_t before = 0, all = 0;
  for (uint32_t w = 0; w < kBlock / 32; ++w) {
    before += w < warp ? warpSums[w] : 0;
    all += warpSums[w];
  }
  __syncthreads();  // warpSums is reused by the next call
  *total = all;
  return before + __popc(ballot & ((1u << lane) - 1));
}

// ---- sample ----------------------------------------------------------------------------------

__global__ void sampleKernel(const float* x, size_t s, size_t step, uint32_t* keys) {
  const size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (j < s) keys[j] = magnitudeKey(x[topkSamplePosition(j, step)]);
}

// The pass kept counts[] (per tile, as tileCountKernel packs them): k or more that fit in cap,
// and the selection runs among those candidates; else over the whole chunk of n. Either way it
// starts afresh for rank k (selectInitKernel zeroed the histogram, which the pass leaves alone).
// Decided by the pass's own tileWriteKernel (its block 0), whose offsets are the counts' scan.
struct Steer {
  bool on;  // false: a compaction that decides nothing
  uint32_t n, k, cap;
  uint32_t tiles;                    // set by compact
  const unsigned long long* counts;  // set by compact
};

__device__ void steer(const Steer& s, const unsigned long long* offsets, SelectState* st) {
  const unsigned long long total = offsets[s.tiles - 1] + s.counts[s.tiles - 1];
  const unsigned long long kept = (total >> 32) + (total & 0xffffffffu);
  const bool among = kept >= s.k && kept <= s.cap;
  st->useCand = among;
  st->m = among ? static_cast<uint32_t>(kept) : s.n;
  st->prefix = 0;
  st->mask = 0;
  st->rank = s.k;
}

// ---- the streaming pass: indices with key >= minKey, unordered, at most cap of them ----------

__device__ uint32_t hits4(float4 v, uint32_t minKey) {
  return uint32_t(magnitudeKey(v.x) >= minKey) | uint32_t(magnitudeKey(v.y) >= minKey) << 1 |
         uint32_t(magnitudeKey(v.z) >= minKey) << 2 | uint32_t(magnitudeKey(v.w) >= minKey) << 3;
}

// x + head is 16-byte aligned; [0, head) and the tail after the last whole float4 are done by
// the first warp one value at a time. Each warp reserves room for its hits with one atomic.
__global__ void __launch_bounds__(kThreads)
    atLeastKernel(const float* __restrict__ x, uint32_t n, uint32_t head, uint32_t minKey,
                  uint32_t* __restrict__ out, uint32_t cap, uint32_t* counter) {
  const float4* v = reinterpret_cast<const float4*>(x + head);
  const size_t nv = (n - head) / 4;
  const uint32_t lane = threadIdx.x & 31;
  const size_t warp = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) >> 5;
  const size_t warps = (gridDim.x * size_t(blockDim.x)) >> 5;
  const float4 zero = make_float4(0, 0, 0, 0);
  for (size_t base = warp * 32 * kUnroll; base < nv; base += warps * 32 * kUnroll) {
    float4 val[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t slot = base + u * 32 + lane;
      val[u] = slot < nv ? __ldcs(v + slot) : zero;
    }
    uint32_t mask = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) mask |= hits4(val[u], minKey) << (4 * u);
    if (!__any_sync(kFullMask, mask != 0)) continue;
    const uint32_t cnt = __popc(mask);
    uint32_t incl = cnt;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(kFullMask, incl, o);
      if (lane >= static_cast<uint32_t>(o)) incl += y;
    }
    const uint32_t total = __shfl_sync(kFullMask, incl, 31);
    uint32_t at = lane == 0 ? atomicAdd(counter, total) : 0;
    at = __shfl_sync(kFullMask, at, 0) + incl - cnt;
    for (; mask; mask &= mask - 1, ++at) {
      const uint32_t b = __ffs(mask) - 1;
      if (at < cap)
        out[at] = head + static_cast<uint32_t>(4 * (base + (b >> 2) * 32 + lane)) + (b & 3);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < 32) {
    const uint32_t tail = head + static_cast<uint32_t>(4 * nv);  // n - tail < 4, head < 4
    const uint32_t i = lane < head ? lane : tail + lane - head;
    if (lane < head + (n - tail) && magnitudeKey(x[i]) >= minKey) {
      const uint32_t at = atomicAdd(counter, 1u);
      if (at < cap) out[at] = i;
    }
  }
}

// ---- radix select ----------------------------------------------------------------------------

struct Digit {
  int shift, bits;
};
constexpr Digit kDigits[3] = {{20, 11}, {9, 11}, {0, 9}};  // keys have 31 bits

// Starts a selection; also zeroes the histogram, so a call cut short by an error leaves nothing
// behind for the next one.
// A fresh state. kthKey (not null): the sampled pass's selection instead, every key >= t1 with
// t1 = *kthKey (the sorted sample's key at rank r1) and at least 1.
__global__ void selectInitKernel(SelectState* st, uint32_t rank, uint32_t kth, uint32_t tiesLeft,
                                 const uint32_t* kthKey = nullptr) {
  for (uint32_t i = threadIdx.x; i < 2048; i += blockDim.x) st->hist[i] = 0;
  if (threadIdx.x == 0) {
    st->prefix = 0;
    st->mask = 0;
    st->rank = rank;
    st->kth = kthKey ? max(1u, *kthKey) : kth;
    st->tiesLeft = kthKey ? UINT32_MAX : tiesLeft;
  }
}

__global__ void __launch_bounds__(kThreads) histogramKernel(Source src, SelectState* st, Digit d) {
  __shared__ uint32_t h[2048];
  src = resolve(src, st);
  const uint32_t bins = 1u << d.bits;
  for (uint32_t i = threadIdx.x; i < bins; i += kThreads) h[i] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix, mask = st->mask;
  for (size_t j = blockIdx.x * size_t(kThreads) + threadIdx.x; j < src.m;
       j += gridDim.x * size_t(kThreads)) {
    const uint32_t key = src.key(static_cast<uint32_t>(j));
    if ((key & mask) == prefix) atomicAdd(&h[(key >> d.shift) & (bins - 1)], 1u);
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < bins; i += kThreads)
    if (h[i]) atomicAdd(&st->hist[i], h[i]);
}

// Finds the digit holding the wanted rank (bins scanned from the top), fixes it in the prefix and
// leaves the rank within it; zeroes the histogram for the next pass. One block of 1024.
__global__ void __launch_bounds__(1024) pickKernel(SelectState* st, Digit d, bool last) {
  using Scan = cub::BlockScan<uint32_t, 1024>;
  __shared__ typename Scan::TempStorage temp;
  const uint32_t bins = 1u << d.bits;
  const uint32_t o0 = 2 * threadIdx.x, o1 = o0 + 1;  // positions from the top bin down
  const uint32_t c0 = o0 < bins ? st->hist[bins - 1 - o0] : 0;
  const uint32_t c1 = o1 < bins ? st->hist[bins - 1 - o1] : 0;
  const uint32_t rank = st->rank;
  uint32_t before;
  Scan(temp).ExclusiveSum(c0 + c1, before);
  __syncthreads();
  const uint32_t os[2] = {o0, o1}, cs[2] = {c0, c1};
  for (int e = 0; e < 2; ++e) {
    const uint32_t o = os[e], c = cs[e];
    if (o < bins && before < rank && rank <= before + c) {
      const uint32_t digit = bins - 1 - o;
      st->prefix |= digit << d.shift;
      st->mask |= (bins - 1) << d.shift;
      st->rank = rank - before;
      if (last) {  // the k-th largest key, and how many of its ties the selection takes
        st->kth = st->prefix;
        st->tiesLeft = rank - before;
      }
    }
    before += c;
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < bins; i += 1024) st->hist[i] = 0;
}

// ---- ordered compaction of the selection (every key > kth, the first tiesLeft ties) ---------

// Per tile: (keys > kth) << 32 | (keys == kth).
__global__ void __launch_bounds__(kThreads)
    tileCountKernel(Source src, const SelectState* st, unsigned long long* counts) {
  src = resolve(src, st);
  const uint32_t kth = st->kth;
  const size_t base = blockIdx.x * size_t(kTile);
  if (base >= src.m) {  // a steered source's grid covers the whole chunk
    if (threadIdx.x == 0) counts[blockIdx.x] = 0;
    return;
  }
  uint32_t above = 0, ties = 0;
  for (uint32_t r = 0; r < kRounds; ++r) {
    const size_t j = base + r * kThreads + threadIdx.x;
    const bool valid = j < src.m;
    const uint32_t key = valid ? src.key(static_cast<uint32_t>(j)) : 0;
    above += __syncthreads_count(valid && key > kth);
    ties += __syncthreads_count(valid && key == kth);
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = (static_cast<unsigned long long>(above) << 32) | ties;
}

// Writes the selected indices in order, the first cap of them: tile b starts after the
// above-keys of earlier tiles and the ties of earlier tiles that are still within tiesLeft.
__global__ void __launch_bounds__(kThreads)
    tileWriteKernel(Source src, SelectState* st, const unsigned long long* offsets,
                    uint32_t* out, uint32_t cap, Steer steering) {
  __shared__ uint32_t warpSums[kThreads / 32];
  // The fields steer writes are read by none of this kernel's blocks: a steering compaction's
  // source is direct, so resolve reads no state, and the loop reads kth and tiesLeft only.
  if (steering.on && blockIdx.x == 0 && threadIdx.x == 0)
    steer(steering, offsets, st);
  src = resolve(src, st);
  const size_t base = blockIdx.x * size_t(kTile);
  if (base >= src.m) return;
  const uint32_t kth = st->kth, tiesLeft = st->tiesLeft;
  const unsigned long long off = offsets[blockIdx.x];
  uint32_t tieRank = static_cast<uint32_t>(off);
  uint32_t at = static_cast<uint32_t>(off >> 32) + min(tieRank, tiesLeft);
  for (uint32_t r = 0; r < kRounds; ++r) {
    const size_t j = base + r * kThreads + threadIdx.x;
    const bool valid = j < src.m;
    const uint32_t key = valid ? src.key(static_cast<uint32_t>(j)) : 0;
    const bool tie = valid && key == kth;
    uint32_t ties, taken;
    const uint32_t tieBefore = blockExclusiveCount(tie, warpSums, &ties);
    const bool take = (valid && key > kth) || (tie && tieRank + tieBefore < tiesLeft);
    const uint32_t pos = at + blockExclusiveCount(take, warpSums, &taken);
    if (take && pos < cap) out[pos] = src.index(static_cast<uint32_t>(j));
    at += taken;
    tieRank += ties;
  }
}

// ---- one block: a small chunk's whole selection in one launch ---------------------------------

constexpr int kBlockSelectThreads = 1024;

// The k largest keys of x[0..n) (zeros included, ties to the lowest index), ascending, to out;
// n <= kOneBlockSelectMax. The same steps as the multi-kernel route, in shared memory: three
// histogram passes with their picks (pickKernel's rule), then the ordered compaction 1024
// values at a time. The chunk (at most 512 KiB) is read four times, from L2 after the first.
__global__ void __launch_bounds__(kBlockSelectThreads) selectBlockKernel(JobTable<SelectJob> t) {
  const SelectJob& job = t.job[blockIdx.y];
  const float* __restrict__ x = job.x;
  const uint32_t n = static_cast<uint32_t>(job.n), k = static_cast<uint32_t>(job.k);
  uint32_t* out = job.idx;
  using Scan = cub::BlockScan<uint32_t, kBlockSelectThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ uint32_t hist[2048];
  __shared__ uint32_t warpSums[kBlockSelectThreads / 32];
  __shared__ uint32_t prefixS, maskS, rankS;
  if (threadIdx.x == 0) {
    prefixS = 0;
    maskS = 0;
    rankS = k;
  }
  uint32_t kth = 0, tiesLeft = UINT32_MAX;  // k >= n: every key
  if (k < n) {
    for (int p = 0; p < 3; ++p) {
      const Digit d = p == 0 ? Digit{20, 11} : p == 1 ? Digit{9, 11} : Digit{0, 9};  // kDigits
      const uint32_t bins = 1u << d.bits;
      for (uint32_t i = threadIdx.x; i < 2048; i += kBlockSelectThreads) hist[i] = 0;
      __syncthreads();
      const uint32_t prefix = prefixS, mask = maskS, rank = rankS;
      for (uint32_t i = threadIdx.x; i < n; i += kBlockSelectThreads) {
        const uint32_t key = magnitudeKey(x[i]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> d.shift) & (bins - 1)], 1u);
      }
      __syncthreads();
      const uint32_t o0 = 2 * threadIdx.x, o1 = o0 + 1;  // positions from the top bin down
      const uint32_t c0 = o0 < bins ? hist[bins - 1 - o0] : 0;
      const uint32_t c1 = o1 < bins ? hist[bins - 1 - o1] : 0;
      uint32_t before;
      Scan(temp).ExclusiveSum(c0 + c1, before);
      const uint32_t os[2] = {o0, o1}, cs[2] = {c0, c1};
      for (int e = 0; e < 2; ++e) {
        if (os[e] < bins && before < rank && rank <= before + cs[e]) {
          prefixS = prefix | (bins - 1 - os[e]) << d.shift;
          maskS = mask | (bins - 1) << d.shift;
          rankS = rank - before;
        }
        before += cs[e];
      }
      __syncthreads();  // the pick is seen, and temp and hist are free again
    }
    kth = prefixS;     // the k-th largest key
    tiesLeft = rankS;  // how many of its ties the selection takes
  }
  uint32_t at = 0, tieRank = 0;
  for (uint32_t base = 0; base < n; base += kBlockSelectThreads) {
    const uint32_t i = base + threadIdx.x;
    const bool valid = i < n;
    const uint32_t key = valid ? magnitudeKey(x[i]) : 0;
    const bool tie = valid && key == kth;
    uint32_t ties, taken;
    const uint32_t tieBefore = blockExclusiveCount<kBlockSelectThreads>(tie, warpSums, &ties);
    const bool take = (valid && key > kth) || (tie && tieRank + tieBefore < tiesLeft);
    const uint32_t pos = at + blockExclusiveCount<kBlockSelectThreads>(take, warpSums, &taken);
    if (take) out[pos] = i;
    at += taken;
    tieRank += ties;
  }
}

// ---- host steps ------------------------------------------------------------------------------

// Enqueues the ordered compaction of what the state selects from src into out (at most cap
// indices); bound is src's size, or its upper bound when src is steered. Leaves the per-tile
// counts and their exclusive sums in sc.tiles; returns the tiles. `steering` (on): the pass's
// tileWriteKernel also decides where the selection runs (steer).
uint32_t compact(Scratch& sc, Source src, size_t bound, uint32_t* out, uint32_t cap,
                 cudaStream_t stream, Steer steering = {}) {
  const uint32_t tiles = static_cast<uint32_t>(std::max<size_t>(1, (bound + kTile - 1) / kTile));
  sc.tiles.reserve(2 * size_t(tiles) * sizeof(unsigned long long), stream);
  auto* counts = static_cast<unsigned long long*>(sc.tiles.data());
  unsigned long long* offsets = counts + tiles;
  SelectState* st = stateOf(sc);
  tileCountKernel<<<tiles, kThreads, 0, stream>>>(src, st, counts);
  cuda::checkLaunch("tileCountKernel");
  size_t bytes = 0;
  cuda::check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, counts, offsets, tiles, stream),
              "cub::DeviceScan::ExclusiveSum (size)");
  sc.temp.reserve(bytes, stream);
  cuda::check(cub::DeviceScan::ExclusiveSum(sc.temp.data(), bytes, counts, offsets, tiles, stream),
              "cub::DeviceScan::ExclusiveSum");
  steering.tiles = tiles;
  steering.counts = counts;
  tileWriteKernel<<<tiles, kThreads, 0, stream>>>(src, st, offsets, out, cap, steering);
  cuda::checkLaunch("tileWriteKernel");
  return tiles;
}

// Enqueues the radix select of the k-th largest key of src (bound as for compact), for a state
// that wants rank k with a fresh prefix, then the compaction of the selection into out.
void selectInto(Scratch& sc, Source src, size_t bound, size_t k, uint32_t* out,
                cudaStream_t stream) {
  SelectState* st = stateOf(sc);
  const unsigned blocks = gridFor(bound, kThreads * 16, size_t(sc.sms) * 4);
  for (int p = 0; p < 3; ++p) {
    histogramKernel<<<blocks, kThreads, 0, stream>>>(src, st, kDigits[p]);
    cuda::checkLaunch("histogramKernel");
    pickKernel<<<1, 1024, 0, stream>>>(st, kDigits[p], p == 2);
    cuda::checkLaunch("pickKernel");
  }
  compact(sc, src, bound, out, static_cast<uint32_t>(k), stream);
}

// The k largest keys of x[0..n) (ties to the lowest index), ascending, to out: the exact route.
void selectDirect(Scratch& sc, const float* x, size_t n, size_t k, uint32_t* out,
                  cudaStream_t stream) {
  SelectState* st = stateOf(sc);
  if (n <= k) {  // every key: above 0, and every tie at 0
    selectInitKernel<<<1, kThreads, 0, stream>>>(st, 0, 0, UINT32_MAX);
    cuda::checkLaunch("selectInitKernel");
    compact(sc, direct(x, n), n, out, static_cast<uint32_t>(k), stream);
    return;
  }
  selectInitKernel<<<1, kThreads, 0, stream>>>(st, static_cast<uint32_t>(k), 0, 0);
  cuda::checkLaunch("selectInitKernel");
  selectInto(sc, direct(x, n), n, k, out, stream);
}

// cpuSelectAtLeast into sc.cand: the count, or kNone past cap; *sorted is where the ascending
// indices are (sc.cand or sc.candAlt). Synchronizes.
size_t atLeast(Scratch& sc, const float* x, size_t n, uint32_t minKey, size_t cap,
               uint32_t** sorted, cudaStream_t stream) {
  cap = std::min(cap, n);  // no more can match: the scratch needs no more
  *sorted = u32(sc.cand, cap, stream);
  if (minKey == 0) minKey = 1;
  if (minKey > 0x7fffffffu || n == 0) return 0;
  uint32_t* alt = u32(sc.candAlt, cap, stream);
  SelectState* st = stateOf(sc);
  cuda::check(cudaMemsetAsync(&st->counter, 0, sizeof st->counter, stream), "cudaMemsetAsync");
  const uint32_t head = std::min<uint32_t>(
      static_cast<uint32_t>(n), ((16 - reinterpret_cast<uintptr_t>(x) % 16) % 16) / sizeof(float));
  const size_t nv = (n - head) / 4;
  const unsigned blocks = gridFor(nv, kThreads * kUnroll, size_t(sc.sms) * 8);
  atLeastKernel<<<blocks, kThreads, 0, stream>>>(x, static_cast<uint32_t>(n), head, minKey, *sorted,
                                                 static_cast<uint32_t>(cap), &st->counter);
  cuda::checkLaunch("atLeastKernel");
  Slots* slots = slotsOf(sc);
  cuda::check(cudaMemcpyAsync(&slots->count, &st->counter, sizeof(uint32_t), cudaMemcpyDeviceToHost,
                              stream),
              "cudaMemcpyAsync");
  syncStream(stream, "select pass");
  const size_t kept = slots->count;
  if (kept > cap) return kNone;
  if (kept > 1) {
    cub::DoubleBuffer<uint32_t> keys(*sorted, alt);
    size_t bytes = 0;
    const int bits = indexBits(n);
    cuda::check(cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys, kept, 0, bits, stream),
                "cub::DeviceRadixSort::SortKeys (size)");
    sc.temp.reserve(bytes, stream);
    cuda::check(cub::DeviceRadixSort::SortKeys(sc.temp.data(), bytes, keys, kept, 0, bits, stream),
                "cub::DeviceRadixSort::SortKeys");
    *sorted = keys.Current();
  }
  return kept;
}

// ---- sparse feedback -------------------------------------------------------------------------

// First position p in idx[lo, hi) with idx[p] >= v.
__device__ size_t lowerBound(const uint32_t* idx, size_t lo, size_t hi, size_t v) {
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (idx[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// Sparse feedback over tiles of kTile values: the tile's indices (a contiguous run of idx, found
// by binary search) go to a shared bitmap, then residual[i] += x[i] off the bitmap. Per-block
// sums of x^2 and x[idx]^2 in double (a fixed tree), reduced by feedbackSumKernel.
// One chunk of sparse feedback: its arguments, its blocks (gridFor(n, kTile, kSumBlocks): a
// batch's wider grid leaves a chunk's sums as its own launch makes them) and where their partial
// sums go (null: none).
struct FeedbackArgs {
  const float* x;
  size_t n;
  const uint32_t* idx;
  size_t k;
  float* residual;
  double2* partial;
  unsigned blocks;
};

__global__ void __launch_bounds__(kThreads) feedbackKernel(JobTable<FeedbackArgs> table) {
  const FeedbackArgs& a = table.job[blockIdx.y];
  if (blockIdx.x >= a.blocks) return;  // the whole block: no barrier is left waiting
  const float* x = a.x;
  const size_t n = a.n, k = a.k;
  const uint32_t* idx = a.idx;
  float* residual = a.residual;
  double2* partial = a.partial;
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ uint32_t sent[kTile / 32];
  __shared__ size_t run[2];
  double in = 0, out = 0;
  const size_t tiles = (n + kTile - 1) / kTile;
  for (size_t t = blockIdx.x; t < tiles; t += a.blocks) {
    const size_t lo = t * kTile, hi = min(n, lo + kTile);
    for (uint32_t w = threadIdx.x; w < kTile / 32; w += kThreads) sent[w] = 0;
    if (threadIdx.x < 2) run[threadIdx.x] = lowerBound(idx, 0, k, threadIdx.x ? hi : lo);
    __syncthreads();
    for (size_t j = run[0] + threadIdx.x; j < run[1]; j += kThreads) {
      const uint32_t i = idx[j] - static_cast<uint32_t>(lo);
      const float v = x[idx[j]];
      if (v != 0.0f) atomicOr(&sent[i >> 5], 1u << (i & 31));  // a zero entry sends nothing
      out += double(v) * v;
    }
    __syncthreads();
    for (size_t i = lo + threadIdx.x; i < hi; i += kThreads) {
      const float v = x[i];
      in += double(v) * v;
      const uint32_t b = static_cast<uint32_t>(i - lo);
      if (residual && !(sent[b >> 5] >> (b & 31) & 1)) residual[i] += v;
    }
    __syncthreads();  // sent and run are reset for the next tile
  }
  if (!partial) return;
  in = Reduce(temp).Sum(in);
  __syncthreads();
  out = Reduce(temp).Sum(out);
  if (threadIdx.x == 0) partial[blockIdx.x] = make_double2(in, out);
}

__global__ void __launch_bounds__(kThreads)
    feedbackSumKernel(const double2* partial, unsigned blocks, Slots* slots) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  double in = 0, out = 0;
  for (unsigned b = threadIdx.x; b < blocks; b += kThreads) {
    in += partial[b].x;
    out += partial[b].y;
  }
  in = Reduce(temp).Sum(in);
  __syncthreads();
  out = Reduce(temp).Sum(out);
  if (threadIdx.x == 0) {
    slots->sums[0] = in;
    slots->sums[1] = out;
  }
}

// feedbackSumKernel's additions for each chunk of a batch in turn.
__global__ void __launch_bounds__(kThreads)
    feedbackSumsKernel(JobTable<FeedbackArgs> t, unsigned count, double* add) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  for (unsigned j = 0; j < count; ++j) {
    const FeedbackArgs& a = t.job[j];
    double in = 0, out = 0;
    for (unsigned b = threadIdx.x; b < a.blocks; b += kThreads) {
      in += a.partial[b].x;
      out += a.partial[b].y;
    }
    in = Reduce(temp).Sum(in);
    __syncthreads();
    out = Reduce(temp).Sum(out);
    __syncthreads();
    if (threadIdx.x == 0) {
      add[0] += in;
      add[1] += out;
    }
  }
}

void launchFeedback(const std::vector<FeedbackArgs>& jobs, double* add, GpuStream stream) {
  launchJobs(
      jobs, [](const FeedbackArgs& a) { return a.blocks; },
      [&](dim3 grid, const JobTable<FeedbackArgs>& t) {
        feedbackKernel<<<grid, kThreads, 0, stream>>>(t);
        cuda::checkLaunch("feedbackKernel");
        if (!add) return;
        feedbackSumsKernel<<<1, kThreads, 0, stream>>>(t, grid.y, add);
        cuda::checkLaunch("feedbackSumKernel");
      });
}

}  // namespace

size_t gpuSelectTopk(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx,
                     GpuStream stream, SparseScratch* given) {
  k = std::min(k, n);
  if (k == 0) return 0;
  if (n <= kOneBlockSelectMax) {
    const SelectJob job{x, n, k, idx};
    gpuSelectTopkBatch(&job, 1, stream);
    return k;
  }
  Scratch& sc = scratch(stream, given);
  if (!sampled || k == n) {
    selectDirect(sc, x, n, k, idx, stream);
    return k;
  }

  // The sample and its key t1 at rank r1, as the CPU takes them.
  const size_t s = topkSampleSize(n), step = n / s;
  const size_t r1 = topkFirstRank(n, k, s);
  uint32_t* sample = u32(sc.sample, s, stream);
  sampleKernel<<<gridFor(s, kThreads, SIZE_MAX), kThreads, 0, stream>>>(x, s, step, sample);
  cuda::checkLaunch("sampleKernel");
  cub::DoubleBuffer<uint32_t> keys(sample, u32(sc.sampleAlt, s, stream));
  size_t bytes = 0;
  cuda::check(cub::DeviceRadixSort::SortKeysDescending(nullptr, bytes, keys, s, 0, 31, stream),
              "cub::DeviceRadixSort::SortKeysDescending (size)");
  sc.temp.reserve(bytes, stream);
  cuda::check(
      cub::DeviceRadixSort::SortKeysDescending(sc.temp.data(), bytes, keys, s, 0, 31, stream),
      "cub::DeviceRadixSort::SortKeysDescending");
  SelectState* st = stateOf(sc);
  selectInitKernel<<<1, kThreads, 0, stream>>>(st, 0, 0, 0, keys.Current() + (r1 - 1));
  cuda::checkLaunch("selectInitKernel");

  // The pass: the keys >= t1, ascending, into the candidates (at most cap); then the device
  // chooses where the selection runs, and it runs there.
  const size_t cap = topkPassCap(n, k, r1, s);
  uint32_t* cand = u32(sc.cand, cap, stream);
  compact(sc, direct(x, n), n, cand, static_cast<uint32_t>(cap), stream,
          Steer{true, static_cast<uint32_t>(n), static_cast<uint32_t>(k),
                static_cast<uint32_t>(cap), 0, nullptr});
  selectInto(sc, steered(x, cand), n, k, idx, stream);
  return k;
}

size_t gpuSelectAtLeast(const float* x, size_t n, uint32_t minKey, uint32_t* idx, size_t cap,
                        GpuStream stream, SparseScratch* given) {
  Scratch& sc = scratch(stream, given);
  uint32_t* sorted = nullptr;
  const size_t kept = atLeast(sc, x, n, minKey, cap, &sorted, stream);
  if (kept == kNone || kept == 0) return kept;
  cuda::check(cudaMemcpyAsync(idx, sorted, kept * sizeof(uint32_t), cudaMemcpyDefault, stream),
              "cudaMemcpyAsync");
  syncStream(stream, "select copy");
  return kept;
}

void gpuSelectTopkBatch(const SelectJob* jobs, size_t count, GpuStream stream) {
  std::vector<SelectJob> live;
  for (size_t j = 0; j < count; ++j) {
    SQZ_ENFORCE(jobs[j].n <= kOneBlockSelectMax && jobs[j].k <= jobs[j].n,
                "a batched top-k selection of ", jobs[j].k, " of ", jobs[j].n, " values");
    if (jobs[j].n > 0 && jobs[j].k > 0) live.push_back(jobs[j]);
  }
  launchJobs(
      live, [](const SelectJob&) { return 1u; },
      [&](dim3 grid, const JobTable<SelectJob>& t) {
        selectBlockKernel<<<grid, kBlockSelectThreads, 0, stream>>>(t);
        cuda::checkLaunch("selectBlockKernel");
      });
}

void gpuSparseFeedbackBatch(const SparseFeedbackJob* jobs, size_t count, double* deviceSums,
                            GpuStream stream, SparseScratch* given) {
  std::vector<FeedbackArgs> args;
  size_t allBlocks = 0;
  for (size_t j = 0; j < count; ++j) {
    const SparseFeedbackJob& f = jobs[j];
    if (f.n == 0 || (!f.residual && !deviceSums)) continue;
    const unsigned blocks = gridFor(f.n, kTile, kSumBlocks);
    args.push_back({f.x, f.n, f.idx, f.k, f.residual, nullptr, blocks});
    allBlocks += blocks;
  }
  if (args.empty()) return;
  if (deviceSums) {  // each chunk's partials after the previous one's
    Scratch& sc = scratch(stream, given);
    sc.sums.reserve(allBlocks * sizeof(double2), stream);
    auto* partial = static_cast<double2*>(sc.sums.data());
    for (FeedbackArgs& a : args) {
      a.partial = partial;
      partial += a.blocks;
    }
  }
  launchFeedback(args, deviceSums, stream);
}

void gpuSparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* residual,
                       double* inputSq, double* sentSq, double* deviceSums, GpuStream stream,
                       SparseScratch* given) {
  const bool sums = inputSq || sentSq || deviceSums;
  if (n == 0 || (!residual && !sums)) return;
  const unsigned blocks = gridFor(n, kTile, kSumBlocks);
  if (!sums || deviceSums) {  // no scratch held past the call, which a later call could reuse
    const SparseFeedbackJob job{x, n, idx, k, residual};
    gpuSparseFeedbackBatch(&job, 1, deviceSums, stream, given);
    return;
  }
  Scratch& sc = scratch(stream, given);
  sc.sums.reserve(blocks * sizeof(double2), stream);
  auto* partial = static_cast<double2*>(sc.sums.data());
  launchFeedback({{x, n, idx, k, residual, partial, blocks}}, nullptr, stream);
  Slots* slots = slotsOf(sc);
  feedbackSumKernel<<<1, kThreads, 0, stream>>>(partial, blocks, slots);
  cuda::checkLaunch("feedbackSumKernel");
  syncStream(stream, "sparse feedback");
  if (inputSq) *inputSq += slots->sums[0];
  if (sentSq) *sentSq += slots->sums[1];
}


}  // namespace squeeze::device
