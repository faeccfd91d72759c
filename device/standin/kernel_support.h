// The stand-in's kernels' shared parts (the cuda-standin build; device/standin/standin.h): how
// a gpu* entry point enqueues its cpu* twin on a stream (with the pointer checks a GPU launch
// makes), and the per-thread scratch each device/cuda/*.cu original allocates, made at the same
// points and in the same way (cudaMalloc / cudaHostAlloc, which wait for the whole device, where
// it is made once; cudaMallocAsync on the stream where it grows), so the device path's waits,
// and its hangs, happen here as they do on a GPU. The entry points are in kernels.cc (cast,
// reduce, quantize, gpuPrepareThread), sparse_kernels.cc, linalg_kernels.cc,
// handle_kernels.cc and batch_kernels.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/strings.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/linalg.h"
#include "device/sparse.h"

namespace squeeze::device {

// sparse.cu's scratch (device/sparse.h) as the stand-in's kernels use it: the selection state
// (device) and the pinned slots the host reads counts and sums from; cand and candAlt are the
// passes' index buffers, sums the feedback's partials.
struct SparseScratch {
  static constexpr size_t kStateBytes = 8 * sizeof(uint32_t) + 2048 * sizeof(uint32_t);
  struct Slots {
    uint32_t count;
    double sums[2];
  };
  SparseScratch() : state(kStateBytes), slots(sizeof(Slots)) {}
  Slots* slotsData() const { return static_cast<Slots*>(slots.data()); }
  cuda::DeviceBuffer state, cand, candAlt, sums;
  cuda::PinnedBuffer slots;
};

// linalg.cu's scratch (device/linalg.h): cuBLAS's workspace, one per stream the thread has
// multiplied on (a context's: one for every stream), allocated on that stream when first
// needed (cuBLAS's own default size for the device; the stand-in has no cuBLAS, the workspace is
// kept so the allocation happens where the real one's does); the handle's own device memory
// (cublasCreate allocates: made with cudaMalloc, as it waits for the device); gpuSquaredNorm's
// partial sums (device) and its result (pinned); gpuClipScale's scale (device).
struct LinalgScratch {
  static constexpr size_t kSumBlocks = 1024;
  LinalgScratch();
  size_t workspaceBytes = 0;
  bool oneWorkspace = true;
  std::vector<std::pair<GpuStream, cuda::DeviceBuffer>> workspaces;
  cuda::DeviceBuffer handle, partial, scale;
  cuda::PinnedBuffer result;
};

}  // namespace squeeze::device

namespace squeeze::device::standin_kernels {

// ---- launching -------------------------------------------------------------------------------

// A pointer a kernel dereferences, and how many elements (or bytes) of it: checked only when
// both are non-zero, since a kernel given nothing to do reads nothing.
struct Arg {
  template <class T>
  Arg(const char* name, T* ptr, size_t count)
      : name(name), ptr(ptr), count(count), writes(!std::is_const_v<T>) {}
  const char* name;
  const void* ptr;
  size_t count;
  bool writes;
};

// Enqueues `body` as kernel `kernel` on `stream`. An argument a GPU could not reach is found
// here, at launch, as the real launch would be, but reported where a GPU reports it: the body
// becomes one that throws, so the stream fails (sticky) when it gets there.
void enqueue(GpuStream stream, const char* kernel, const std::vector<Arg>& args,
             std::function<void()> body);

// The rest of a .cu entry point's launches, where the twin does the work in one: enqueued to
// do nothing, so the stand-in's counts are the GPU's (a CUB algorithm counts as one launch).
void launchRest(GpuStream stream, const std::vector<const char*>& kernels);

// The deferred-sums form of quantize.cu's, sparse.cu's and handle_kernels.cu's norms: enqueues
// sum(&in, &sent) (each from 0) as `kernel`, then adds in and sent to deviceSums[0..1] on the
// stream; nothing waits.
void enqueueAddingSums(GpuStream stream, const char* kernel, std::vector<Arg> args,
                       double* deviceSums, std::function<void(double*, double*)> sum);

// Copies a result the body left in device memory back to the host, on the stream.
void copyBack(void* host, const void* device, size_t bytes, GpuStream stream);

// sparse.cu's scatterKernel skips an index at or past n (its list may be checked only after the
// stream ran): the CPU twin where every index is in range, else the kernel's loop.
bool indicesBelow(const uint32_t* idx, size_t k, size_t n);

// ---- scratch: each struct is its device/cuda/*.cu original's, made on first use (or by
// gpuPrepareThread) with the same cudaMalloc / cudaHostAlloc, and grown stream-ordered ----------

template <class T>
T& scratchOf() {
  return perThreadDevice<T>([](int dev) { return std::make_unique<T>(dev); });
}

// handle_kernels.cu: gpuFirstBadIndex's flag, gpuFeedbackPass's partials (device memory, grown
// on demand) and the pageable host memory its norms are copied into.
struct HandleScratch {
  explicit HandleScratch(int) {}
  cuda::DeviceBuffer flag, partials;
  double hostNorms[2] = {};
};

// quantize.cu: the norms of an encode with feedback, on the device and pinned for the host.
struct QuantizeNorms {
  explicit QuantizeNorms(int) : device(2 * sizeof(double)), host(2 * sizeof(double)) {}
  cuda::DeviceBuffer device;
  cuda::PinnedBuffer host;
};

// linalg.cu's SGEMM launch: its dimensions must fit cuBLAS's ints, then the workspace of
// `given` (a context's: one) or of the calling thread for the stream.
void blasGemm(GpuStream stream, std::initializer_list<std::pair<size_t, const char*>> dims,
              LinalgScratch* given);

// `given` (a context's, device/linalg.h), or the calling thread's, made at first use: linalg.cu's.
LinalgScratch& linalgScratch(LinalgScratch* given);

// `given` (a context's, device/sparse.h), or the calling thread's scratch for `stream`, made at
// first use: sparse.cu's.
SparseScratch& sparseScratch(GpuStream stream, SparseScratch* given);

inline uint32_t* u32(cuda::DeviceBuffer& b, size_t count, GpuStream stream) {
  b.reserve(std::max<size_t>(count, 1) * sizeof(uint32_t), stream);
  return static_cast<uint32_t*>(b.data());
}

}  // namespace squeeze::device::standin_kernels
