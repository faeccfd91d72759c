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

__global__ void dgcPrepareKernel(const float* g, float scale, float m, float* u, float* v,
                                 float* x, uint8_t* nonzero, size_t n) {
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

__global__ void firstBadIndexKernel(JobTable<IndexCheckJob> t) {
  const IndexCheckJob& c = t.job[blockIdx.y];
  const uint32_t* idx = c.idx;
  SQZ_GRID_STRIDE(j, c.n) {
    const uint32_t v = idx[j];
    if (v >= c.count || (j > 0 && v <= idx[j - 1]))
      atomicMin(c.found, static_cast<unsigned long long>(j));
  }
}

// found = {~0, ~0} for each check of a batch, before firstBadIndexKernel.
__global__ void resetFoundKernel(JobTable<IndexCheckJob> t) {
  t.job[blockIdx.y].found[0] = ~0ull;
  t.job[blockIdx.y].found[1] = ~0ull;
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

// add[0..1] += the lanes' sums in the CPU's order (block after block, lane after lane, into double
// from 0): one thread, so the same bits as the host's loop.
__device__ void addLanes(const float* partials, size_t lanes, double* add) {
  double in = 0, sent = 0;
  for (size_t l = 0; l < lanes; ++l) {
    in += partials[2 * l];
    sent += partials[2 * l + 1];
  }
  add[0] += in;
  add[1] += sent;
}

__global__ void laneSumKernel(const float* partials, size_t lanes, double* add) {
  addLanes(partials, lanes, add);
}

// The same for each of a batch's chunks in turn: the chunks' lanes lie one after another.
__global__ void laneSumsKernel(const float* partials, JobTable<size_t> lanes, size_t count,
                               double* add) {
  for (size_t j = 0; j < count; ++j) {
    addLanes(partials, lanes.job[j], add);
    partials += 2 * lanes.job[j];
  }
}

// found[1] = idx[found[0]], once firstBadIndexKernel has found it.
__global__ void badIndexValueKernel(JobTable<IndexCheckJob> t) {
  const IndexCheckJob& c = t.job[blockIdx.y];
  const unsigned long long first = c.found[0];
  const unsigned long long value = first != ~0ull ? c.idx[first] : ~0ull;
  c.found[1] = value;
  if (c.report) {
    c.report[0] = first;
    c.report[1] = value;
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

void launchIndexChecks(const std::vector<IndexCheckJob>& jobs, bool reset, GpuStream stream) {
  launchJobs(
      jobs, [](const IndexCheckJob& c) { return gridFor(c.n); },
      [&](dim3 grid, const JobTable<IndexCheckJob>& t) {
        if (reset) {
          resetFoundKernel<<<dim3(1, grid.y), 1, 0, stream>>>(t);
          cuda::checkLaunch("resetFoundKernel");
        }
        firstBadIndexKernel<<<grid, kThreads, 0, stream>>>(t);
        cuda::checkLaunch("firstBadIndexKernel");
        badIndexValueKernel<<<dim3(1, grid.y), 1, 0, stream>>>(t);
        cuda::checkLaunch("badIndexValueKernel");
      });
}

}  // namespace

void gpuAddResidual(const float* g, float* e, float* x, size_t n, GpuStream stream) {
  if (n == 0) return;
  addResidualKernel<<<gridFor(n), kThreads, 0, stream>>>(g, e, x, n);
  cuda::checkLaunch("addResidualKernel");
}

void gpuDgcPrepare(const float* g, float scale, float m, float* u, float* v, float* x,
                   uint8_t* nonzero, size_t n, GpuStream stream) {
  if (n == 0) return;
  dgcPrepareKernel<<<gridFor(n), kThreads, 0, stream>>>(g, scale, m, u, v, x, nonzero, n);
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
void addLaneSums(Scratch& sc, const float* partials, size_t lanes, double* inputSq, double* sentSq,
                 double* deviceSums, cudaStream_t stream) {
  if (deviceSums) {  // the stream orders the next pass's use of the partials after this sum
    laneSumKernel<<<1, 1, 0, stream>>>(partials, lanes, deviceSums);
    cuda::checkLaunch("laneSumKernel");
    return;
  }
  sc.hostPartials.resize(lanes * 2);
  cuda::check(cudaMemcpyAsync(sc.hostPartials.data(), partials, lanes * 2 * sizeof(float),
                              cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync(feedback norms)");
  syncStream(stream, "error feedback on the GPU");
  // The CPU's order: block after block, lane after lane, into double.
  double in = 0, sent = 0;
  for (size_t l = 0; l < lanes; ++l) {
    in += sc.hostPartials[2 * l];
    sent += sc.hostPartials[2 * l + 1];
  }
  if (inputSq) *inputSq += in;
  if (sentSq) *sentSq += sent;
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
        JobTable<size_t> lanes{};
        for (size_t j = 0; j < grid.y; ++j) lanes.job[j] = t.job[j].blocks * kNormLanes;
        laneSumsKernel<<<1, 1, 0, stream>>>(t.job[0].partials, lanes, grid.y, deviceSums);
        cuda::checkLaunch("laneSumKernel");
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
  launchIndexChecks({{idx, m, count, found, nullptr}}, false, stream);
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
  launchIndexChecks(liveJobs(jobs, count), true, stream);
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

void gpuPrepareThread(GpuStream stream) {
  loadKernelModules();  // first: the scratch below may launch kernels
  (void)scratch();
  prepareSparseThread(stream);
  prepareQuantizeThread();
  prepareLinalgThread(stream);
}

}  // namespace squeeze::device
