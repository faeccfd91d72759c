// The CUDA stand-in: an emulated GPU for machines without one (the `cuda-standin` build).
//
// libsqz-cuda-standin.so exports the CUDA runtime functions Squeeze calls (cudaMalloc,
// cudaMemcpyAsync, cudaStreamCreateWithFlags, cudaEventRecord, cudaLaunchHostFunc, ...) with the
// toolkit header's signatures, plus the driver entry points Squeeze looks up through
// cudaGetDriverEntryPointByVersion (cuStreamWaitValue32, cuStreamWriteValue32,
// cuMemGetAddressRange), over:
//   - device memory that is host memory the stand-in tracks (a memfd mapping per allocation, so
//     CUDA IPC handles open in another process); pointer attributes say "device";
//   - a worker thread per stream that runs its work in order; events; host functions on one
//     callback thread per device; stream waits on, and stream writes of, a 32-bit word;
//   - hardware work queues: CUDA_DEVICE_MAX_CONNECTIONS per device (default 8, read when the
//     device is initialized), each stream (the default ones too) bound to one round-robin when
//     created; a queue runs in order across its streams, so a stream held by
//     cuStreamWaitValue32 or a host function stalls every later item of the streams sharing its
//     queue, as on a GPU;
//   - CUDA's documented implicit synchronization: cudaMalloc, cudaFree, cudaHostAlloc,
//     cudaFreeHost, cudaHostRegister, synchronous cudaMemcpy/cudaMemset and
//     cudaDeviceSynchronize wait for all earlier work on the device (the stream-ordered
//     cudaMallocAsync/cudaFreeAsync do not); work on a blocking stream waits for the legacy
//     default stream and the other way round;
//   - the driver lock: while a host thread is inside such an implicit synchronization (or a
//     lazy module or library load), every other host thread's CUDA call waits at its entry
//     until it returns (the stream workers and the callback thread, the "GPU", do not);
//   - CUDA's lazy loading (the default since 12.2): a kernel's first launch on a device loads
//     it, which may synchronize the whole device, so the stand-in's first launch of each kernel
//     name waits for all earlier work, as cudaFree does, unless loadKernels() ran for the device
//     (the library's gpuPrepareThread, as kernel_modules.cc does on a GPU) or
//     CUDA_MODULE_LOADING=EAGER; likewise the first use of a library (cuBLAS: useLibrary()) on
//     a device loads it, unless loadKernels() ran there.
// Kernels are the gpu* entry points of device/ (device/standin/*_kernels.cc), which run their
// cpu* twins on the stream through launch() below.
//
// A host thread blocked in an implicit synchronization behind a held stream (by
// cuStreamWaitValue32 or a host function), directly or through what the stream is ordered
// behind (the legacy stream, an event, a stream ahead of it on its work queue), or blocked on
// the driver lock behind such a thread, or in cudaStreamSynchronize/cudaEventSynchronize on a
// stream stalled behind another held one, is the deadlock NCCL's rule forbids: the stand-in
// says so on stderr after a second, and when it is still blocked after SQZ_STANDIN_HANG_MS
// (default 20000) it prints what every stream of the device is doing and aborts the process, so
// a hang is a failure with a reason, not a silent timeout.
//
// Every exported call is counted per thread (Counters::apiCalls), with the thread's name, so a
// test can check that the library's progress threads ("sqz-progress") make no CUDA call.
//
// Environment: SQZ_STANDIN_DEVICES (emulated GPUs, default 1), SQZ_STANDIN_HANG_MS,
// CUDA_DEVICE_MAX_CONNECTIONS (1..32, default 8), CUDA_MODULE_LOADING.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>

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
  uint64_t apiCalls = 0;       // every exported cuda*/cu* call (driver entry points handed out,
                               // launch, loadKernels and useLibrary too); nested ones once
  uint64_t streamOps = 0;      // cuStreamWaitValue32, cuStreamWriteValue32, cudaLaunchHostFunc
  uint64_t deviceToHost = 0;   // copies (among `copies`) from device memory into host memory,
                               // pinned or pageable
  uint64_t pageable = 0;       // copies (among `copies`) from or into pageable host memory
  uint64_t pointerQueries = 0;  // cudaPointerGetAttributes, cuMemGetAddressRange
  uint64_t streamCreations = 0;  // cudaStreamCreate*
  uint64_t eventCreations = 0;   // cudaEventCreate*
};
Counters operator-(const Counters& a, const Counters& b);

// Since the process started, every thread together.
Counters processCounters();
// What the calling thread has done since it started (its launches, copies, waits): a
// communicator's progress thread runs one call at a time, so a call's counts are the difference
// of two readings on that thread.
Counters threadCounters();
// The sum over every thread, alive or exited, whose name (pthread_getname_np, as of its latest
// CUDA call) starts with `prefix`.
Counters countersOfThreadsNamed(const char* prefix);

// What `c` counts, divided by `calls` (the benchmarks' and tests' per-call line): "3 launches,
// 0 host waits, 2 copies (1 to the host, 0 pageable), 4 stream ops, 0 allocations, 0 streams and
// 0 events made, 0 pointer queries".
std::string perCall(const Counters& c, uint64_t calls);

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

// The first use of `library` (cuBLAS, whose GEMMs the linear-algebra kernels stand for) on the
// current device loads it: an implicit synchronization (it waits for the whole device and holds
// the driver lock), unless loadKernels() ran for the device or the library was used there
// before. Returns the sticky error, else cudaSuccess.
cudaError_t useLibrary(const char* library);

// A test's hook: as if CUDA_DEVICE_MAX_CONNECTIONS were `count` (1..32) on the current device,
// for the streams created from now on (fresh queues, round-robin from the first; streams that
// exist keep theirs). A process cannot change it on a GPU. cudaErrorInvalidValue otherwise.
cudaError_t setWorkQueues(int count);

// True when `p` is inside memory the stand-in tracks as device memory (cudaMalloc,
// cudaMallocAsync, or an IPC mapping).
bool isDeviceMemory(const void* p);
// True when a kernel on a GPU could read or write `p`: device memory, or pinned host memory
// (cudaHostAlloc, cudaMallocHost, cudaHostRegister). The stand-in's kernels check their pointer
// arguments with it, so a kernel handed pageable host memory fails as it would on a GPU
// (cudaErrorIllegalAddress) instead of working by accident.
bool isDeviceAccessible(const void* p);

}  // namespace squeeze::standin
