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

// The stream all-reduce's reduction: thread 0 of each block compares the ranks' call words (a
// few reads of pinned host memory) and the block reads nothing unless they agree; block 0 says
// why not. Each element's inputs are folded in rank order and stored once.
template <class Elem, class Op>
__global__ void reduceRanksKernel(typename Elem::Storage* out, RankInputs r, size_t n,
                                  int divisor, Split split) {
  using T = typename Elem::Storage;
  constexpr int kCount = Pack<T>::kCount;
  __shared__ uint32_t stop;
  if (threadIdx.x == 0) {
    uint32_t q = r.error[0] != 0 ? kReleased : disagreeingRank(r);
    if (q != 0 && q != kReleased && blockIdx.x == 0) {
      for (int w = 0; w < kCallWords; ++w) {
        r.error[1 + w] = r.call[q - 1][w];
        r.error[1 + kCallWords + w] = r.expect[w];
      }
      __threadfence_system();
      r.error[0] = q;
    }
    stop = q;
  }
  __syncthreads();
  if (stop != 0) return;
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
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

void gpuReduceRanks(DataType dtype, RedOp op, void* out, const RankInputs& r, size_t n,
                    int divisor, GpuStream stream) {
  SQZ_ENFORCE(r.nranks >= 1 && r.nranks <= kMaxReduceRanks, "reduceRanks over ", r.nranks,
              " ranks");
  const bool known = visitElement(dtype, [&](auto elem) {
    using Elem = decltype(elem);
    using T = typename Elem::Storage;
    // Vectors only where every input and the output reach a 16-byte boundary together.
    Split split = splitFor(n, sizeof(T), {out, r.in[0]});
    for (int q = 1; q < r.nranks; ++q)
      if (splitFor(n, sizeof(T), {out, r.in[q]}).head != split.head) split = {n, 0};
    return visitOp(op, [&](auto o) {
      // Launched even for n == 0: the call words are checked every round.
      reduceRanksKernel<Elem, decltype(o)><<<gridFor(workOf(split, n)), kThreads, 0, stream>>>(
          static_cast<T*>(out), r, n, divisor, split);
      return true;
    });
  });
  SQZ_ENFORCE(known, "no reduction for dtype ", int(dtype), " op ", int(op));
  cuda::checkLaunch("reduceRanksKernel");
}

}  // namespace squeeze::device
