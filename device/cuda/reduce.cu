// CUDA kernels behind device/reduce.h: gpuReduce and gpuDivide, one kernel instantiation per
// (element type, op) whose per-element body is device/elementwise.h's reduceElement /
// divideElement, the functions the CPU loops call, so both backends give the same bits.
//
// The kernels are grid-stride loops over 16-byte vectors: from the first index where every
// pointer is 16-byte aligned (all must be misaligned alike) to the last whole vector, with the
// few elements before and after done one by one. Pointers that cannot all be aligned at the same
// index go element by element. The grid is capped: a memory-bound loop needs only enough
// threads to keep the memory system busy.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "base/error.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/elementwise.h"
#include "device/reduce.h"

namespace squeeze::device {
namespace {


// 16 bytes of T, as one load or store.
template <class T>
struct Pack {
  static constexpr int kCount = 16 / sizeof(T);
  T e[kCount];
};

template <class T>
__device__ __forceinline__ Pack<T> loadPack(const T* p, size_t v) {
  return __builtin_bit_cast(Pack<T>, reinterpret_cast<const uint4*>(p)[v]);
}
template <class T>
__device__ __forceinline__ void storePack(T* p, size_t v, const Pack<T>& x) {
  reinterpret_cast<uint4*>(p)[v] = __builtin_bit_cast(uint4, x);
}

// Elements [0, head) and [head + vecs * kCount, n) one by one, the vectors between them whole.
struct Split {
  size_t head = 0;
  size_t vecs = 0;
};

// The split for pointers to elements of `size` bytes: vectors start where the first pointer
// reaches a 16-byte boundary, if every other pointer reaches one at the same element.
Split splitFor(size_t n, size_t size, std::initializer_list<const void*> ptrs) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(*ptrs.begin()) % 16;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != mis) return {n, 0};
  if (mis % size != 0) return {n, 0};
  const size_t head = std::min(n, (16 - mis) % 16 / size);
  return {head, (n - head) / (16 / size)};
}

template <class Elem, class Op>
__global__ void reduceKernel(typename Elem::Storage* out, const typename Elem::Storage* a,
                             const typename Elem::Storage* b, size_t n, Split split) {
  using T = typename Elem::Storage;
  constexpr int kCount = Pack<T>::kCount;
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  // Vectors start at element `head`: shift the base pointers so vector v is 16-byte aligned.
  T* vo = out + split.head;
  const T* va = a + split.head;
  const T* vb = b + split.head;
  for (size_t v = first; v < split.vecs; v += stride) {
    const Pack<T> x = loadPack(va, v), y = loadPack(vb, v);
    Pack<T> r;
#pragma unroll
    for (int k = 0; k < kCount; ++k) r.e[k] = reduceElement<Elem, Op>(x.e[k], y.e[k]);
    storePack(vo, v, r);
  }
  for (size_t i = first; i < split.head; i += stride) out[i] = reduceElement<Elem, Op>(a[i], b[i]);
  for (size_t i = split.head + split.vecs * kCount + first; i < n; i += stride)
    out[i] = reduceElement<Elem, Op>(a[i], b[i]);
}

template <class Elem>
__global__ void divideKernel(typename Elem::Storage* buf, size_t n, int divisor, Split split) {
  using T = typename Elem::Storage;
  constexpr int kCount = Pack<T>::kCount;
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  T* vbuf = buf + split.head;
  for (size_t v = first; v < split.vecs; v += stride) {
    Pack<T> x = loadPack(vbuf, v);
#pragma unroll
    for (int k = 0; k < kCount; ++k) x.e[k] = divideElement<Elem>(x.e[k], divisor);
    storePack(vbuf, v, x);
  }
  for (size_t i = first; i < split.head; i += stride) buf[i] = divideElement<Elem>(buf[i], divisor);
  for (size_t i = split.head + split.vecs * kCount + first; i < n; i += stride)
    buf[i] = divideElement<Elem>(buf[i], divisor);
}

// The stream collectives' check: one warp, a word a lane (kMaxReduceRanks x kCallWords = 32),
// then lane 0 writes what differed and the verdict.
// Run by a whole warp; returns the verdict in lane 0 (the other lanes' result is undefined).
__device__ uint32_t checkCalls(const CallCheck& c, uint32_t* verdict, int lane) {
  const int q = lane / kCallWords, w = lane % kCallWords;
  const uint32_t before = c.error[0];
  const bool differs = before == 0 && q < c.nranks && c.call[q][w] != c.expect[w];
  const unsigned mask = __ballot_sync(0xffffffffu, differs);
  if (lane != 0) return 0;
  uint32_t result = before;
  if (mask != 0) {
    const uint32_t rank = static_cast<uint32_t>(__ffs(mask) - 1) / kCallWords;
    for (int k = 0; k < kCallWords; ++k) {
      c.error[1 + k] = c.call[rank][k];
      c.error[1 + kCallWords + k] = c.expect[k];
    }
    __threadfence_system();
    c.error[0] = rank + 1;
    result = rank + 1;
  }
  *verdict = result;
  return result;
}
static_assert(kMaxReduceRanks * kCallWords <= 32, "one warp checks every word");

__global__ void checkCallsKernel(CallCheck c, uint32_t* verdict) {
  checkCalls(c, verdict, threadIdx.x);
}

// A round's words to its peers, by a whole warp, after what this stream wrote before, the
// signals last.
__device__ void storeWords(const PublishWords& p, int lane) {
  const int first = p.count - p.signals;
  __threadfence_system();
  if (lane < first) p.word[lane][0] = p.value[lane];
  __threadfence_system();
  __syncwarp();
  if (lane >= first && lane < p.count) p.word[lane][0] = p.value[lane];
}
static_assert(kMaxPublishWords <= 32, "one warp stores every word");

// Unless the round's verdict says the stream must publish nothing.
__global__ void publishWordsKernel(PublishWords p) {
  if (*p.verdict != 0) return;
  storeWords(p, threadIdx.x);
}

// The stream collectives' reduction (and, with one input, their copy): each element's inputs
// folded in rank order and stored once, by threads first, first + stride, ... (every thread of
// the grid, or of one block).
template <class Elem, class Op>
__device__ void foldRanks(typename Elem::Storage* out, const RankInputs& r, size_t n,
                          int divisor, const Split& split, size_t first, size_t stride) {
  using T = typename Elem::Storage;
  constexpr int kCount = Pack<T>::kCount;
  auto fold = [&](auto load) {
    auto acc = load(0);
    for (int q = 1; q < r.nranks; ++q) {
      const auto x = load(q);
#pragma unroll
      for (int k = 0; k < int(sizeof(acc.e) / sizeof(T)); ++k)
        acc.e[k] = reduceElement<Elem, Op>(acc.e[k], x.e[k]);
    }
    if (divisor > 1)
#pragma unroll
      for (int k = 0; k < int(sizeof(acc.e) / sizeof(T)); ++k)
        acc.e[k] = divideElement<Elem>(acc.e[k], divisor);
    return acc;
  };
  T* vo = out + split.head;
  for (size_t v = first; v < split.vecs; v += stride)
    storePack(vo, v, fold([&](int q) {
                return loadPack(static_cast<const T*>(r.in[q]) + split.head, v);
              }));
  struct One {
    T e[1];
  };
  auto scalar = [&](size_t i) {
    out[i] = fold([&](int q) { return One{{static_cast<const T*>(r.in[q])[i]}}; }).e[0];
  };
  for (size_t i = first; i < split.head; i += stride) scalar(i);
  for (size_t i = split.head + split.vecs * kCount + first; i < n; i += stride) scalar(i);
}

// Unless the round's check found something.
template <class Elem, class Op>
__global__ void reduceRanksKernel(typename Elem::Storage* out, RankInputs r, size_t n,
                                  int divisor, Split split) {
  if (*r.verdict != 0) return;
  foldRanks<Elem, Op>(out, r, n, divisor, split, blockIdx.x * size_t(blockDim.x) + threadIdx.x,
                      size_t(gridDim.x) * blockDim.x);
}

// A small round's kernels: one block each (kRoundThreads, so a copy or input of
// kSmallRoundBytes takes four strides of 16-byte vectors). The bound keeps the fold of eight
// inputs within the registers a block of that size may have, or the launch would be refused.
constexpr int kRoundThreads = 512;
struct RoundSplits {
  Split of[kMaxRoundCopies];
};

__global__ void __launch_bounds__(kRoundThreads)
    gatedCopyPublishKernel(const volatile uint32_t* error, uint32_t* verdict, RoundCopies copies,
                           RoundSplits splits, PublishWords p) {
  __shared__ uint32_t gate;
  if (threadIdx.x == 0) {
    gate = *error;
    *verdict = gate;
  }
  __syncthreads();
  if (gate != 0) return;
  for (int c = 0; c < copies.count; ++c) {
    RankInputs in{};
    in.in[0] = copies.src[c];
    in.nranks = 1;
    foldRanks<PlainElem<uint8_t>, OpSum>(static_cast<uint8_t*>(copies.dst[c]), in,
                                         copies.bytes[c], 1, splits.of[c], threadIdx.x,
                                         blockDim.x);
  }
  __threadfence_system();  // each thread's copies, before warp 0 publishes
  __syncthreads();
  if (threadIdx.x < 32 && p.count > 0) storeWords(p, threadIdx.x);
}

template <class Elem, class Op>
__global__ void __launch_bounds__(kRoundThreads)
    checkReduceRanksKernel(CallCheck c, uint32_t* verdict, typename Elem::Storage* out,
                           RankInputs r, size_t n, int divisor, Split split) {
  __shared__ uint32_t result;
  if (threadIdx.x < 32) {
    const uint32_t v = checkCalls(c, verdict, threadIdx.x);
    if (threadIdx.x == 0) result = v;
  }
  __syncthreads();
  if (result != 0) return;
  foldRanks<Elem, Op>(out, r, n, divisor, split, threadIdx.x, blockDim.x);
}

// A fold's split: vectors only where every input and the output reach a 16-byte boundary
// together.
Split ranksSplit(size_t n, size_t size, const void* out, const RankInputs& r) {
  Split split = splitFor(n, size, {out, r.in[0]});
  for (int q = 1; q < r.nranks; ++q)
    if (splitFor(n, size, {out, r.in[q]}).head != split.head) split = {n, 0};
  return split;
}

// Threads for a split: one per vector, or one per element when there are no vectors.
size_t workOf(const Split& s, size_t n) { return s.vecs ? s.vecs : n; }

}  // namespace

void gpuReduce(DataType dtype, RedOp op, void* out, const void* a, const void* b, size_t n,
               GpuStream stream) {
  if (n == 0) return;
  const bool known = visitElement(dtype, [&](auto elem) {
    using Elem = decltype(elem);
    using T = typename Elem::Storage;
    const Split split = splitFor(n, sizeof(T), {out, a, b});
    return visitOp(op, [&](auto o) {
      reduceKernel<Elem, decltype(o)><<<gridFor(workOf(split, n)), kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n, split);
      return true;
    });
  });
  SQZ_ENFORCE(known, "no reduction for dtype ", int(dtype), " op ", int(op));
  cuda::checkLaunch("reduceKernel");
}

void gpuDivide(void* buf, size_t n, DataType dtype, int divisor, GpuStream stream) {
  if (n == 0) return;
  const bool known = visitElement(dtype, [&](auto elem) {
    using Elem = decltype(elem);
    using T = typename Elem::Storage;
    const Split split = splitFor(n, sizeof(T), {buf});
    divideKernel<Elem><<<gridFor(workOf(split, n)), kThreads, 0, stream>>>(static_cast<T*>(buf), n,
                                                                           divisor, split);
    return true;
  });
  SQZ_ENFORCE(known, "no division for dtype ", int(dtype));
  cuda::checkLaunch("divideKernel");
}

void gpuCheckCalls(const CallCheck& c, uint32_t* verdict, GpuStream stream) {
  SQZ_ENFORCE(c.nranks >= 0 && c.nranks <= kMaxReduceRanks, "checkCalls over ", c.nranks,
              " ranks");
  checkCallsKernel<<<1, 32, 0, stream>>>(c, verdict);
  cuda::checkLaunch("checkCallsKernel");
}

void gpuPublishWords(const PublishWords& p, GpuStream stream) {
  SQZ_ENFORCE(p.count >= 1 && p.count <= kMaxPublishWords && p.signals >= 0 &&
                  p.signals <= p.count,
              "publishing ", p.count, " words");
  publishWordsKernel<<<1, 32, 0, stream>>>(p);
  cuda::checkLaunch("publishWordsKernel");
}

void gpuReduceRanks(DataType dtype, RedOp op, void* out, const RankInputs& r, size_t n,
                    int divisor, GpuStream stream) {
  SQZ_ENFORCE(r.nranks >= 1 && r.nranks <= kMaxReduceRanks, "reduceRanks over ", r.nranks,
              " ranks");
  if (n == 0) return;
  const bool known = visitElement(dtype, [&](auto elem) {
    using Elem = decltype(elem);
    using T = typename Elem::Storage;
    const Split split = ranksSplit(n, sizeof(T), out, r);
    return visitOp(op, [&](auto o) {
      reduceRanksKernel<Elem, decltype(o)><<<gridFor(workOf(split, n)), kThreads, 0, stream>>>(
          static_cast<T*>(out), r, n, divisor, split);
      return true;
    });
  });
  SQZ_ENFORCE(known, "no reduction for dtype ", int(dtype), " op ", int(op));
  cuda::checkLaunch("reduceRanksKernel");
}

void gpuGatedCopyPublish(const volatile uint32_t* error, uint32_t* verdict,
                         const RoundCopies& copies, const PublishWords& p, GpuStream stream) {
  checkSmallRound(copies, p, verdict);
  RoundSplits splits{};
  for (int c = 0; c < copies.count; ++c)
    splits.of[c] = splitFor(copies.bytes[c], 1, {copies.dst[c], copies.src[c]});
  gatedCopyPublishKernel<<<1, kRoundThreads, 0, stream>>>(error, verdict, copies, splits, p);
  cuda::checkLaunch("gatedCopyPublishKernel");
}

void gpuCheckReduceRanks(const CallCheck& c, uint32_t* verdict, DataType dtype, RedOp op,
                         void* out, const RankInputs& r, size_t n, int divisor,
                         GpuStream stream) {
  checkRanksFold(c, r, verdict);
  const bool known = visitElement(dtype, [&](auto elem) {
    using Elem = decltype(elem);
    using T = typename Elem::Storage;
    return visitOp(op, [&](auto o) {
      checkReduceRanksKernel<Elem, decltype(o)><<<1, kRoundThreads, 0, stream>>>(
          c, verdict, static_cast<T*>(out), r, n, divisor, ranksSplit(n, sizeof(T), out, r));
      return true;
    });
  });
  SQZ_ENFORCE(known, "no reduction for dtype ", int(dtype), " op ", int(op));
  cuda::checkLaunch("checkReduceRanksKernel");
}

}  // namespace squeeze::device
