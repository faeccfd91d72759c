// CallMemory: the memory one rank's executor works in during a call, and the local data movement
// done there. A host call uses ordinary memory, memcpy and the CPU kernels. A call on device
// buffers (CUDA builds) keeps each payload where the connection that carries it can read it:
// device memory for a connection that reads device memory (cuda_ipc), pinned mapped host memory
// for one that does not (tcp, shm: the bounce buffers, which kernels read and write in place
// through unified addressing, so a received payload is combined without a copy to the GPU
// first); its copies and kernels run on the communicator's internal stream.
//
// Buffers are pooled by index and reused across calls; an index stays valid until released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/types.h"
#include "device/hd.h"

namespace squeeze {

enum class Space : uint8_t { kHost, kPinned, kDevice };

class CallMemory {
 public:
  CallMemory();
  ~CallMemory();
  CallMemory(const CallMemory&) = delete;
  CallMemory& operator=(const CallMemory&) = delete;

  // Starts a call: on the host (stream null), or on the GPU that owns `stream` (the
  // communicator's internal stream). Every pooled buffer becomes free.
  void begin(device::GpuStream stream);
  bool onDevice() const { return stream_ != nullptr; }

  // A pooled buffer of at least `bytes` in `space` (kHost for host calls).
  int acquire(size_t bytes, Space space);
  char* data(int index) const;
  Space space(int index) const;
  void release(int index) { free_.push_back(index); }

  // BufferRole::kScratch of a schedule: host memory, or device memory for a device call.
  char* work(size_t bytes);

  // dst = src (bytes): memcpy, or a copy enqueued on the stream (any pointers CUDA knows).
  void copy(void* dst, const void* src, size_t bytes);
  // avg's division in the call's memory (device::cpuDivide, or its GPU twin enqueued).
  void divide(void* buf, size_t n, DataType dtype, int divisor);
  // Waits for what was enqueued (device calls); nothing on the host.
  void synchronize(const char* what);

 private:
  struct Pool;
  std::unique_ptr<Pool> pool_;
  std::vector<int> free_;
  device::GpuStream stream_ = nullptr;
};

}  // namespace squeeze
