// The device variant's CUDA calls (see device.h).
#include "device.h"

#include "protocol.h"
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace squeeze::fault {

#if SQZ_HAVE_CUDA
namespace {

std::string cudaFailure(const char* call, cudaError_t rc) {
  return std::string(call) + ": " + cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) + ")";
}

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

std::string deviceUnavailable() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) return "no usable GPU: " + cudaFailure("cudaGetDeviceCount", rc);
  if (count <= 0) return "no usable GPU: cudaGetDeviceCount found none";
  return "";
}

DeviceBuffers::~DeviceBuffers() {
  if (stream) cudaStreamDestroy(asStream(stream));
  if (send) cudaFree(send);
  if (recv) cudaFree(recv);
}

std::string DeviceBuffers::setUp() {
  cudaError_t rc = cudaSetDevice(0);
  if (rc != cudaSuccess) return cudaFailure("cudaSetDevice(0)", rc);
  if ((rc = cudaMalloc(&send, kCount * sizeof(float))) != cudaSuccess) {
    send = nullptr;
    return cudaFailure("cudaMalloc", rc);
  }
  if ((rc = cudaMalloc(&recv, kCount * sizeof(float))) != cudaSuccess) {
    recv = nullptr;
    return cudaFailure("cudaMalloc", rc);
  }
  cudaStream_t s = nullptr;
  if ((rc = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
    return cudaFailure("cudaStreamCreateWithFlags", rc);
  stream = s;
  return "";
}

std::string DeviceBuffers::upload(const std::vector<float>& in) {
  cudaError_t rc = cudaMemcpyAsync(send, in.data(), kCount * sizeof(float), cudaMemcpyHostToDevice,
                                   asStream(stream));
  if (rc != cudaSuccess) return cudaFailure("cudaMemcpyAsync (upload)", rc);
  rc = cudaMemsetAsync(recv, 0xff, kCount * sizeof(float), asStream(stream));
  return rc == cudaSuccess ? "" : cudaFailure("cudaMemsetAsync", rc);
}

std::string DeviceBuffers::sync() {
  cudaError_t rc = cudaStreamSynchronize(asStream(stream));
  return rc == cudaSuccess ? "" : cudaFailure("cudaStreamSynchronize", rc);
}

std::string DeviceBuffers::download(std::vector<float>& out) {
  cudaError_t rc = cudaMemcpy(out.data(), recv, kCount * sizeof(float), cudaMemcpyDeviceToHost);
  return rc == cudaSuccess ? "" : cudaFailure("cudaMemcpy (download)", rc);
}

#else  // !SQZ_HAVE_CUDA

std::string deviceUnavailable() {
  return "this build has no CUDA (configure it with -Dcuda=enabled where the CUDA toolkit is, or "
         "-Dcuda-standin=true)";
}

DeviceBuffers::~DeviceBuffers() = default;
std::string DeviceBuffers::setUp() { return deviceUnavailable(); }
std::string DeviceBuffers::upload(const std::vector<float>&) { return deviceUnavailable(); }
std::string DeviceBuffers::sync() { return deviceUnavailable(); }
std::string DeviceBuffers::download(std::vector<float>&) { return deviceUnavailable(); }

#endif  // SQZ_HAVE_CUDA

}  // namespace squeeze::fault
