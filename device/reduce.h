// The arithmetic interface every backend implements (cpu/ and, with the cuda feature, cuda/):
// type-erased element-wise reduction chosen once per call by (datatype, op), and the final
// division of avg. float16 and bfloat16 are widened to float32, combined, and rounded back
// (nearest even). The per-element math of both backends is device/elementwise.h, which also
// defines the 16-bit conversions (halfToFloat, floatToHalf, bfloat16ToFloat, floatToBfloat16).
#pragma once

#include <cstddef>

#include "base/types.h"
#include "device/elementwise.h"
#include "device/hd.h"
#include "squeeze_config.h"

namespace squeeze::device {

// out[i] = a[i] op b[i] for n elements; out may alias a or b. For RedOp::kAvg this is the sum.
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

ReduceFn cpuReduceFn(DataType dtype, RedOp op);

// buf[i] = buf[i] / divisor, computed in the element type (float16/bfloat16 in float32;
// integers truncate). Used once per element by the rank that finishes an avg.
void cpuDivide(void* buf, size_t n, DataType dtype, int divisor);

// Whether this CPU (and OS) runs AVX with the F16C conversions: picks the float16 kernels.
bool cpuHasF16c();

#if SQZ_HAVE_CUDA
// ---- CUDA twins (device/cuda/reduce.cu) -------------------------------------------------------
// The same results as the cpu* functions bit for bit, enqueued on `stream` (no synchronization);
// n == 0 enqueues nothing. Pointers are device memory or pinned, mapped host memory (unified
// addressing). Throw Error(kCuda) when the launch fails. Thread-safe.

// out[i] = a[i] op b[i]; out may alias a or b (exactly, not partially).
void gpuReduce(DataType dtype, RedOp op, void* out, const void* a, const void* b, size_t n,
               GpuStream stream);
// cpuDivide's buf[i] / divisor.
void gpuDivide(void* buf, size_t n, DataType dtype, int divisor, GpuStream stream);
#endif

}  // namespace squeeze::device
