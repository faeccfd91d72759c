// The perf drivers' CUDA runtime calls; see gpu.h.
#include "gpu.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "aligned_buffer.h"
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace squeeze::perf {
namespace {

#if SQZ_HAVE_CUDA
// This process's index among the ranks on its host, from the launcher (sqzrun, torchrun, Open
// MPI, MPICH or Slurm), 0 without one.
int localRank() {
  static const char* const kVars[] = {"SQZ_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (const char* var : kVars) {
    const char* v = std::getenv(var);
    if (v && *v) return std::max(0, std::atoi(v));
  }
  return 0;
}

std::string cudaFailure(const char* call, cudaError_t rc) {
  return std::string(call) + ": " + cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) + ")";
}
#endif

}  // namespace

std::string setUpGpu(Gpu* gpu) {
#if SQZ_HAVE_CUDA
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) return "no usable GPU: " + cudaFailure("cudaGetDeviceCount", rc);
  if (count <= 0) return "no usable GPU: cudaGetDeviceCount found none";
  const int ordinal = localRank() % count;
  const std::string which =
      "GPU " + std::to_string(ordinal) + " (of " + std::to_string(count) + ")";
  if ((rc = cudaSetDevice(ordinal)) != cudaSuccess)
    return which + " is not usable: " + cudaFailure("cudaSetDevice", rc);
  cudaDeviceProp prop{};
  if ((rc = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess)
    return which + " is not usable: " + cudaFailure("cudaGetDeviceProperties", rc);
  // Non-blocking, as nccl-tests' streams: no implicit ordering with the legacy default stream.
  cudaStream_t stream = nullptr;
  if ((rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess)
    return which + " is not usable: " + cudaFailure("cudaStreamCreateWithFlags", rc);
  char bus[64] = {};
  if ((rc = cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal)) != cudaSuccess)
    return which + " is not usable: " + cudaFailure("cudaDeviceGetPCIBusId", rc);
  gpu->ordinal = ordinal;
  gpu->name = prop.name;
  gpu->pciBusId = bus;
  gpu->stream = stream;
  return "";
#else
  (void)gpu;
  return "this build has no CUDA (configure it with -Dcuda=enabled where the CUDA toolkit is "
         "installed)";
#endif
}
DeviceBuffer::~DeviceBuffer() {
#if SQZ_HAVE_CUDA
  if (ptr) cudaFree(ptr);
#endif
}

std::string DeviceBuffer::allocate(size_t bytes) {
#if SQZ_HAVE_CUDA
  const size_t rounded = AlignedBuffer::roundedBytes(bytes);
  cudaError_t rc = cudaMalloc(&ptr, rounded);
  if (rc != cudaSuccess) {
    ptr = nullptr;
    return cudaFailure("cudaMalloc", rc);
  }
  rc = cudaMemset(ptr, 0, rounded);
  if (rc != cudaSuccess) return cudaFailure("cudaMemset", rc);
  // The memset returns before it has run, on the legacy stream, which a non-blocking stream's
  // later calls would not wait for.
  rc = cudaStreamSynchronize(cudaStreamLegacy);
  return rc == cudaSuccess ? "" : cudaFailure("cudaStreamSynchronize after cudaMemset", rc);
#else
  (void)bytes;
  return "no CUDA in this build";
#endif
}

std::string gpuCopyBandwidth(void* stream, size_t bytes, double* gbps) {
#if SQZ_HAVE_CUDA
  *gbps = 0;
  auto s = static_cast<cudaStream_t>(stream);
  DeviceBuffer src, dst;
  std::string why = src.allocate(bytes);
  if (why.empty()) why = dst.allocate(bytes);
  if (!why.empty()) return why;
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaError_t rc = cudaEventCreate(&start);
  if (rc == cudaSuccess) rc = cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < 6 && rc == cudaSuccess; ++i) {  // the first one untimed
    float t = 0;
    if ((rc = cudaEventRecord(start, s)) != cudaSuccess) break;
    if ((rc = cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDefault, s)) != cudaSuccess) break;
    if ((rc = cudaEventRecord(stop, s)) != cudaSuccess) break;
    if ((rc = cudaEventSynchronize(stop)) != cudaSuccess) break;
    if ((rc = cudaEventElapsedTime(&t, start, stop)) != cudaSuccess) break;
    if (i > 0) ms.push_back(t);
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (rc != cudaSuccess) return cudaFailure("timing a device copy", rc);
  std::sort(ms.begin(), ms.end());
  const double sec = ms[ms.size() / 2] * 1e-3;
  *gbps = sec > 0 ? 2.0 * static_cast<double>(bytes) / 1e9 / sec : 0.0;
  return "";
#else
  (void)stream, (void)bytes, (void)gbps;
  return "no CUDA in this build";
#endif
}

std::string gpuCopy(void* dst, const void* src, size_t bytes, void* stream) {
#if SQZ_HAVE_CUDA
  if (bytes == 0) return "";
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
  if (rc != cudaSuccess) return cudaFailure("cudaMemcpyAsync", rc);
  rc = cudaStreamSynchronize(s);
  return rc == cudaSuccess ? "" : cudaFailure("cudaStreamSynchronize after a copy", rc);
#else
  (void)dst, (void)src, (void)bytes, (void)stream;
  return "no CUDA in this build";
#endif
}

std::string gpuSync(void* stream) {
#if SQZ_HAVE_CUDA
  cudaError_t rc = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (rc != cudaSuccess) return cudaFailure("cudaStreamSynchronize", rc);
  rc = cudaStreamSynchronize(cudaStreamLegacy);
  return rc == cudaSuccess ? "" : cudaFailure("cudaStreamSynchronize(cudaStreamLegacy)", rc);
#else
  (void)stream;
  return "no CUDA in this build";
#endif
}

}  // namespace squeeze::perf
