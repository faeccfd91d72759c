// Kernels of the cast codecs (fp16, bf16): narrow float32 to 16 bits, and the fused
// widen-add of a narrow payload into float32. Round to nearest even, as device/reduce.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace squeeze::device {

enum class Narrow : uint8_t { kHalf, kBfloat16 };

// out[i] = narrow(in[i]).
void cpuNarrow(Narrow kind, const float* in, uint16_t* out, size_t n);
// out[i] = widen(in[i]).
void cpuWiden(Narrow kind, const uint16_t* in, float* out, size_t n);
// out[i] = local[i] + widen(in[i]); out may alias local.
void cpuWidenAdd(Narrow kind, float* out, const float* local, const uint16_t* in, size_t n);

}  // namespace squeeze::device
