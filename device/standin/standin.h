// The CUDA stand-in: an emulated GPU for machines without one (the `cuda-standin` build).
//
// libsqz-cuda-standin.so exports the CUDA runtime functions Squeeze calls (cudaMalloc,
// cudaMemcpyAsync, cudaStreamCreateWithFlags, cudaEventRecord, cudaLaunchHostFunc, ...) with the
// toolkit header's signatures, plus the driver entry points Squeeze looks up through
// cudaGetDriverEntryPointByVersion (cuStreamWaitValue32, cuMemGetAddressRange), over:
//   - device memory that is host memory the stand-in tracks (a memfd mapping per allocation, so
//     CUDA IPC handles open in another process); pointer attributes say "device";
//   - a worker thread per stream that runs its work in order; events; host functions on one
//     callback thread per device; stream waits on a 32-bit word;
//   - CUDA's documented implicit synchronization: cudaMalloc, cudaFree, cudaHostAlloc,
//     cudaFreeHost, cudaHostRegister, synchronous cudaMemcpy/cudaMemset and
//     cudaDeviceSynchronize wait for all earlier work on the device (the stream-ordered
//     cudaMallocAsync/cudaFreeAsync do not); work on a blocking stream waits for the legacy
//     default stream and the other way round;
//   - CUDA's lazy loading (the default since 12.2): a kernel's first launch on a device loads
//     it, which may synchronize the whole device, so the stand-in's first launch of each kernel
//     name waits for all earlier work, as cudaFree does, unless loadKernels() ran for the device
//     (the library's gpuPrepareThread, as kernel_modules.cc does on a GPU) or
//     CUDA_MODULE_LOADING=EAGER.
// Kernels are the gpu* entry points of device/ (device/standin/kernels.cc), which run their
// cpu* twins on the stream through launch() below.
//
// A host thread blocked in an implicit synchronization behind a stream that is itself held (by
// cuStreamWaitValue32 or a host function) is the deadlock NCCL's rule forbids: the stand-in
// says so on stderr at once, and when it is still blocked after SQZ_STANDIN_HANG_MS (default
// 20000) it prints what every stream of the device is doing and aborts the process, so a hang
// is a failure with a reason, not a silent timeout.
//
// Environment: SQZ_STANDIN_DEVICES (emulated GPUs, default 1), SQZ_STANDIN_HANG_MS.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

namespace squeeze::standin {

// What the emulated device was asked to do.
struct Counters {
  uint64_t launches = 0;       // kernels: launch() calls
  uint64_t copies = 0;         // cudaMemcpy*, cudaMemset* (async or not)
  uint64_t hostWaits = 0;      // a host thread blocked for the device: stream, event or device
                               // synchronize, a synchronous copy or memset, an implicit
                               // synchronization
  uint64_t implicitSyncs = 0;  // device-wide implicit synchronizations (cudaFree, cudaMalloc, ...)
  uint64_t allocations = 0;    // cudaMalloc, cudaMallocAsync, cudaHostAlloc, cudaHostRegister
};
Counters operator-(const Counters& a, const Counters& b);

// Since the process started, every thread together.
Counters processCounters();
// What the calling thread has done since it started (its launches, copies, waits): a
// communicator's progress thread runs one call at a time, so a call's counts are the difference
// of two readings on that thread.
Counters threadCounters();

// Enqueues a kernel named `kernel` on `stream` (0 or cudaStreamLegacy: the legacy default
// stream; cudaStreamPerThread: the calling thread's default stream) of the current device.
// `body` runs on the stream's worker, after everything enqueued before it; an exception it
// throws is the stream's failure (cudaErrorLaunchFailure, sticky for that device, with the
// exception's text on stderr), as a faulting kernel is on a GPU. Returns
// cudaErrorInvalidResourceHandle for a stream that is not one (nothing is enqueued), else
// cudaSuccess; the library depends on nothing of Squeeze, so it reports as CUDA does.
cudaError_t launch(cudaStream_t stream, const char* kernel, std::function<void()> body);

// Loads every kernel on the current device ahead of use (cuFuncLoad of each module on a GPU): no
// later first launch there waits for the device.
void loadKernels();

// True when `p` is inside memory the stand-in tracks as device memory (cudaMalloc,
// cudaMallocAsync, or an IPC mapping).
bool isDeviceMemory(const void* p);
// True when a kernel on a GPU could read or write `p`: device memory, or pinned host memory
// (cudaHostAlloc, cudaMallocHost, cudaHostRegister). The stand-in's kernels check their pointer
// arguments with it, so a kernel handed pageable host memory fails as it would on a GPU
// (cudaErrorIllegalAddress) instead of working by accident.
bool isDeviceAccessible(const void* p);

}  // namespace squeeze::standin
