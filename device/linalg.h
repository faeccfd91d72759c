// Dense linear algebra for low-rank compression (PowerSGD, compress/powersgd.cc): the products
// of a tall matrix with thin factors, and Gram-Schmidt.
//
// Layouts. M is row-major n x m, given as its first `count` elements ((n-1)*m < count <= n*m):
// the missing tail of the last row is zero. A thin factor with r columns is stored column by
// column ("panels"): P (n x r) as p[j*n + i], Q (m x r) as q[j*m + k], so each column is
// contiguous (Gram-Schmidt works on columns, the products stream M once).
//
// Precision: products and dot products accumulate in double and round to float once, so a long
// row or column does not lose the small terms. Results depend only on the inputs (no runtime
// CPU dispatch, fixed summation order): every rank that runs cpuOrthonormalize and
// cpuLowRankApply on the same all-reduced factors gets the same bits.
//
// Every cpu* function has a gpu* twin (built with the cuda feature): the products are cuBLAS
// SGEMMs (float accumulation, so close to the CPU's results but not the same bits), the rest
// are kernels with fixed reduction trees; the GPU's results are deterministic too (the same
// inputs on the same GPU give the same bits), which is what replicas need when they all run on
// GPUs of one kind.
#pragma once

#include <cmath>
#include <cstddef>
#include <memory>

#include "device/hd.h"
#include "squeeze_config.h"

namespace squeeze::device {

// ---- shared math -----------------------------------------------------------------------------

// Elements of row i of an n x m row-major matrix given by its first count elements.
SQZ_HD inline size_t rowLength(size_t i, size_t count, size_t m) {
  const size_t start = i * m;
  return start >= count ? 0 : (count - start < m ? count - start : m);
}

// Gram-Schmidt's test for a column that must be replaced: its norm before projection
// (`original`) is zero or not finite, or what is left after projection (`norm`) is within 1e-4
// of it or not finite.
SQZ_HD inline bool degenerateColumn(double original, double norm) {
  return !(original > 0) || !std::isfinite(original) || !(norm > 1e-4 * original) ||
         !std::isfinite(norm);
}

// ---- kernels ---------------------------------------------------------------------------------

// p = M q: p[j*n + i] = sum_k M[i*m + k] q[j*m + k]. Streams M once, row by row.
void cpuMatMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                     float* p);

// q = M^T p: q[j*m + k] = sum_i M[i*m + k] p[j*n + i]. Streams M once, row by row.
void cpuMatTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                      float* q);

// For t < count, with a = (p q^T)[t] = sum_j p[j*n + t/m] q[j*m + t%m] rounded to float:
//   residual[t] += x[t] - a   (when residual is not null)
//   out[t] = a * scale
// out may alias x.
void cpuLowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r, size_t count,
                     const float* x, float scale, float* out, float* residual);

// Makes the r columns of p (n x r, panels; r <= n) orthonormal by Gram-Schmidt, each column
// projected against the earlier ones twice ("twice is enough"). A column that is zero, not
// finite, or within 1e-4 of its original norm of the earlier columns' span is replaced by the
// unit vector e_t whose index t has the smallest weight in the earlier columns (the first such
// t), orthogonalized the same way: the output always has r orthonormal finite columns.
void cpuOrthonormalize(float* p, size_t n, size_t r);

// sum_i x[i]^2, in double.
double cpuSquaredNorm(const float* x, size_t n);

// A clipping factor (DGC's local clipping): limit / |x| where |x| > limit, else 1, from |x|^2;
// in double (sqrt and division correctly rounded on either side), rounded to float at the end.
SQZ_HD inline float clipScale(double squaredNorm, double limit) {
  const double norm = sqrt(squaredNorm);
  return norm > limit ? static_cast<float>(limit / norm) : 1.0f;
}
// clipScale of cpuSquaredNorm(x, n).
float cpuClipScale(const float* x, size_t n, double limit);

#if SQZ_HAVE_CUDA
// ---- CUDA twins (device/cuda/linalg.cu) --------------------------------------------------------
// Same arguments and layouts as the cpu* function of the same name, plus the stream the work is
// enqueued on; pointers are device memory or pinned, mapped host memory. Only gpuSquaredNorm
// synchronizes (it returns a host value); the others only enqueue. cuBLAS runs with atomics off
// (no split-K reduction order that varies from run to run), with the handle, workspace and norm
// scratch of the `scratch` given: an execution context's own (makeLinalgScratch, made where
// waiting for the device is allowed: cublasCreate allocates; one workspace, since the context's
// work is one sequence whatever its stream), or, where null, the calling thread's (made at first
// use, with a workspace per stream). Throw Error(kCuda) on a CUDA or cuBLAS failure.
// Thread-safe with distinct scratch. `stream` belongs to the current device (CUDA's rule for
// launches; the handle and scratch are the current device's).
struct LinalgScratch;
struct LinalgScratchFree {
  void operator()(LinalgScratch* s) const;
};
using LinalgScratchPtr = std::unique_ptr<LinalgScratch, LinalgScratchFree>;
// For the current device.
LinalgScratchPtr makeLinalgScratch();

// Each an SGEMM over the full rows of M plus a kernel for the partial last row: M is never read
// past count.
void gpuMatMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                     float* p, GpuStream stream, LinalgScratch* scratch = nullptr);
void gpuMatTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                      float* q, GpuStream stream, LinalgScratch* scratch = nullptr);
// a accumulates in double in the CPU's order (products of floats are exact in double), so out
// and residual are the CPU's bits for the same p and q.
void gpuLowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r, size_t count,
                     const float* x, float scale, float* out, float* residual, GpuStream stream);
// One thread block: classical Gram-Schmidt, twice, per column (dot products in double over a
// fixed tree), and cpuOrthonormalize's replacement rule (degenerateColumn, the first index of
// least weight). O(r^2 n) work on one SM: meant for PowerSGD's thin P (n ~ sqrt(count)).
void gpuOrthonormalize(float* p, size_t n, size_t r, GpuStream stream);
double gpuSquaredNorm(const float* x, size_t n, GpuStream stream,
                      LinalgScratch* scratch = nullptr);
// The same sum added to *deviceSum (device memory) on the stream: nothing waits. Its partial
// sums are the scratch's, as gpuSquaredNorm's: calls with the same scratch on other streams wait
// for it.
void gpuAddSquaredNorm(const float* x, size_t n, double* deviceSum, GpuStream stream,
                       LinalgScratch* scratch = nullptr);
// cpuClipScale of x (its norm summed as gpuSquaredNorm's), into the scratch's device float: the
// returned pointer, valid until the scratch's next use. Nothing waits.
const float* gpuClipScale(const float* x, size_t n, double limit, GpuStream stream,
                          LinalgScratch* scratch = nullptr);
#endif

}  // namespace squeeze::device
