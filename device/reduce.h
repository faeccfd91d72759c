// The arithmetic interface every backend implements (cpu/ now, cuda/ later): type-erased
// element-wise reduction chosen once per call by (datatype, op), and the final division of avg.
// float16 and bfloat16 are widened to float32, combined, and rounded back (nearest even).
#pragma once

#include <cstddef>

#include "core/types.h"

namespace squeeze::device {

// out[i] = a[i] op b[i] for n elements; out may alias a or b. For RedOp::kAvg this is the sum.
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

ReduceFn cpuReduceFn(DataType dtype, RedOp op);

// buf[i] = buf[i] / divisor, computed in the element type (float16/bfloat16 in float32;
// integers truncate). Used once per element by the rank that finishes an avg.
void cpuDivide(void* buf, size_t n, DataType dtype, int divisor);

// Whether this CPU (and OS) runs AVX with the F16C conversions: picks the float16 kernels.
bool cpuHasF16c();

// Conversions used by the reduction and by tests building exact inputs.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

}  // namespace squeeze::device
