// CUDA kernels behind device/linalg.h (PowerSGD's products, Gram-Schmidt, norms).
//
// Products: P = M Q and Q = M^T P are SGEMMs over the full rows of M (row-major n x m is
// column-major m x n with ld m, so P = op_T(M) Q and Q = M P), plus a kernel for the rows past
// count / m (the partial last row), so M is never read past count. cuBLAS: one handle per thread
// and device, bound on each call to the caller's stream and to a workspace of that stream's own
// (cuBLAS picks its internal workspace per stream otherwise, and its bits are only guaranteed
// with one stream active), atomics off (no split-K reductions in a varying order), default math
// (fp32, no TF32).
//
// Everything else reduces in double over fixed trees (per-thread partials over fixed element
// sets, then shuffle-down and one warp), so results depend only on the inputs and the grid,
// which depends only on the sizes: the same bits on every run and on every GPU of a kind.
// gpuLowRankApply uses the CPU's exact order (double sums of exact float products), so it is the
// CPU's bits; the products and Gram-Schmidt are not (fp32 GEMM tiles; classical Gram-Schmidt in
// chunks of columns where the CPU projects one column at a time).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "base/error.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/linalg.h"

namespace squeeze::device {
namespace {

constexpr int kOrthoThreads = 1024;
constexpr int kChunk = 8;         // earlier columns projected out together
constexpr int kSumBlocks = 1024;  // fixed grid bound of gpuSquaredNorm
constexpr uint32_t kFullMask = 0xffffffffu;

void checkBlas(cublasStatus_t rc, const char* what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    raise(ErrorCode::kCuda, what, ": ", cublasGetStatusString(rc), " (cublasStatus ",
          static_cast<int>(rc), ")");
}

// ---- cuBLAS handle and workspaces --------------------------------------------------------------

struct Blas {
  cublasHandle_t handle = nullptr;
  size_t workspaceBytes = 0;
  // One workspace per stream this thread has used (streams are few: the executor's and the
  // callers'), kept for the thread's life since a GEMM may still be running on it; a context's:
  // one, for every stream it follows.
  std::vector<std::pair<cudaStream_t, cuda::DeviceBuffer>> workspaces;
  bool oneWorkspace = false;
  Blas() = default;
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  ~Blas() {
    if (handle) (void)cublasDestroy(handle);
  }
};

struct NormScratch {
  cuda::DeviceBuffer partial;
  cuda::PinnedBuffer result;
  cuda::DeviceBuffer scale;  // gpuClipScale's
};

}  // namespace

struct LinalgScratch {
  Blas blas;
  NormScratch norms;
};

void LinalgScratchFree::operator()(LinalgScratch* s) const { delete s; }

LinalgScratchPtr makeLinalgScratch() {
  LinalgScratchPtr fresh(new LinalgScratch);
  Blas& b = fresh->blas;
  checkBlas(cublasCreate(&b.handle), "cublasCreate");
  checkBlas(cublasSetAtomicsMode(b.handle, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
  checkBlas(cublasSetMathMode(b.handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  int major = 0;
  cuda::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                     cuda::currentDevice()),
              "cudaDeviceGetAttribute(compute capability)");
  // cuBLAS's own default sizes: 32 MiB from Hopper on, 4 MiB before.
  b.workspaceBytes = size_t(major >= 9 ? 32 : 4) << 20;
  b.oneWorkspace = true;
  fresh->norms.partial = cuda::DeviceBuffer(kSumBlocks * sizeof(double));
  fresh->norms.result = cuda::PinnedBuffer(sizeof(double));
  fresh->norms.scale = cuda::DeviceBuffer(sizeof(float));
  return fresh;
}

namespace {

// `given`, or the calling thread's scratch on the current device.
LinalgScratch& linalgScratch(LinalgScratch* given) {
  if (given) return *given;
  return *perThreadDevice<LinalgScratchPtr>([](int) {
    auto fresh = std::make_unique<LinalgScratchPtr>(makeLinalgScratch());
    (*fresh)->blas.oneWorkspace = false;
    return fresh;
  });
}

cublasHandle_t blasOn(cudaStream_t stream, LinalgScratch* given) {
  Blas* b = &linalgScratch(given).blas;
  // cublasSetStream resets the workspace to the library's pool: set ours after it.
  checkBlas(cublasSetStream(b->handle, stream), "cublasSetStream");
  auto it = b->oneWorkspace ? b->workspaces.begin()
                            : std::find_if(b->workspaces.begin(), b->workspaces.end(),
                                           [stream](const auto& w) { return w.first == stream; });
  if (it == b->workspaces.end()) {
    b->workspaces.emplace_back(stream, cuda::DeviceBuffer());
    it = b->workspaces.end() - 1;
    it->second.reserve(b->workspaceBytes, stream);  // stream-ordered: waits for nothing
  }
  checkBlas(cublasSetWorkspace(b->handle, it->second.data(), it->second.size()),
            "cublasSetWorkspace");
  return b->handle;
}

int blasDim(size_t v, const char* what) {
  if (v > size_t(INT_MAX))
    raise(ErrorCode::kInvalidArgument, "low-rank product: ", what, " = ", v,
          " exceeds cuBLAS's int dimensions");
  return static_cast<int>(v);
}

// ---- fixed-tree block sums ----------------------------------------------------------------------

// Sums C doubles over the block (blockDim.x a multiple of 32, at most 1024): shuffle-down within
// each warp, then warp 0 over the warps' sums. Every thread gets the result (through shared
// memory). Every thread of the block must call it.
template <int C>
__device__ void blockSums(double (&v)[C]) {
  __shared__ double warpSums[32][C];
  __shared__ double result[C];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    for (int o = 16; o > 0; o >>= 1) v[c] += __shfl_down_sync(kFullMask, v[c], o);
    if (lane == 0) warpSums[warp][c] = v[c];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      double s = lane < warps ? warpSums[lane][c] : 0.0;
      for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(kFullMask, s, o);
      if (lane == 0) result[c] = s;
    }
  }
  __syncthreads();
#pragma unroll
  for (int c = 0; c < C; ++c) v[c] = result[c];
  __syncthreads();  // result and warpSums are reused by the next call
}

__device__ double blockSum(double v) {
  double a[1] = {v};
  blockSums(a);
  return a[0];
}

// ---- products -----------------------------------------------------------------------------------

// p[j*n + i] for the rows i >= full (the partial last row and any empty rows after it): one block
// per (row, column), a double dot product over the row's present elements.
__global__ void __launch_bounds__(kThreads)
    tailRowsKernel(const float* M, size_t count, size_t n, size_t m, const float* q, size_t full,
                   float* p) {
  const size_t rows = n - full;
  const size_t i = full + blockIdx.x % rows, j = blockIdx.x / rows;
  const size_t len = rowLength(i, count, m);
  double acc = 0;
  for (size_t k = threadIdx.x; k < len; k += kThreads)
    acc += double(M[i * m + k]) * double(q[j * m + k]);
  acc = blockSum(acc);
  if (threadIdx.x == 0) p[j * n + i] = float(acc);
}

// q[j*m + k] (+)= sum over the rows i >= full of M[i*m + k] p[j*n + i], rows in order; the GEMM
// over the full rows wrote q before (accumulate), or there were none (set).
__global__ void tailColumnsKernel(const float* M, size_t count, size_t n, size_t m, const float* p,
                                  size_t r, size_t full, bool accumulate, float* q) {
  for (size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < r * m;
       t += gridDim.x * size_t(blockDim.x)) {
    const size_t j = t / m, k = t % m;
    double acc = accumulate ? double(q[t]) : 0.0;
    for (size_t i = full; i < n; ++i)
      if (k < rowLength(i, count, m)) acc += double(M[i * m + k]) * double(p[j * n + i]);
    q[t] = float(acc);
  }
}

// The CPU's a = sum_j p[j*n + i] q[j*m + k] in double, j ascending: every product of two floats
// is exact in double, so with or without FMA contraction each partial sum is the CPU's.
__global__ void lowRankApplyKernel(const float* p, const float* q, size_t n, size_t m, size_t r,
                                   size_t count, const float* x, float scale, float* out,
                                   float* residual) {
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = gridDim.x * size_t(blockDim.x);
  if (first >= count) return;
  // (i, k) of t, advanced by the stride without a division per element.
  size_t i = first / m, k = first % m;
  const size_t di = stride / m, dk = stride % m;
  for (size_t t = first; t < count; t += stride) {
    double b = 0;
    for (size_t j = 0; j < r; ++j) b += double(p[j * n + i]) * double(q[j * m + k]);
    const float a = float(b);
    if (residual) residual[t] += x[t] - a;
    out[t] = a * scale;
    i += di;
    k += dk;
    if (k >= m) {
      k -= m;
      ++i;
    }
  }
}

// ---- Gram-Schmidt -------------------------------------------------------------------------------

// v -= (projection of v on columns [0, j) of p), in chunks of kChunk columns: the chunk's
// coefficients from one read of v, then one update of v rounded once per element.
__device__ void projectOut(const float* p, size_t n, size_t j, float* v) {
  for (size_t k0 = 0; k0 < j; k0 += kChunk) {
    const int cnt = static_cast<int>(min(size_t(kChunk), j - k0));
    double c[kChunk];
#pragma unroll
    for (int c0 = 0; c0 < kChunk; ++c0) c[c0] = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double vi = v[i];
#pragma unroll
      for (int c0 = 0; c0 < kChunk; ++c0)
        if (c0 < cnt) c[c0] += double(p[(k0 + c0) * n + i]) * vi;
    }
    blockSums(c);
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
      double vi = v[i];
#pragma unroll
      for (int c0 = 0; c0 < kChunk; ++c0)
        if (c0 < cnt) vi -= c[c0] * double(p[(k0 + c0) * n + i]);
      v[i] = float(vi);
    }
    __syncthreads();
  }
}

__device__ double columnNorm(const float* v, size_t n) {
  double s = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += double(v[i]) * v[i];
  return sqrt(blockSum(s));
}

// The index t of least weight sum_{k<j} p[k*n + t]^2, the first one on ties (cpuOrthonormalize's
// rule; the weights are the CPU's bits for the same p).
__device__ size_t leastWeighted(const float* p, size_t n, size_t j) {
  __shared__ double warpW[32];
  __shared__ size_t warpT[32];
  double w = INFINITY;
  size_t t = SIZE_MAX;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    double wi = 0;
    for (size_t k = 0; k < j; ++k) wi += double(p[k * n + i]) * p[k * n + i];
    if (wi < w) {  // i ascends: strict keeps the first
      w = wi;
      t = i;
    }
  }
  auto better = [](double w2, size_t t2, double w1, size_t t1) {
    return w2 < w1 || (w2 == w1 && t2 < t1);
  };
  for (int o = 16; o > 0; o >>= 1) {
    const double w2 = __shfl_down_sync(kFullMask, w, o);
    const size_t t2 = __shfl_down_sync(kFullMask, t, o);
    if (better(w2, t2, w, t)) {
      w = w2;
      t = t2;
    }
  }
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) {
    warpW[warp] = w;
    warpT[warp] = t;
  }
  __syncthreads();
  if (warp == 0) {
    w = lane < warps ? warpW[lane] : INFINITY;
    t = lane < warps ? warpT[lane] : SIZE_MAX;
    for (int o = 16; o > 0; o >>= 1) {
      const double w2 = __shfl_down_sync(kFullMask, w, o);
      const size_t t2 = __shfl_down_sync(kFullMask, t, o);
      if (better(w2, t2, w, t)) {
        w = w2;
        t = t2;
      }
    }
    if (lane == 0) warpT[0] = t;
  }
  __syncthreads();
  t = warpT[0];
  __syncthreads();
  return t;
}

// One block: column after column, projected twice against the earlier ones, replaced when
// degenerate, normalized. Each thread owns the rows i = threadIdx.x + s * blockDim.x of every
// column, so the element updates need no synchronization beyond the sums'.
__global__ void __launch_bounds__(kOrthoThreads)
    orthonormalizeKernel(float* p, size_t n, size_t r) {
  for (size_t j = 0; j < r && j < n; ++j) {
    float* v = p + j * n;
    const double original = columnNorm(v, n);
    projectOut(p, n, j, v);
    projectOut(p, n, j, v);
    double norm = columnNorm(v, n);
    if (degenerateColumn(original, norm)) {
      const size_t best = leastWeighted(p, n, j);
      for (size_t i = threadIdx.x; i < n; i += blockDim.x) v[i] = i == best ? 1.0f : 0.0f;
      __syncthreads();
      projectOut(p, n, j, v);
      projectOut(p, n, j, v);
      norm = columnNorm(v, n);
    }
    const double inv = 1.0 / norm;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) v[i] = float(double(v[i]) * inv);
    __syncthreads();
  }
}

// ---- squared norm -------------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    squareSumKernel(const float* x, size_t n, double* partial) {
  double s = 0;
  for (size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x; i < n;
       i += gridDim.x * size_t(kThreads))
    s += double(x[i]) * x[i];
  s = blockSum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__device__ double partialsSum(const double* partial, unsigned blocks) {
  double s = 0;
  for (unsigned b = threadIdx.x; b < blocks; b += kThreads) s += partial[b];
  return blockSum(s);
}

__global__ void __launch_bounds__(kThreads)
    finalSumKernel(const double* partial, unsigned blocks, double* out, bool add) {
  const double s = partialsSum(partial, blocks);
  if (threadIdx.x == 0) *out = add ? *out + s : s;
}

__global__ void __launch_bounds__(kThreads)
    clipScaleKernel(const double* partial, unsigned blocks, double limit, float* out) {
  const double s = partialsSum(partial, blocks);  // the sum finalSumKernel makes
  if (threadIdx.x == 0) *out = clipScale(s, limit);
}

}  // namespace

void gpuMatMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                     float* p, GpuStream stream, LinalgScratch* scratch) {
  if (n == 0 || r == 0) return;
  const size_t full = m == 0 ? 0 : std::min(n, count / m);
  if (full > 0) {
    const float one = 1.0f, zero = 0.0f;
    checkBlas(cublasSgemm(blasOn(stream, scratch), CUBLAS_OP_T, CUBLAS_OP_N, blasDim(full, "rows"),
                          blasDim(r, "rank"), blasDim(m, "columns"), &one, M, blasDim(m, "m"), q,
                          blasDim(m, "m"), &zero, p, blasDim(n, "n")),
              "cublasSgemm (P = M Q)");
  }
  if (full < n) {
    tailRowsKernel<<<static_cast<unsigned>((n - full) * r), kThreads, 0, stream>>>(M, count, n, m,
                                                                                   q, full, p);
    cuda::checkLaunch("tailRowsKernel");
  }
}

void gpuMatTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                      float* q, GpuStream stream, LinalgScratch* scratch) {
  if (m == 0 || r == 0) return;
  const size_t full = std::min(n, count / m);
  if (full > 0) {
    const float one = 1.0f, zero = 0.0f;
    checkBlas(cublasSgemm(blasOn(stream, scratch), CUBLAS_OP_N, CUBLAS_OP_N, blasDim(m, "columns"),
                          blasDim(r, "rank"), blasDim(full, "rows"), &one, M, blasDim(m, "m"), p,
                          blasDim(n, "n"), &zero, q, blasDim(m, "m")),
              "cublasSgemm (Q = M^T P)");
  }
  if (full < n || full == 0) {
    tailColumnsKernel<<<gridFor(r * m, kThreads, 65535), kThreads, 0, stream>>>(
        M, count, n, m, p, r, full, full > 0, q);
    cuda::checkLaunch("tailColumnsKernel");
  }
}

void gpuLowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r, size_t count,
                     const float* x, float scale, float* out, float* residual, GpuStream stream) {
  if (count == 0 || m == 0) return;
  lowRankApplyKernel<<<gridFor(count, kThreads, 65535), kThreads, 0, stream>>>(
      p, q, n, m, r, count, x, scale, out, residual);
  cuda::checkLaunch("lowRankApplyKernel");
}

void gpuOrthonormalize(float* p, size_t n, size_t r, GpuStream stream) {
  if (n == 0 || r == 0) return;
  orthonormalizeKernel<<<1, kOrthoThreads, 0, stream>>>(p, n, r);
  cuda::checkLaunch("orthonormalizeKernel");
}

namespace {

// x's squared norm's per-block partial sums into the scratch's; their count.
unsigned normPartials(const float* x, size_t n, const NormScratch& sc, cudaStream_t stream) {
  const unsigned blocks = gridFor(n, 16 * kThreads, kSumBlocks);
  squareSumKernel<<<blocks, kThreads, 0, stream>>>(x, n, static_cast<double*>(sc.partial.data()));
  cuda::checkLaunch("squareSumKernel");
  return blocks;
}

// The squared norm of x into *out (add: added to it), enqueued on the stream.
void squaredNormInto(const float* x, size_t n, double* out, bool add, cudaStream_t stream,
                     LinalgScratch* given) {
  NormScratch& sc = linalgScratch(given).norms;
  const unsigned blocks = normPartials(x, n, sc, stream);
  auto* partial = static_cast<double*>(sc.partial.data());
  finalSumKernel<<<1, kThreads, 0, stream>>>(partial, blocks, out, add);
  cuda::checkLaunch("finalSumKernel");
}

}  // namespace

double gpuSquaredNorm(const float* x, size_t n, GpuStream stream, LinalgScratch* scratch) {
  if (n == 0) return 0.0;
  auto* result = static_cast<double*>(linalgScratch(scratch).norms.result.data());
  squaredNormInto(x, n, result, false, stream, scratch);
  syncStream(stream, "squared norm");
  return *result;
}

void gpuAddSquaredNorm(const float* x, size_t n, double* deviceSum, GpuStream stream,
                       LinalgScratch* scratch) {
  if (n == 0) return;
  squaredNormInto(x, n, deviceSum, true, stream, scratch);
}

const float* gpuClipScale(const float* x, size_t n, double limit, GpuStream stream,
                          LinalgScratch* scratch) {
  NormScratch& sc = linalgScratch(scratch).norms;
  auto* out = static_cast<float*>(sc.scale.data());
  const unsigned blocks = normPartials(x, n, sc, stream);
  clipScaleKernel<<<1, kThreads, 0, stream>>>(static_cast<const double*>(sc.partial.data()),
                                               blocks, limit, out);
  cuda::checkLaunch("clipScaleKernel");
  return out;
}

}  // namespace squeeze::device
