// CUDA kernels behind device/cast.h: narrow, widen and widen-add between float32 and the 16-bit
// floats, each element converted by device/elementwise.h's functions (the CPU's scalar path,
// which its F16C path matches), so the bits are the CPU's. The bit-level conversions rather
// than the hardware's cvt instructions: those turn every NaN into one canonical NaN, which the
// CPU does not.
//
// Grid-stride loops over groups of 4 elements (a float4 and 8 bytes of 16-bit values) from the
// first index where every pointer is aligned for its group, with the elements before and after
// done one by one; pointers that cannot be aligned at a common index go element by element.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "device/cast.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/elementwise.h"

namespace squeeze::device {
namespace {

constexpr size_t kGroup = 4;

struct Quad16 {
  uint16_t e[4];
};

// Elements [0, head) and [head + groups * 4, n) one by one, the groups between them whole.
struct Split {
  size_t head = 0;
  size_t groups = 0;
};

// Where a float pointer (16-byte groups) and a uint16_t pointer (8-byte groups) are both
// aligned at the same element, if they ever are.
Split splitFor(size_t n, const float* f, const uint16_t* h) {
  const uintptr_t fm = reinterpret_cast<uintptr_t>(f) % 16, hm = reinterpret_cast<uintptr_t>(h) % 8;
  if (fm % 4 != 0 || hm % 2 != 0) return {n, 0};
  const size_t fh = (16 - fm) % 16 / 4, hh = (8 - hm) % 8 / 2;
  if (fh != hh) return {n, 0};
  const size_t head = std::min(n, fh);
  return {head, (n - head) / kGroup};
}

size_t workOf(const Split& s, size_t n) { return s.groups ? s.groups : n; }

template <Narrow K>
__device__ __forceinline__ uint16_t narrowOne(float f) {
  if constexpr (K == Narrow::kHalf) return floatToHalf(f);
  return floatToBfloat16(f);
}
template <Narrow K>
__device__ __forceinline__ float widenOne(uint16_t v) {
  if constexpr (K == Narrow::kHalf) return halfToFloat(v);
  return bfloat16ToFloat(v);
}

template <Narrow K>
__global__ void narrowKernel(const float* in, uint16_t* out, size_t n, Split split) {
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const float4* vin = reinterpret_cast<const float4*>(in + split.head);
  uint2* vout = reinterpret_cast<uint2*>(out + split.head);
  for (size_t g = first; g < split.groups; g += stride) {
    const float4 f = vin[g];
    const Quad16 q = {{narrowOne<K>(f.x), narrowOne<K>(f.y), narrowOne<K>(f.z), narrowOne<K>(f.w)}};
    vout[g] = __builtin_bit_cast(uint2, q);
  }
  for (size_t i = first; i < split.head; i += stride) out[i] = narrowOne<K>(in[i]);
  for (size_t i = split.head + split.groups * kGroup + first; i < n; i += stride)
    out[i] = narrowOne<K>(in[i]);
}

// out = widen(in), or out = local + widen(in) when local is not null (out may alias local).
template <Narrow K, bool kAdd>
__global__ void widenKernel(float* out, const float* local, const uint16_t* in, size_t n,
                            Split split) {
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const uint2* vin = reinterpret_cast<const uint2*>(in + split.head);
  float4* vout = reinterpret_cast<float4*>(out + split.head);
  const float4* vlocal = kAdd ? reinterpret_cast<const float4*>(local + split.head) : nullptr;
  for (size_t g = first; g < split.groups; g += stride) {
    const Quad16 q = __builtin_bit_cast(Quad16, vin[g]);
    float4 f = {widenOne<K>(q.e[0]), widenOne<K>(q.e[1]), widenOne<K>(q.e[2]), widenOne<K>(q.e[3])};
    if constexpr (kAdd) {
      const float4 l = vlocal[g];
      f = {addDecoded(l.x, f.x), addDecoded(l.y, f.y), addDecoded(l.z, f.z), addDecoded(l.w, f.w)};
    }
    vout[g] = f;
  }
  auto one = [&](size_t i) {
    const float w = widenOne<K>(in[i]);
    if constexpr (kAdd)
      out[i] = addDecoded(local[i], w);
    else
      out[i] = w;
  };
  for (size_t i = first; i < split.head; i += stride) one(i);
  for (size_t i = split.head + split.groups * kGroup + first; i < n; i += stride) one(i);
}

template <bool kAdd>
void launchWiden(Narrow kind, float* out, const float* local, const uint16_t* in, size_t n,
                 Split split, GpuStream stream) {
  const unsigned grid = gridFor(workOf(split, n));
  if (kind == Narrow::kHalf)
    widenKernel<Narrow::kHalf, kAdd><<<grid, kThreads, 0, stream>>>(out, local, in, n, split);
  else
    widenKernel<Narrow::kBfloat16, kAdd><<<grid, kThreads, 0, stream>>>(out, local, in, n, split);
  cuda::checkLaunch(kAdd ? "widenAddKernel" : "widenKernel");
}

}  // namespace

void gpuNarrow(Narrow kind, const float* in, uint16_t* out, size_t n, GpuStream stream) {
  if (n == 0) return;
  const Split split = splitFor(n, in, out);
  const unsigned grid = gridFor(workOf(split, n));
  if (kind == Narrow::kHalf)
    narrowKernel<Narrow::kHalf><<<grid, kThreads, 0, stream>>>(in, out, n, split);
  else
    narrowKernel<Narrow::kBfloat16><<<grid, kThreads, 0, stream>>>(in, out, n, split);
  cuda::checkLaunch("narrowKernel");
}

void gpuWiden(Narrow kind, const uint16_t* in, float* out, size_t n, GpuStream stream) {
  if (n == 0) return;
  launchWiden<false>(kind, out, nullptr, in, n, splitFor(n, out, in), stream);
}

void gpuWidenAdd(Narrow kind, float* out, const float* local, const uint16_t* in, size_t n,
                 GpuStream stream) {
  if (n == 0) return;
  Split split = splitFor(n, out, in);
  // local must sit like out for the float4 loads; otherwise element by element.
  if (reinterpret_cast<uintptr_t>(local) % 16 != reinterpret_cast<uintptr_t>(out) % 16)
    split = {n, 0};
  launchWiden<true>(kind, out, local, in, n, split, stream);
}

}  // namespace squeeze::device
