// Kernels of the cast codecs (fp16, bf16): narrow float32 to 16 bits, and the fused
// widen-add of a narrow payload into float32. Round to nearest even, as device/reduce.h; the
// conversions themselves are device/elementwise.h's, shared by both backends.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/hd.h"
#include "squeeze_config.h"

namespace squeeze::device {

enum class Narrow : uint8_t { kHalf, kBfloat16 };

// out[i] = narrow(in[i]).
void cpuNarrow(Narrow kind, const float* in, uint16_t* out, size_t n);
// out[i] = widen(in[i]).
void cpuWiden(Narrow kind, const uint16_t* in, float* out, size_t n);
// out[i] = local[i] + widen(in[i]); out may alias local.
void cpuWidenAdd(Narrow kind, float* out, const float* local, const uint16_t* in, size_t n);

#if SQZ_HAVE_CUDA
// ---- CUDA twins (device/cuda/cast.cu) ---------------------------------------------------------
// The cpu* results bit for bit, enqueued on `stream` (no synchronization); n == 0 enqueues
// nothing. Pointers are device memory or pinned, mapped host memory. Throw Error(kCuda) when the
// launch fails. Thread-safe.
void gpuNarrow(Narrow kind, const float* in, uint16_t* out, size_t n, GpuStream stream);
void gpuWiden(Narrow kind, const uint16_t* in, float* out, size_t n, GpuStream stream);
// out may alias local.
void gpuWidenAdd(Narrow kind, float* out, const float* local, const uint16_t* in, size_t n,
                 GpuStream stream);
#endif

}  // namespace squeeze::device
