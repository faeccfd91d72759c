// Moving bytes and waiting, wherever a call's memory is: on the host (stream null: memcpy, and
// nothing to wait for) or, for a device call, on its CUDA stream (any pointers CUDA's unified
// addressing knows). The one way the executor, the codecs and their handles copy and
// synchronize; no CUDA header needed to call it.
#pragma once

#include <cstddef>

#include "device/hd.h"
#include "squeeze_config.h"

namespace squeeze::device {

// dst = src (bytes): memcpy, or a copy enqueued on `stream`. Nothing for bytes == 0 (an empty
// chunk's pointers may be null).
void copyBytes(void* dst, const void* src, size_t bytes, GpuStream stream);

// dst[j] = src[j * stride] for j < count (floats; dst on the host, src where the call's memory
// is): a sample of a tensor without moving all of it (one strided 2D copy on the stream).
void gatherStrided(float* dst, const float* src, size_t count, size_t stride, GpuStream stream);

// Waits for what was enqueued on `stream` (nothing for null); a failed kernel or copy throws
// Error(kCuda) naming `what`.
void syncStream(GpuStream stream, const char* what);

#if SQZ_HAVE_CUDA
// Makes the calling thread's kernel scratch on the current device that is made once and never
// grown (pinned result slots, cuBLAS's handle and its workspace for `stream`). cudaHostAlloc and
// cublasCreate may wait for the whole device, so a progress thread calls this when it starts,
// before any caller's stream waits for it (DESIGN.md, "Memory, streams, threads").
void gpuPrepareThread(GpuStream stream);
#endif

}  // namespace squeeze::device
