// CUDA kernels behind device/handle_kernels.h: the codec handles' per-element passes (each
// element's math is the header's SQZ_HD function the CPU loop calls, so the bits are the CPU's),
// the generic error-feedback pass with the CPU's norm summation order, and the index check of
// sparse payloads. Grid-stride loops, element by element: these passes run once per call over
// the tensor and are memory-bound.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/error.h"
#include "device/batch.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/handle_kernels.h"

namespace squeeze::device {
namespace {


// Per thread and device: the flag of gpuFirstBadIndex and the norm partials of gpuFeedbackPass.
struct Scratch {
  cuda::DeviceBuffer flag, partials;
  std::vector<float> hostPartials;
};

Scratch& scratch() {
  return perThreadDevice<Scratch>([](int) { return std::make_unique<Scratch>(); });
}

#define SQZ_GRID_STRIDE(i, n)                                                        \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); \
       i += size_t(gridDim.x) * blockDim.x)

__global__ void addResidualKernel(const float* g, float* e, float* x, size_t n) {
  SQZ_GRID_STRIDE(i, n) {
    const float xi = withResidual(g[i], e[i]);
    e[i] = 0.0f;
    x[i] = xi;
  }
}

__global__ void dgcPrepareKernel(const float* g, float scale, const float* deviceScale, float m,
                                 float* u, float* v, float* x, uint8_t* nonzero, size_t n) {
  if (deviceScale) scale = *deviceScale;
  SQZ_GRID_STRIDE(i, n) {
    float ui = u[i];
    const float xi = dgcAccumulate(g[i], scale, m, ui, v[i]);
    u[i] = ui;
    v[i] = 0.0f;
    x[i] = xi;
    nonzero[i] = xi != 0.0f;
  }
}

__global__ void dgcMaskKernel(float* u, const float* v, const uint8_t* nonzero, size_t n) {
  SQZ_GRID_STRIDE(i, n) {
    if (dgcSentInFull(nonzero[i], v[i])) u[i] = 0.0f;
  }
}

__global__ void feedbackResidualKernel(const float* x, const float* d, float* residual, size_t n) {
  SQZ_GRID_STRIDE(i, n) { residual[i] = residualAfter(residual[i], x[i], d[i]); }
}

// Thread t's norm lane, kNormLanes threads per norm block: lane l takes b + l + 8 j over the
// block's whole groups of 8, in order, and lane 0 then the tail, as the CPU's loop does; f(i)
// for each. False when t has no lane.
template <class F>
__device__ bool walkNormLane(size_t t, size_t n, size_t blocks, F&& f) {
  const size_t block = t / kNormLanes;
  const size_t lane = t % kNormLanes;
  if (block >= blocks) return false;
  const size_t b = block * kNormBlock;
  const size_t end = n - b < kNormBlock ? n : b + kNormBlock;
  size_t i = b;
  for (; i + kNormLanes <= end; i += kNormLanes) f(i + lane);
  if (lane == 0)
    for (; i < end; ++i) f(i);
  return true;
}

// Each lane's two float sums of x^2 and d^2 to partials[(block * kNormLanes + l) * 2 + {0, 1}].
__global__ void normLanesKernel(const float* x, const float* d, size_t n, size_t blocks,
                                float* partials) {
  const size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  float in = 0.0f, sent = 0.0f;
  if (!walkNormLane(t, n, blocks, [&](size_t i) {
        in = addSquare(in, x[i]);
        sent = addSquare(sent, d[i]);
      }))
    return;
  partials[t * 2] = in;
  partials[t * 2 + 1] = sent;
}

// Each check's first bad entry: found[0] = the least such j (atomicMin over the grid). The
// check's last block to finish then sets found[1] = idx[found[0]] (~0 when none) and, with a
// report, copies both there and leaves found as it found it, {~0, ~0}, for the slot's next check
// (the context keeps one found pair per check slot, set so at prepare). The blocks count their
// arrivals in found[1], which starts at ~0: the k-th arrival reads k - 2 (mod 2^64). Every
// thread fences its own atomics before its block arrives (CUDA's threadFenceReduction pattern).
__global__ void firstBadIndexKernel(JobTable<IndexCheckJob> t) {
  const IndexCheckJob& c = t.job[blockIdx.y];
  const uint32_t* idx = c.idx;
  SQZ_GRID_STRIDE(j, c.n) {
    const uint32_t v = idx[j];
    if (v >= c.count || (j > 0 && v <= idx[j - 1]))
      atomicMin(c.found, static_cast<unsigned long long>(j));
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x != 0) return;
  const unsigned long long arrived = atomicAdd(&c.found[1], 1ull);
  if (arrived + 2 != static_cast<unsigned long long>(gridDim.x)) return;
  __threadfence();
  const unsigned long long first = atomicAdd(&c.found[0], 0ull);  // every block's atomicMin in
  const unsigned long long value = first != ~0ull ? idx[first] : ~0ull;
  if (c.report) {
    c.report[0] = first;
    c.report[1] = value;
    c.found[0] = ~0ull;
    c.found[1] = ~0ull;
  } else {
    c.found[1] = value;
  }
}

// The dense codec's encode with feedback, in normLanesKernel's threads and order: payload = x,
// and the residual's residualAfter(r, x, x), written only where its bits change (r = -0, or x
// inf or NaN), so a pass over finite values reads the residual and writes nothing back. The sent
// lanes are the input's (d = x), as the CPU's copy feedback sums them once.
__global__ void copyFeedbackKernel(const float* x, float* payload, size_t n, size_t blocks,
                                   float* residual, float* partials) {
  const size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  float in = 0.0f;
  if (!walkNormLane(t, n, blocks,
                    [&](size_t i) {
                      const float v = x[i];
                      payload[i] = v;
                      if (residual) {
                        const float r = residual[i], after = residualAfter(r, v, v);
                        if (__float_as_uint(after) != __float_as_uint(r)) residual[i] = after;
                      }
                      in = addSquare(in, v);
                    }) ||
      !partials)
    return;
  partials[t * 2] = in;
  partials[t * 2 + 1] = in;
}

// One chunk of a cast codec's encode with feedback; partials null: no norms.
struct CastFeedbackArgs {
  const float* x;
  uint16_t* payload;
  size_t n;
  size_t blocks;
  float* residual;
  float* partials;
};

// A cast codec's encode with feedback, in normLanesKernel's threads and order, for the chunk of
// grid row blockIdx.y: each element is narrowed into the payload, widened back (d, never
// stored), and goes into the residual and the lanes as feedbackResidualKernel and
// normLanesKernel take it.
template <Narrow K>
__global__ void castFeedbackKernel(JobTable<CastFeedbackArgs> table) {
  const CastFeedbackArgs& a = table.job[blockIdx.y];
  const size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  float in = 0.0f, sent = 0.0f;
  if (!walkNormLane(t, a.n, a.blocks,
                    [&](size_t i) {
                      const float v = a.x[i];
                      const uint16_t h = K == Narrow::kHalf ? floatToHalf(v) : floatToBfloat16(v);
                      a.payload[i] = h;
                      const float d = K == Narrow::kHalf ? halfToFloat(h) : bfloat16ToFloat(h);
                      if (a.residual) a.residual[i] = residualAfter(a.residual[i], v, d);
                      in = addSquare(in, v);
                      sent = addSquare(sent, d);
                    }) ||
      !a.partials)
    return;
  a.partials[t * 2] = in;
  a.partials[t * 2 + 1] = sent;
}

// The lanes' sums in NormTree's order, by one block of kTreeThreads: each thread turns whole
// blocks' lanes (kNormLanes pairs of floats, added lane after lane into doubles from 0) into the
// block's totals, written over the block's own first four floats; then the totals are added
// level after level, at step s = 1, 2, 4, ... t[j] += t[j + s] for j a multiple of 2s (an odd
// last one waits a level), which is NormTree's tree; add[0..1] += the root. The partials are
// consumed. Every thread of the block must call it.
constexpr unsigned kTreeThreads = 1024;

__device__ double2* blockTotals(float* partials, size_t block) {
  return reinterpret_cast<double2*>(partials + block * 2 * kNormLanes);  // 64 B a block: aligned
}

__device__ void addNormTree(float* partials, size_t blocks, double* add) {
  for (size_t b = threadIdx.x; b < blocks; b += blockDim.x) {
    const float* p = partials + b * 2 * kNormLanes;
    double in = 0, sent = 0;
    for (int l = 0; l < kNormLanes; ++l) {
      in = __dadd_rn(in, double(p[2 * l]));
      sent = __dadd_rn(sent, double(p[2 * l + 1]));
    }
    *blockTotals(partials, b) = make_double2(in, sent);
  }
  __syncthreads();
  for (size_t step = 1; step < blocks; step *= 2) {
    for (size_t j = threadIdx.x * 2 * step; j + step < blocks; j += size_t(blockDim.x) * 2 * step) {
      const double2 left = *blockTotals(partials, j), right = *blockTotals(partials, j + step);
      *blockTotals(partials, j) = make_double2(__dadd_rn(left.x, right.x), __dadd_rn(left.y, right.y));
    }
    __syncthreads();
  }
  if (threadIdx.x == 0 && blocks > 0) {
    const double2 root = *blockTotals(partials, 0);
    add[0] = __dadd_rn(add[0], root.x);
    add[1] = __dadd_rn(add[1], root.y);
  }
  __syncthreads();  // the block in step before the next chunk
}

// addNormTree for each of a batch's chunks in turn (one chunk: count 1): the chunks' partials lie
// one after another, `blocks` of them each.
__global__ void __launch_bounds__(kTreeThreads)
    normTreeKernel(float* partials, JobTable<size_t> blocks, size_t count, double* add) {
  for (size_t j = 0; j < count; ++j) {
    addNormTree(partials, blocks.job[j], add);
    partials += blocks.job[j] * 2 * kNormLanes;
  }
}

// Each job's bytes, one thread a byte (dst and src at any alignment).
__global__ void smallCopyKernel(JobTable<SmallCopyJob> t) {
  const SmallCopyJob& c = t.job[blockIdx.y];
  const unsigned i = threadIdx.x;
  if (i >= c.n) return;
  static_cast<unsigned char*>(c.dst)[i] =
      c.src ? static_cast<const unsigned char*>(c.src)[i] : c.bytes[i];
}

// Each job's found must be {~0, ~0} (firstBadIndexKernel).
void launchIndexChecks(const std::vector<IndexCheckJob>& jobs, GpuStream stream) {
  launchJobs(
      jobs, [](const IndexCheckJob& c) { return gridFor(c.n); },
      [&](dim3 grid, const JobTable<IndexCheckJob>& t) {
        firstBadIndexKernel<<<grid, kThreads, 0, stream>>>(t);
        cuda::checkLaunch("firstBadIndexKernel");
      });
}

}  // namespace

void gpuAddResidual(const float* g, float* e, float* x, size_t n, GpuStream stream) {
  if (n == 0) return;
  addResidualKernel<<<gridFor(n), kThreads, 0, stream>>>(g, e, x, n);
  cuda::checkLaunch("addResidualKernel");
}

void gpuDgcPrepare(const float* g, float scale, float m, float* u, float* v, float* x,
                   uint8_t* nonzero, size_t n, GpuStream stream, const float* deviceScale) {
  if (n == 0) return;
  dgcPrepareKernel<<<gridFor(n), kThreads, 0, stream>>>(g, scale, deviceScale, m, u, v, x,
                                                        nonzero, n);
  cuda::checkLaunch("dgcPrepareKernel");
}

void gpuDgcMask(float* u, const float* v, const uint8_t* nonzero, size_t n, GpuStream stream) {
  if (n == 0) return;
  dgcMaskKernel<<<gridFor(n), kThreads, 0, stream>>>(u, v, nonzero, n);
  cuda::checkLaunch("dgcMaskKernel");
}

namespace {

// Device scratch for the norm lanes of n values; sets lanes.
float* lanePartials(Scratch& sc, size_t n, size_t& lanes, cudaStream_t stream) {
  lanes = (n + kNormBlock - 1) / kNormBlock * kNormLanes;
  sc.partials.reserve(lanes * 2 * sizeof(float), stream);
  return static_cast<float*>(sc.partials.data());
}

unsigned laneGrid(size_t lanes) { return static_cast<unsigned>((lanes + kThreads - 1) / kThreads); }

// The lanes' two sums, in the CPU's order, added to deviceSums on the device (nothing waits), or
// else to *inputSq and *sentSq after a synchronize.
void addLaneSums(Scratch& sc, float* partials, size_t lanes, double* inputSq, double* sentSq,
                 double* deviceSums, cudaStream_t stream) {
  if (deviceSums) {  // the stream orders the next pass's use of the partials after this sum
    JobTable<size_t> blocks{};
    blocks.job[0] = lanes / kNormLanes;
    normTreeKernel<<<1, kTreeThreads, 0, stream>>>(partials, blocks, 1, deviceSums);
    cuda::checkLaunch("normTreeKernel");
    return;
  }
  sc.hostPartials.resize(lanes * 2);
  cuda::check(cudaMemcpyAsync(sc.hostPartials.data(), partials, lanes * 2 * sizeof(float),
                              cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync(feedback norms)");
  syncStream(stream, "error feedback on the GPU");
  // The CPU's order: each block's lanes into its totals, the totals in NormTree's tree.
  NormTree tree;
  for (size_t b = 0; b < lanes / kNormLanes; ++b) {
    double in = 0, sent = 0;
    for (int l = 0; l < kNormLanes; ++l) {
      in += sc.hostPartials[(b * kNormLanes + l) * 2];
      sent += sc.hostPartials[(b * kNormLanes + l) * 2 + 1];
    }
    tree.push(in, sent);
  }
  tree.addTo(inputSq, sentSq);
}

}  // namespace

void gpuFeedbackPass(const float* x, const float* d, size_t n, float* residual, double* inputSq,
                     double* sentSq, double* deviceSums, GpuStream stream) {
  if (n == 0) return;
  if (residual) {
    feedbackResidualKernel<<<gridFor(n), kThreads, 0, stream>>>(x, d, residual, n);
    cuda::checkLaunch("feedbackResidualKernel");
  }
  if (!inputSq && !sentSq && !deviceSums) return;
  Scratch& sc = scratch();
  size_t lanes = 0;
  float* partials = lanePartials(sc, n, lanes, stream);
  normLanesKernel<<<laneGrid(lanes), kThreads, 0, stream>>>(x, d, n, lanes / kNormLanes, partials);
  cuda::checkLaunch("normLanesKernel");
  addLaneSums(sc, partials, lanes, inputSq, sentSq, deviceSums, stream);
}

namespace {

// castFeedbackKernel over `args`, kBatchJobs to a launch, and with deviceSums each launch's
// lanes (one chunk's after another's) added to it, chunk after chunk.
void launchCastFeedback(Narrow kind, const std::vector<CastFeedbackArgs>& args, double* deviceSums,
                        GpuStream stream) {
  launchJobs(
      args, [](const CastFeedbackArgs& a) { return laneGrid(a.blocks * kNormLanes); },
      [&](dim3 grid, const JobTable<CastFeedbackArgs>& t) {
        if (kind == Narrow::kHalf)
          castFeedbackKernel<Narrow::kHalf><<<grid, kThreads, 0, stream>>>(t);
        else
          castFeedbackKernel<Narrow::kBfloat16><<<grid, kThreads, 0, stream>>>(t);
        cuda::checkLaunch("castFeedbackKernel");
        if (!deviceSums) return;
        JobTable<size_t> blocks{};
        for (size_t j = 0; j < grid.y; ++j) blocks.job[j] = t.job[j].blocks;
        normTreeKernel<<<1, kTreeThreads, 0, stream>>>(t.job[0].partials, blocks, grid.y,
                                                       deviceSums);
        cuda::checkLaunch("normTreeKernel");
      });
}

}  // namespace

void gpuCastFeedbackBatch(Narrow kind, const CastFeedbackJob* jobs, size_t count,
                          double* deviceSums, GpuStream stream) {
  std::vector<CastFeedbackArgs> args;
  size_t allLanes = 0;
  for (size_t j = 0; j < count; ++j) {
    if (jobs[j].n == 0) continue;
    const size_t blocks = (jobs[j].n + kNormBlock - 1) / kNormBlock;
    args.push_back({jobs[j].x, jobs[j].payload, jobs[j].n, blocks, jobs[j].residual, nullptr});
    allLanes += blocks * kNormLanes;
  }
  if (args.empty()) return;
  float* partials = nullptr;
  if (deviceSums) {  // each launch's chunks' lanes one after another, then their sums in order
    Scratch& sc = scratch();
    sc.partials.reserve(allLanes * 2 * sizeof(float), stream);
    partials = static_cast<float*>(sc.partials.data());
  }
  size_t at = 0;
  for (CastFeedbackArgs& a : args) {
    if (partials) a.partials = partials + 2 * at;
    at += a.blocks * kNormLanes;
  }
  launchCastFeedback(kind, args, deviceSums, stream);
}

void gpuCopyFeedback(const float* x, float* payload, size_t n, float* residual, double* inputSq,
                     double* sentSq, double* deviceSums, GpuStream stream) {
  if (n == 0) return;
  const size_t blocks = (n + kNormBlock - 1) / kNormBlock;
  const bool norms = inputSq || sentSq || deviceSums;
  Scratch& sc = scratch();
  size_t lanes = blocks * kNormLanes;
  float* partials = norms ? lanePartials(sc, n, lanes, stream) : nullptr;
  copyFeedbackKernel<<<laneGrid(lanes), kThreads, 0, stream>>>(x, payload, n, blocks, residual,
                                                               partials);
  cuda::checkLaunch("copyFeedbackKernel");
  if (norms) addLaneSums(sc, partials, lanes, inputSq, sentSq, deviceSums, stream);
}

void gpuCastFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n, float* residual,
                     double* inputSq, double* sentSq, double* deviceSums, GpuStream stream) {
  if (n == 0) return;
  const CastFeedbackJob job{x, payload, n, residual};
  if (deviceSums || (!inputSq && !sentSq)) {
    gpuCastFeedbackBatch(kind, &job, 1, deviceSums, stream);
    return;
  }
  Scratch& sc = scratch();
  const size_t blocks = (n + kNormBlock - 1) / kNormBlock;
  size_t lanes = 0;
  float* partials = lanePartials(sc, n, lanes, stream);
  launchCastFeedback(kind, {{x, payload, n, blocks, residual, partials}}, nullptr, stream);
  addLaneSums(sc, partials, lanes, inputSq, sentSq, nullptr, stream);
}

void gpuFindBadIndex(const uint32_t* idx, size_t m, size_t count, unsigned long long* found,
                     GpuStream stream) {
  cuda::check(cudaMemsetAsync(found, 0xff, 2 * sizeof *found, stream),
              "cudaMemsetAsync(index check)");
  if (m == 0) return;
  launchIndexChecks({{idx, m, count, found, nullptr}}, stream);
}

void gpuSmallCopyBatch(const SmallCopyJob* jobs, size_t count, GpuStream stream) {
  std::vector<SmallCopyJob> live;
  for (size_t j = 0; j < count; ++j) {
    SQZ_ENFORCE(jobs[j].n <= kSmallCopyBytes, "a small copy of ", jobs[j].n, " bytes");
    if (jobs[j].n > 0) live.push_back(jobs[j]);
  }
  launchJobs(
      live, [](const SmallCopyJob&) { return 1u; },
      [&](dim3 grid, const JobTable<SmallCopyJob>& t) {
        smallCopyKernel<<<grid, kSmallCopyBytes, 0, stream>>>(t);
        cuda::checkLaunch("smallCopyKernel");
      });
}

void gpuFindBadIndexBatch(const IndexCheckJob* jobs, size_t count, GpuStream stream) {
  launchIndexChecks(liveJobs(jobs, count), stream);
}

size_t gpuFirstBadIndex(const uint32_t* idx, size_t m, size_t count, GpuStream stream) {
  if (m == 0) return SIZE_MAX;
  Scratch& sc = scratch();
  sc.flag.reserve(2 * sizeof(unsigned long long), stream);
  auto* flag = static_cast<unsigned long long*>(sc.flag.data());
  gpuFindBadIndex(idx, m, count, flag, stream);
  unsigned long long first = 0;
  cuda::check(cudaMemcpyAsync(&first, flag, sizeof first, cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync(index check)");
  syncStream(stream, "checking a sparse payload's indices on the GPU");
  return first == ~0ull ? SIZE_MAX : static_cast<size_t>(first);
}

void gpuPrepareThread(GpuStream) {
  loadKernelModules();  // first: the scratch below may launch kernels
  (void)scratch();
  prepareQuantizeThread();
}

}  // namespace squeeze::device
