// CUDA kernels behind device/sparse.h that move values by index: gather, densify, scatter-add
// and random-k's strata, the gpu* twins of the CPU's (the selections and the sparse feedback
// are in sparse.cu). Every one is a grid-stride loop over its entries, batched over a step's
// pieces (device/batch.h: one grid row a piece).
#include <cuda_runtime_api.h>

#include <vector>

#include "device/batch.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/sparse.h"

namespace squeeze::device {
namespace {

__global__ void gatherKernel(JobTable<GatherJob> t) {
  const GatherJob& g = t.job[blockIdx.y];
  const float* x = g.x;
  const uint32_t* idx = g.idx;
  const size_t k = g.n;
  float* out = g.out;
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < k;
       j += gridDim.x * size_t(blockDim.x))
    out[j] = x[idx[j]];
}

__global__ void zeroKernel(JobTable<ScatterJob> t) {
  float* dst = t.job[blockIdx.y].dst;
  const size_t n = t.job[blockIdx.y].n;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += gridDim.x * size_t(blockDim.x))
    dst[i] = 0.0f;
}

// An index at or past n is skipped: a payload's index list may be checked only after the
// stream has run this (Context::checkIndices), and must never make it write outside dst.
__global__ void scatterKernel(JobTable<ScatterJob> t, bool add) {
  const ScatterJob& s = t.job[blockIdx.y];
  const uint32_t* idx = s.idx;
  const float* vals = s.vals;
  const size_t k = s.k, n = s.n;
  float* dst = s.dst;
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < k;
       j += gridDim.x * size_t(blockDim.x)) {
    const uint32_t i = idx[j];
    if (i >= n || vals[j] == 0.0f) continue;  // a zero entry is padding (sparse.h)
    if (add)
      dst[i] += vals[j];
    else
      dst[i] = vals[j];
  }
}

__global__ void strataKernel(uint64_t key, size_t n, size_t k, uint32_t* idx) {
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < k;
       j += gridDim.x * size_t(blockDim.x))
    idx[j] = strataIndex(key, j, n, k);
}

unsigned elementGrid(size_t n) { return gridFor(n, kThreads, 65535); }

void launchScatters(const std::vector<ScatterJob>& jobs, bool add, GpuStream stream) {
  launchJobs(
      jobs, [](const ScatterJob& j) { return elementGrid(j.k); },
      [&](dim3 grid, const JobTable<ScatterJob>& t) {
        scatterKernel<<<grid, kThreads, 0, stream>>>(t, add);
        cuda::checkLaunch("scatterKernel");
      });
}

}  // namespace

void gpuGatherBatch(const GatherJob* jobs, size_t count, GpuStream stream) {
  launchJobs(
      liveJobs(jobs, count), [](const GatherJob& g) { return elementGrid(g.n); },
      [&](dim3 grid, const JobTable<GatherJob>& t) {
        gatherKernel<<<grid, kThreads, 0, stream>>>(t);
        cuda::checkLaunch("gatherKernel");
      });
}

void gpuDensifyBatch(const ScatterJob* jobs, size_t count, GpuStream stream) {
  std::vector<ScatterJob> live, entries;
  for (size_t j = 0; j < count; ++j)
    if (jobs[j].n > 0) {
      live.push_back(jobs[j]);
      if (jobs[j].k > 0) entries.push_back(jobs[j]);
    }
  launchJobs(
      live, [](const ScatterJob& s) { return elementGrid(s.n); },
      [&](dim3 grid, const JobTable<ScatterJob>& t) {
        zeroKernel<<<grid, kThreads, 0, stream>>>(t);
        cuda::checkLaunch("zeroKernel");
      });
  launchScatters(entries, false, stream);
}

void gpuScatterAddBatch(const ScatterJob* jobs, size_t count, GpuStream stream) {
  const std::vector<ScatterJob> entries = copyScatterAddLocals(jobs, count, stream);
  launchScatters(entries, true, stream);
}

void gpuGather(const float* x, const uint32_t* idx, size_t k, float* out, GpuStream stream) {
  const GatherJob job{x, idx, k, out};
  gpuGatherBatch(&job, 1, stream);
}

void gpuDensify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n,
                GpuStream stream) {
  const ScatterJob job{idx, vals, k, dst, nullptr, n};
  gpuDensifyBatch(&job, 1, stream);
}

void gpuScatterAdd(float* out, const float* local, size_t n, const uint32_t* idx, const float* vals,
                   size_t k, GpuStream stream) {
  const ScatterJob job{idx, vals, k, out, local, n};
  gpuScatterAddBatch(&job, 1, stream);
}

void gpuRandomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                     uint32_t* idx, GpuStream stream) {
  if (k == 0) return;
  strataKernel<<<elementGrid(k), kThreads, 0, stream>>>(strataKey(seed, call, offset), n, k, idx);
  cuda::checkLaunch("strataKernel");
}

}  // namespace squeeze::device
