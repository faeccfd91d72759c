// Moving bytes and waiting, wherever a call's memory is: on the host (stream null: memcpy, and
// nothing to wait for) or, for a device call, on its CUDA stream (any pointers CUDA's unified
// addressing knows). The one way the executor, the codecs and their handles copy and
// synchronize; no CUDA header needed to call it.
#pragma once

#include <cstddef>

#include "device/hd.h"

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

}  // namespace squeeze::device
