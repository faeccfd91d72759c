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

// ---- linalg.h ------------------------------------------------------------------------------

void gpuMatMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                     float* p, GpuStream stream) {
  if (n == 0 || r == 0) return;
  loadCublas();
  const size_t full = m == 0 ? 0 : std::min(n, count / m);
  if (full > 0) blasGemm(stream, {{full, "rows"}, {r, "rank"}, {m, "columns"}, {n, "n"}});
  enqueue(stream, "gpuMatMulPanels", {{"M", M, count}, {"q", q, m * r}, {"p", p, n * r}},
          [=] { cpuMatMulPanels(M, count, n, m, q, r, p); });
}

void gpuMatTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                      float* q, GpuStream stream) {
  if (m == 0 || r == 0) return;
  loadCublas();
  const size_t full = std::min(n, count / m);
  if (full > 0) blasGemm(stream, {{m, "columns"}, {r, "rank"}, {full, "rows"}, {n, "n"}});
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

double gpuSquaredNorm(const float* x, size_t n, GpuStream stream) {
  if (n == 0) return 0.0;
  LinalgNorm& sc = scratchOf<LinalgNorm>();
  auto* result = static_cast<double*>(sc.result.data());
  enqueue(stream, "gpuSquaredNorm", {{"x", x, n}}, [=] { *result = cpuSquaredNorm(x, n); });
  launchRest(stream, {"finalSumKernel"});
  syncStream(stream, "squared norm");
  return *result;
}

void gpuAddSquaredNorm(const float* x, size_t n, double* deviceSum, GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuAddSquaredNorm", {{"x", x, n}, {"deviceSum", deviceSum, 1}},
          [=] { *deviceSum += cpuSquaredNorm(x, n); });
  launchRest(stream, {"finalSumKernel"});
}

}  // namespace squeeze::device
