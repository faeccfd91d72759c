// -d cuda: every CUDA runtime call of the sqz-*-perf binaries (the library's own calls aside):
// picking and setting up the GPU, its stream, device buffers, copies and synchronization. Each
// returns "" on success, else what failed: "<call>: <CUDA's message> (<error name>)". Without
// CUDA in the build only setUpGpu is reached, and it says so.
#pragma once

#include <cstddef>
#include <string>

namespace squeeze::perf {

/// The GPU of a -d cuda run.
struct Gpu {
  int ordinal = -1;  // < 0: host memory (-d host)
  std::string name;
  std::string pciBusId;    // which GPU this is, whatever CUDA_VISIBLE_DEVICES numbers it
  void* stream = nullptr;  // the cudaStream_t the calls are enqueued on
};

/// Makes GPU localRank() % count current, so that the communicator created next takes it, and
/// creates the stream. Returns "", or why no GPU can be used.
std::string setUpGpu(Gpu* gpu);

/// Device memory, zeroed (so that no timed call is the first to touch it), rounded up like the
/// host buffers so that a zero-byte buffer still has an address.
struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  std::string allocate(size_t bytes);
};

/// Copies bytes between host and device memory on `stream` and waits for the copy.
std::string gpuCopy(void* dst, const void* src, size_t bytes, void* stream);

/// The device's copy bandwidth: a cudaMemcpyAsync of `bytes` from device to device memory on
/// `stream`, bytes read + written over the median time of 5 (cudaEvents), in GB/s.
std::string gpuCopyBandwidth(void* stream, size_t bytes, double* gbps);

/// Waits for everything enqueued on `stream`, and on the legacy default stream, where the calls
/// of a PerfColl that passes a null stream run.
std::string gpuSync(void* stream);

}  // namespace squeeze::perf
