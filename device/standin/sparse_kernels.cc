// The stand-in's sparse kernels (the cuda-standin build; device/standin/standin.h): each gpu*
// entry point of device/sparse.h runs its cpu* twin on the stream (kernel_support.h), with
// sparse.cu's scratch, its host waits (the selection's count) and its other launches counted.
#include <cuda_runtime_api.h>

#include "device/sparse.h"
#include "device/standin/kernel_support.h"

namespace squeeze::device {

using namespace standin_kernels;

void SparseScratchFree::operator()(SparseScratch* s) const { delete s; }

SparseScratchPtr makeSparseScratch() { return SparseScratchPtr(new SparseScratch); }

SparseScratch& standin_kernels::sparseScratch(GpuStream stream, SparseScratch* given) {
  if (given) return *given;
  return *perThreadDeviceStream<SparseScratchPtr>(
      stream, [](int) { return std::make_unique<SparseScratchPtr>(makeSparseScratch()); });
}

// ---- sparse.h ------------------------------------------------------------------------------

size_t gpuSelectTopk(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx,
                     GpuStream stream, SparseScratch* given) {
  k = std::min(k, n);
  if (k == 0) return 0;
  // sparse.cu steers its route on the device and never waits: the selection padded with zeros
  // to min(k, n). Past one block's chunk it uses the scratch (its state), and the sampled route
  // its candidates.
  if (n > kOneBlockSelectMax) {
    SparseScratch& sc = sparseScratch(stream, given);
    if (sampled && k < n)
      u32(sc.cand, topkPassCap(n, k, topkFirstRank(n, k, topkSampleSize(n)), topkSampleSize(n)),
          stream);
  }
  enqueue(stream, "gpuSelectTopk", {{"x", x, n}, {"idx", idx, k}},
          [=] { cpuPadSelection(x, n, idx, cpuSelectTopk(x, n, k, sampled, idx), k); });
  // sparse.cu's launches besides (the work above stands for its first): none for a chunk that
  // one block selects (selectBlockKernel).
  if (n <= kOneBlockSelectMax) return k;
  const std::vector<const char*> compact = {"tileCountKernel", "cub::DeviceScan::ExclusiveSum",
                                            "tileWriteKernel"};
  const std::vector<const char*> radix = {"histogramKernel", "pickKernel",      "histogramKernel",
                                          "pickKernel",      "histogramKernel", "pickKernel"};
  if (!sampled || k == n) {  // selectDirect, from selectInitKernel
    if (n > k) launchRest(stream, radix);
    launchRest(stream, compact);
  } else {  // from sampleKernel
    // The pass's threshold is set by selectInitKernel, and where the selection runs by the
    // pass's tileWriteKernel.
    launchRest(stream, {"cub::DeviceRadixSort::SortKeysDescending", "selectInitKernel"});
    launchRest(stream, compact);
    launchRest(stream, radix);
    launchRest(stream, compact);
  }
  return k;
}

size_t gpuSelectAtLeast(const float* x, size_t n, uint32_t minKey, uint32_t* idx, size_t cap,
                        GpuStream stream, SparseScratch* given) {
  // sparse.cu's atLeast: the indices go to scratch, then to idx by a copy.
  SparseScratch& sc = sparseScratch(stream, given);
  cap = std::min(cap, n);
  // The CPU's vector stores need the slack.
  uint32_t* cand = u32(sc.cand, cap + kSelectSlack, stream);
  if (minKey == 0) minKey = 1;
  if (minKey > 0x7fffffffu || n == 0) return 0;
  u32(sc.candAlt, cap, stream);  // the real sort's second buffer
  SparseScratch::Slots* slots = sc.slotsData();
  // As sparse.cu: the hit counter is zeroed, the pass counts into it (past cap: cap + 1 here),
  // and the count comes back to the pinned slot.
  auto* counter = static_cast<uint32_t*>(sc.state.data());
  cuda::check(cudaMemsetAsync(counter, 0, sizeof(uint32_t), stream), "cudaMemsetAsync");
  enqueue(stream, "gpuSelectAtLeast", {{"x", x, n}}, [=] {
    const size_t hits = cpuSelectAtLeast(x, n, minKey, cand, cap);
    *counter = static_cast<uint32_t>(hits == SIZE_MAX ? cap + 1 : hits);
  });
  cuda::check(
      cudaMemcpyAsync(&slots->count, counter, sizeof(uint32_t), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync");
  syncStream(stream, "select pass");
  const size_t kept = slots->count > cap ? SIZE_MAX : slots->count;
  if (kept == SIZE_MAX || kept == 0) return kept;
  if (kept > 1) launchRest(stream, {"cub::DeviceRadixSort::SortKeys"});
  cuda::check(cudaMemcpyAsync(idx, cand, kept * sizeof(uint32_t), cudaMemcpyDefault, stream),
              "cudaMemcpyAsync");
  syncStream(stream, "select copy");
  return kept;
}

void gpuGather(const float* x, const uint32_t* idx, size_t k, float* out, GpuStream stream) {
  if (k == 0) return;
  enqueue(stream, "gpuGather", {{"x", x, k}, {"idx", idx, k}, {"out", out, k}},
          [=] { cpuGather(x, idx, k, out); });
}

void gpuDensify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n,
                GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuDensify", {{"idx", idx, k}, {"vals", vals, k}, {"dst", dst, n}}, [=] {
    if (indicesBelow(idx, k, n)) return cpuDensify(idx, vals, k, dst, n);
    std::fill(dst, dst + n, 0.0f);
    for (size_t j = 0; j < k; ++j)
      if (idx[j] < n && vals[j] != 0.0f) dst[idx[j]] = vals[j];
  });
  if (k > 0) launchRest(stream, {"scatterKernel"});  // after zeroKernel
}

void gpuScatterAdd(float* out, const float* local, size_t n, const uint32_t* idx, const float* vals,
                   size_t k, GpuStream stream) {
  if (n == 0) return;
  if (out != local)
    cuda::check(cudaMemcpyAsync(out, local, n * sizeof(float), cudaMemcpyDefault, stream),
                "cudaMemcpyAsync");
  if (k == 0) return;
  enqueue(stream, "gpuScatterAdd", {{"out", out, n}, {"idx", idx, k}, {"vals", vals, k}}, [=] {
    if (indicesBelow(idx, k, n)) return cpuScatterAdd(out, out, n, idx, vals, k);
    for (size_t j = 0; j < k; ++j)
      if (idx[j] < n && vals[j] != 0.0f) out[idx[j]] += vals[j];
  });
}

void gpuSparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* residual,
                       double* inputSq, double* sentSq, double* deviceSums, GpuStream stream,
                       SparseScratch* given) {
  const bool sums = inputSq || sentSq || deviceSums;
  if (n == 0 || (!residual && !sums)) return;
  const std::initializer_list<Arg> args = {{"x", x, n}, {"idx", idx, k}, {"residual", residual, n}};
  if (!sums) {  // enqueue only, no scratch: as sparse.cu
    enqueue(stream, "gpuSparseFeedback", args,
            [=] { cpuSparseFeedback(x, n, idx, k, residual, nullptr, nullptr); });
    return;
  }
  SparseScratch& sc = sparseScratch(stream, given);
  constexpr size_t kTile = 4096, kSumBlocks = 1024;  // sparse.cu's partial sums, one per block
  sc.sums.reserve(std::clamp<size_t>((n + kTile - 1) / kTile, 1, kSumBlocks) * 2 * sizeof(double),
                  stream);
  SparseScratch::Slots* slots = sc.slotsData();
  if (deviceSums) {
    enqueueAddingSums(stream, "gpuSparseFeedback", args, deviceSums, [=](double* in, double* sent) {
      cpuSparseFeedback(x, n, idx, k, residual, in, sent);
    });
    launchRest(stream, {"feedbackSumKernel"});
    return;
  }
  const bool wantIn = inputSq != nullptr, wantSent = sentSq != nullptr;
  enqueue(stream, "gpuSparseFeedback", args, [=] {
    double in = 0, sent = 0;
    cpuSparseFeedback(x, n, idx, k, residual, wantIn ? &in : nullptr, wantSent ? &sent : nullptr);
    slots->sums[0] = in;
    slots->sums[1] = sent;
  });
  launchRest(stream, {"feedbackSumKernel"});
  syncStream(stream, "sparse feedback");
  if (inputSq) *inputSq += slots->sums[0];
  if (sentSq) *sentSq += slots->sums[1];
}

void gpuRandomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                     uint32_t* idx, GpuStream stream) {
  if (k == 0) return;
  enqueue(stream, "gpuRandomStrata", {{"idx", idx, k}},
          [=] { cpuRandomStrata(seed, call, offset, n, k, idx); });
}

}  // namespace squeeze::device
