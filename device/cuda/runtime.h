// The CUDA runtime as Squeeze uses it: errors turned into Error(kCuda) with a sentence, whether
// a GPU is usable at all (CI has the toolkit but no driver), where a pointer lives, and RAII
// owners for device memory, pinned host memory, streams and events. Host code only; compiled
// when the cuda feature is built (SQZ_HAVE_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.h"

namespace squeeze::cuda {

// Throws Error(kCuda): "<what>: <cudaGetErrorString> (<name>)" when rc is not cudaSuccess.
// Clears the runtime's sticky last error for non-sticky codes so the next call starts clean.
void check(cudaError_t rc, const char* what);

// Checks the launch of the kernel just enqueued (cudaGetLastError).
void checkLaunch(const char* kernel);

// The number of usable GPUs: 0 when no driver, no device or a runtime/driver mismatch (the
// reason is kept for unavailableReason()). Queried once per process.
int deviceCount();
// Why deviceCount() is 0, for skip messages and errors ("" when a GPU is usable).
const std::string& unavailableReason();

// Where a pointer's memory is, as far as a collective cares.
struct PointerInfo {
  bool device = false;  // device or managed memory: kernels and the executor's device path
  int ordinal = -1;     // the device it belongs to (device memory only)
  bool pinned = false;  // host memory CUDA knows (cudaHostAlloc, cudaHostRegister)
};
// Pageable host memory is {false, -1, false}; so is any pointer when no GPU is usable. Never
// throws for a host pointer.
PointerInfo pointerInfo(const void* p);

// Bytes from p to the end of the device allocation holding it (cuMemGetAddressRange), or
// SIZE_MAX when that cannot be told: lets the API refuse a buffer too small for a call.
size_t bytesToAllocationEnd(const void* p);

// A 32-bit word in pinned, mapped host memory (cudaHostAlloc) that the host reads and writes as
// ordinary memory and streams wait on and write (stream memory operations, which the GPU runs
// itself: no CUDA callback thread is held). `device` is the word's device address
// (devicePointer, asked once when the word is made).
struct StreamWord {
  volatile uint32_t* host = nullptr;
  uint64_t device = 0;
};
// The device address of pinned, mapped host memory (cudaHostGetDevicePointer).
uint64_t devicePointer(const volatile void* pinned);
// Whether a word read as `word` has reached `value`, compared as cuStreamWaitValue32's GEQ does
// (the wrapping difference (int32_t)(word - value) >= 0), and the same for a word read now
// (acquire) from host memory.
inline bool reached(uint32_t word, uint32_t value) {
  return static_cast<int32_t>(word - value) >= 0;
}
inline bool reached(const volatile uint32_t* word, uint32_t value) {
  return reached(__atomic_load_n(word, __ATOMIC_ACQUIRE), value);
}
// Whether the driver offers the stream memory operations below (the CUDA 11.7+ entry points).
bool streamWordsAvailable();
// Makes `stream` wait until word >= value as a wrapping difference ((int32_t)(word - value) >= 0),
// as cuStreamWaitValue32's GEQ compares. Returns false, enqueuing nothing, when the driver does
// not offer stream memory operations.
bool streamWaitWord(cudaStream_t stream, const StreamWord& word, uint32_t value);
// Makes `stream` store value into word once the work enqueued on it before has run
// (cuStreamWriteValue32). Returns false, enqueuing nothing, where the driver has no such
// operation.
bool streamWriteWord(cudaStream_t stream, const StreamWord& word, uint32_t value);

// The device a stream belongs to (the current device for the legacy default stream, null).
int streamDevice(cudaStream_t stream);
// Whether `stream` is capturing a CUDA graph (cudaStreamIsCapturing: active or invalidated).
bool streamCapturing(cudaStream_t stream);

// The current device of the calling thread.
int currentDevice();

// Makes `ordinal` current for the calling thread for the scope's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Device memory; `bytes` may be 0 (no allocation). Made with a size, it is cudaMalloc'd (and
// cudaFree'd): for set-up and close only (connection rings, kernel scratch, tests, benchmarks),
// since both may wait for the whole device, which also makes the free safe while a peer's copy
// may still be writing the memory. Grown with
// reserve(bytes, stream), it is stream-ordered (cudaMallocAsync/cudaFreeAsync on `stream`):
// nothing waits for the device, so a call may grow it while a caller's stream is held waiting
// for that call (DESIGN.md, "Memory, streams, threads"); destroyed, it is freed with
// cudaFreeAsync on the legacy default stream, which returns at once (the owner has waited for
// the work that used it).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }
  // Grows to at least `bytes` (contents are not kept), stream-ordered on `stream`: the old
  // memory is freed once the work enqueued on `stream` before this call is done, and the new
  // memory is usable by work enqueued on `stream` from now on.
  void reserve(size_t bytes, cudaStream_t stream);
  // Frees stream-ordered memory once the work enqueued on `stream` before this call is done
  // (cudaFreeAsync there): for memory that work on `stream` may still use. Set-up memory is
  // freed at once.
  void releaseAfter(cudaStream_t stream) noexcept;

 private:
  void release() noexcept;
  void swap(DeviceBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(streamOrdered_, o.streamOrdered_);
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool streamOrdered_ = false;  // cudaMallocAsync'd: freed with cudaFreeAsync
};

// Pinned, mapped host memory (cudaHostAlloc, portable and mapped): the host reads and writes it
// as ordinary memory and kernels on any device read and write it through the same pointer
// (unified addressing). cudaHostAlloc and cudaFreeHost may wait for the whole device, so it is
// made at set-up time, at its final size, never grown during a call, and never freed: a
// destroyed buffer's memory goes back to a process-wide pool that the next one of at most its
// size takes (a progress thread's pinned scratch outlives the thread that made it, while other
// communicators' streams may be held).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept { swap(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  void swap(PinnedBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream of the current device (it does not synchronize with the legacy default
// stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  // Waits for everything enqueued so far; throws Error(kCuda) for a failed kernel or copy.
  void synchronize(const char* what) const;

 private:
  cudaStream_t stream_ = nullptr;
};

// An event; without timing (cheaper to record and wait on) unless kTimed, interprocess when
// kInterprocess (CUDA IPC; never timed).
class Event {
 public:
  enum Kind { kPlain, kInterprocess, kTimed };
  explicit Event(Kind kind = kPlain);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  // True once the work recorded before it has run; throws for a failed kernel.
  bool query() const;

 private:
  cudaEvent_t event_ = nullptr;
};

// Timing events by number, pooled: record() times a point of a stream's work; take() gives the
// seconds between consecutive ones of a list once all have run (else false, and nothing changes;
// nothing waits), and returns them to the pool. A failed kernel throws, as Event::query.
class TimedEvents {
 public:
  uint64_t record(cudaStream_t stream);
  bool take(const uint64_t* ids, size_t n, double* seconds);
  void clear();
  // Makes idle events until `n` are pooled (set-up, where making them is allowed): a pool grows
  // only past n events in flight.
  void reserve(size_t n);

 private:
  std::unordered_map<uint64_t, std::unique_ptr<Event>> held_;
  std::vector<std::unique_ptr<Event>> idle_;
  uint64_t last_ = 0;
};

}  // namespace squeeze::cuda
