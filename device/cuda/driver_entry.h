// Driver API entry points reached through the runtime (cudaGetDriverEntryPointByVersion), so
// libsqueeze never links libcuda: CI machines have the toolkit but no driver, and the build and
// its tests must still run there. Host code of the CUDA backend only.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace squeeze::cuda {

// The driver's `symbol` as it was at CUDA `version` (e.g. 12040 for 12.4), or null when the
// driver has none (too old, or no driver at all).
template <class Fn>
Fn driverEntry(const char* symbol, int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace squeeze::cuda
