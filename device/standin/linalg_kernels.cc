// The stand-in's linear-algebra kernels (the cuda-standin build; device/standin/standin.h):
// each gpu* entry point of device/linalg.h runs its cpu* twin on the stream (kernel_support.h).
// The products, the low-rank apply and the orthonormalization stand for linalg.cu's cuBLAS
// calls, so their first use on a device loads cuBLAS (standin::useLibrary: an implicit
// synchronization, unless gpuPrepareThread loaded the kernels), as cuBLAS's first use does.
#include <cuda_runtime_api.h>

#include "device/linalg.h"
#include "device/standin/kernel_support.h"
#include "device/standin/standin.h"

namespace squeeze::device {

using namespace standin_kernels;

namespace {

// cuBLAS's first use on the device loads the library, which waits for the whole device.
void loadCublas() { cuda::check(standin::useLibrary("cuBLAS"), "loading cuBLAS"); }

}  // namespace

LinalgScratch::LinalgScratch()
    : handle(4096),
      partial(kSumBlocks * sizeof(double)),
      scale(sizeof(float)),
      result(sizeof(double)) {
  int major = 0;
  cuda::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                     cuda::currentDevice()),
              "cudaDeviceGetAttribute(compute capability)");
  workspaceBytes = size_t(major >= 9 ? 32 : 4) << 20;
}

void LinalgScratchFree::operator()(LinalgScratch* s) const { delete s; }

LinalgScratchPtr makeLinalgScratch() {
  loadCublas();  // as cublasCreate
  return LinalgScratchPtr(new LinalgScratch);
}

LinalgScratch& standin_kernels::linalgScratch(LinalgScratch* given) {
  if (given) return *given;
  return *perThreadDevice<LinalgScratchPtr>([](int) {
    auto fresh = std::make_unique<LinalgScratchPtr>(makeLinalgScratch());
    (*fresh)->oneWorkspace = false;
    return fresh;
  });
}

void standin_kernels::blasGemm(GpuStream stream,
                               std::initializer_list<std::pair<size_t, const char*>> dims,
                               LinalgScratch* given) {
  for (const auto& [v, what] : dims)
    if (v > size_t(INT_MAX))
      raise(ErrorCode::kInvalidArgument, "low-rank product: ", what, " = ", v,
            " exceeds cuBLAS's int dimensions");
  LinalgScratch& b = linalgScratch(given);
  for (const auto& w : b.workspaces)
    if (b.oneWorkspace || w.first == stream) return;
  b.workspaces.emplace_back(stream, cuda::DeviceBuffer());
  b.workspaces.back().second.reserve(b.workspaceBytes, stream);
}

// ---- linalg.h ------------------------------------------------------------------------------

void gpuMatMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                     float* p, GpuStream stream, LinalgScratch* scratch) {
  if (n == 0 || r == 0) return;
  loadCublas();
  const size_t full = m == 0 ? 0 : std::min(n, count / m);
  if (full > 0)
    blasGemm(stream, {{full, "rows"}, {r, "rank"}, {m, "columns"}, {n, "n"}}, scratch);
  enqueue(stream, "gpuMatMulPanels", {{"M", M, count}, {"q", q, m * r}, {"p", p, n * r}},
          [=] { cpuMatMulPanels(M, count, n, m, q, r, p); });
}

void gpuMatTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                      float* q, GpuStream stream, LinalgScratch* scratch) {
  if (m == 0 || r == 0) return;
  loadCublas();
  const size_t full = std::min(n, count / m);
  if (full > 0)
    blasGemm(stream, {{m, "columns"}, {r, "rank"}, {full, "rows"}, {n, "n"}}, scratch);
  enqueue(stream, "gpuMatTMulPanels", {{"M", M, count}, {"p", p, n * r}, {"q", q, m * r}},
          [=] { cpuMatTMulPanels(M, count, n, m, p, r, q); });
}

void gpuLowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r, size_t count,
                     const float* x, float scale, float* out, float* residual, GpuStream stream) {
  if (count == 0 || m == 0) return;
  loadCublas();
  enqueue(stream, "gpuLowRankApply",
          {{"p", p, n * r},
           {"q", q, m * r},
           {"x", x, count},
           {"out", out, count},
           {"residual", residual, count}},
          [=] { cpuLowRankApply(p, q, n, m, r, count, x, scale, out, residual); });
}

void gpuOrthonormalize(float* p, size_t n, size_t r, GpuStream stream) {
  if (n == 0 || r == 0) return;
  loadCublas();
  enqueue(stream, "gpuOrthonormalize", {{"p", p, n * r}}, [=] { cpuOrthonormalize(p, n, r); });
}

double gpuSquaredNorm(const float* x, size_t n, GpuStream stream, LinalgScratch* scratch) {
  if (n == 0) return 0.0;
  auto* result = static_cast<double*>(linalgScratch(scratch).result.data());
  enqueue(stream, "gpuSquaredNorm", {{"x", x, n}}, [=] { *result = cpuSquaredNorm(x, n); });
  launchRest(stream, {"finalSumKernel"});
  syncStream(stream, "squared norm");
  return *result;
}

void gpuAddSquaredNorm(const float* x, size_t n, double* deviceSum, GpuStream stream,
                       LinalgScratch* scratch) {
  if (n == 0) return;
  (void)linalgScratch(scratch);  // its partial sums, as linalg.cu's
  enqueue(stream, "gpuAddSquaredNorm", {{"x", x, n}, {"deviceSum", deviceSum, 1}},
          [=] { *deviceSum += cpuSquaredNorm(x, n); });
  launchRest(stream, {"finalSumKernel"});
}

const float* gpuClipScale(const float* x, size_t n, double limit, GpuStream stream,
                          LinalgScratch* scratch) {
  auto* out = static_cast<float*>(linalgScratch(scratch).scale.data());
  enqueue(stream, "gpuClipScale", {{"x", x, n}, {"out", out, 1}},
          [=] { *out = cpuClipScale(x, n, limit); });
  launchRest(stream, {"clipScaleKernel"});
  return out;
}

}  // namespace squeeze::device
