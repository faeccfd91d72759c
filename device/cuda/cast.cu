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
#include <vector>

#include "device/batch.h"
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

// One chunk of a cast: its pointers (as the entry point's), count and split.
struct CastArgs {
  const void* in;
  void* out;
  const float* local;
  size_t n;
  Split split;
};
using CastTable = JobTable<CastArgs>;

template <Narrow K>
__global__ void narrowKernel(CastTable t) {
  const CastArgs& a = t.job[blockIdx.y];
  const float* in = static_cast<const float*>(a.in);
  uint16_t* out = static_cast<uint16_t*>(a.out);
  const size_t n = a.n;
  const Split split = a.split;
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

// out = widen(in), or out = local + widen(in) with kAdd (out may alias local).
template <Narrow K, bool kAdd>
__global__ void widenKernel(CastTable t) {
  const CastArgs& a = t.job[blockIdx.y];
  const uint16_t* in = static_cast<const uint16_t*>(a.in);
  float* out = static_cast<float*>(a.out);
  const float* local = a.local;
  const size_t n = a.n;
  const Split split = a.split;
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

// The chunk's arguments with its split: narrow (in float, out 16-bit) or widen (the reverse;
// with local, which must sit like out for the float4 loads, else element by element).
CastArgs castArgs(const CastJob& j, bool narrow) {
  CastArgs a{j.in, j.out, j.local, j.n, {}};
  if (narrow) {
    a.split = splitFor(j.n, static_cast<const float*>(j.in), static_cast<const uint16_t*>(j.out));
  } else {
    a.split = splitFor(j.n, static_cast<const float*>(j.out), static_cast<const uint16_t*>(j.in));
    if (j.local &&
        reinterpret_cast<uintptr_t>(j.local) % 16 != reinterpret_cast<uintptr_t>(j.out) % 16)
      a.split = {j.n, 0};
  }
  return a;
}

void launchCasts(Narrow kind, const CastJob* jobs, size_t count, bool narrow, bool add,
                 GpuStream stream) {
  std::vector<CastArgs> args;
  for (size_t j = 0; j < count; ++j)
    if (jobs[j].n > 0) args.push_back(castArgs(jobs[j], narrow));
  const bool half = kind == Narrow::kHalf;
  launchJobs(
      args, [](const CastArgs& a) { return gridFor(workOf(a.split, a.n)); },
      [&](dim3 grid, const CastTable& t) {
        if (narrow) {
          if (half)
            narrowKernel<Narrow::kHalf><<<grid, kThreads, 0, stream>>>(t);
          else
            narrowKernel<Narrow::kBfloat16><<<grid, kThreads, 0, stream>>>(t);
        } else if (add) {
          if (half)
            widenKernel<Narrow::kHalf, true><<<grid, kThreads, 0, stream>>>(t);
          else
            widenKernel<Narrow::kBfloat16, true><<<grid, kThreads, 0, stream>>>(t);
        } else {
          if (half)
            widenKernel<Narrow::kHalf, false><<<grid, kThreads, 0, stream>>>(t);
          else
            widenKernel<Narrow::kBfloat16, false><<<grid, kThreads, 0, stream>>>(t);
        }
        cuda::checkLaunch(narrow ? "narrowKernel" : add ? "widenAddKernel" : "widenKernel");
      });
}

}  // namespace

void gpuNarrowBatch(Narrow kind, const CastJob* jobs, size_t count, GpuStream stream) {
  launchCasts(kind, jobs, count, true, false, stream);
}
void gpuWidenBatch(Narrow kind, const CastJob* jobs, size_t count, bool add, GpuStream stream) {
  launchCasts(kind, jobs, count, false, add, stream);
}

void gpuNarrow(Narrow kind, const float* in, uint16_t* out, size_t n, GpuStream stream) {
  const CastJob job{in, out, nullptr, n};
  gpuNarrowBatch(kind, &job, 1, stream);
}

void gpuWiden(Narrow kind, const uint16_t* in, float* out, size_t n, GpuStream stream) {
  const CastJob job{in, out, nullptr, n};
  gpuWidenBatch(kind, &job, 1, false, stream);
}

void gpuWidenAdd(Narrow kind, float* out, const float* local, const uint16_t* in, size_t n,
                 GpuStream stream) {
  const CastJob job{in, out, local, n};
  gpuWidenBatch(kind, &job, 1, true, stream);
}

}  // namespace squeeze::device
