// The CUDA runtime wrappers (see runtime.h).
#include "device/cuda/runtime.h"

#include <cstdint>
#include <map>
#include <mutex>

#include "base/logging.h"
#include "device/cuda/driver_entry.h"

namespace squeeze::cuda {

void check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  // Non-sticky errors stay in the runtime's last-error slot; clear it so they are not reported
  // again by an unrelated later call.
  (void)cudaGetLastError();
  raise(ErrorCode::kCuda, what, ": ", cudaGetErrorString(rc), " (", cudaGetErrorName(rc), ")");
}

void checkLaunch(const char* kernel) {
  cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess)
    raise(ErrorCode::kCuda, "launching kernel ", kernel, ": ", cudaGetErrorString(rc), " (",
          cudaGetErrorName(rc), ")");
}

namespace {

struct Availability {
  int count = 0;
  std::string reason;
};

const Availability& availability() {
  static const Availability a = [] {
    Availability r;
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      r.reason = strCat("no usable GPU: ", cudaGetErrorString(rc), " (", cudaGetErrorName(rc), ")");
      return r;
    }
    if (n == 0) {
      r.reason = "no usable GPU: the CUDA runtime sees no device";
      return r;
    }
    r.count = n;
    SQZ_INFO(kDevice, "CUDA: ", n, " device(s) visible");
    return r;
  }();
  return a;
}

}  // namespace

int deviceCount() { return availability().count; }

const std::string& unavailableReason() { return availability().reason; }

PointerInfo pointerInfo(const void* p) {
  if (!p || deviceCount() == 0) return {};
  cudaPointerAttributes attr{};
  cudaError_t rc = cudaPointerGetAttributes(&attr, p);
  if (rc != cudaSuccess) {  // memory CUDA does not know: ordinary host memory
    (void)cudaGetLastError();
    return {};
  }
  if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)
    return {true, attr.device};
  if (attr.type == cudaMemoryTypeHost) return {false, -1, true};
  return {};
}

namespace {

using MemGetAddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
// cuStreamWaitValue32 and cuStreamWriteValue32 share a signature.
using StreamValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

}  // namespace

size_t bytesToAllocationEnd(const void* p) {
  static const auto range = driverEntry<MemGetAddressRangeFn>("cuMemGetAddressRange", 3020);
  if (!range || !p) return SIZE_MAX;
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto addr = reinterpret_cast<CUdeviceptr>(p);
  if (range(&base, &size, addr) != CUDA_SUCCESS) return SIZE_MAX;
  return base + size - addr;
}

uint64_t devicePointer(const volatile void* pinned) {
  void* devicePtr = nullptr;
  check(cudaHostGetDevicePointer(&devicePtr, const_cast<void*>(pinned), 0),
        "cudaHostGetDevicePointer of a stream word");
  return reinterpret_cast<uint64_t>(devicePtr);
}

namespace {

// One stream memory operation on `word` (fn: cuStreamWaitValue32 or cuStreamWriteValue32, null
// where the driver has none); false where the driver does not offer it.
bool streamWordOp(StreamValue32Fn fn, const char* name, cudaStream_t stream,
                  const StreamWord& word, uint32_t value, unsigned flags) {
  if (!fn) return false;
  CUresult rc = fn(stream, static_cast<CUdeviceptr>(word.device), value, flags);
  if (rc == CUDA_ERROR_NOT_SUPPORTED) return false;
  if (rc != CUDA_SUCCESS)
    raise(ErrorCode::kCuda, name, " on the caller's stream failed (CUresult ", rc, ")");
  return true;
}

}  // namespace

bool streamWordsAvailable() {
  static const bool available =
      driverEntry<StreamValue32Fn>("cuStreamWaitValue32", 11070) != nullptr &&
      driverEntry<StreamValue32Fn>("cuStreamWriteValue32", 11070) != nullptr;
  return available;
}

bool streamWaitWord(cudaStream_t stream, const StreamWord& word, uint32_t value) {
  static const auto wait = driverEntry<StreamValue32Fn>("cuStreamWaitValue32", 11070);
  return streamWordOp(wait, "cuStreamWaitValue32", stream, word, value, CU_STREAM_WAIT_VALUE_GEQ);
}

bool streamWriteWord(cudaStream_t stream, const StreamWord& word, uint32_t value) {
  static const auto write = driverEntry<StreamValue32Fn>("cuStreamWriteValue32", 11070);
  return streamWordOp(write, "cuStreamWriteValue32", stream, word, value,
                      CU_STREAM_WRITE_VALUE_DEFAULT);
}

int streamDevice(cudaStream_t stream) {
  if (!stream) return currentDevice();
  int dev = -1;
  check(cudaStreamGetDevice(stream, &dev), "cudaStreamGetDevice (is the stream valid?)");
  return dev;
}

bool streamCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

int currentDevice() {
  int dev = -1;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  return dev;
}

DeviceGuard::DeviceGuard(int ordinal) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != ordinal) check(cudaSetDevice(ordinal), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

DeviceBuffer::DeviceBuffer(size_t bytes) {
  if (bytes == 0) return;
  check(cudaMalloc(&ptr_, bytes), strCat("cudaMalloc of ", bytes, " bytes").c_str());
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() noexcept {
  if (!ptr_) return;
  // cudaFree waits for the whole device, and so for any copy still writing the memory (a
  // peer's into a connection's ring): set-up memory is freed when a communicator closes.
  (void)(streamOrdered_ ? cudaFreeAsync(ptr_, cudaStreamLegacy) : cudaFree(ptr_));
  (void)cudaGetLastError();
  ptr_ = nullptr;
  bytes_ = 0;
  streamOrdered_ = false;
}

void DeviceBuffer::releaseAfter(cudaStream_t stream) noexcept {
  if (!ptr_ || !streamOrdered_) return release();
  (void)cudaFreeAsync(ptr_, stream);
  (void)cudaGetLastError();
  ptr_ = nullptr;
  bytes_ = 0;
  streamOrdered_ = false;
}

void DeviceBuffer::reserve(size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_) return;
  if (ptr_) {
    if (streamOrdered_) {
      check(cudaFreeAsync(ptr_, stream), "cudaFreeAsync");
      ptr_ = nullptr;
      bytes_ = 0;
    } else {
      release();  // set-up memory is not grown during calls; this is its first growth
    }
  }
  check(cudaMallocAsync(&ptr_, bytes, stream),
        strCat("cudaMallocAsync of ", bytes, " bytes").c_str());
  bytes_ = bytes;
  streamOrdered_ = true;
}

namespace {

// Pinned blocks no PinnedBuffer holds, by size (leaked with the process, as cudaFreeHost would
// wait for the whole device).
struct PinnedPool {
  std::mutex mu;
  std::multimap<size_t, void*> free;
};

PinnedPool& pinnedPool() {
  static PinnedPool* pool = new PinnedPool;
  return *pool;
}

}  // namespace

PinnedBuffer::PinnedBuffer(size_t bytes) {
  if (bytes == 0) return;
  PinnedPool& pool = pinnedPool();
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    auto it = pool.free.lower_bound(bytes);
    if (it != pool.free.end() && it->first <= 2 * bytes) {
      bytes_ = it->first;
      ptr_ = it->second;
      pool.free.erase(it);
      return;
    }
  }
  check(cudaHostAlloc(&ptr_, bytes, cudaHostAllocPortable | cudaHostAllocMapped),
        strCat("cudaHostAlloc of ", bytes, " pinned bytes").c_str());
  bytes_ = bytes;
}

PinnedBuffer::~PinnedBuffer() {
  if (!ptr_) return;
  PinnedPool& pool = pinnedPool();
  std::lock_guard<std::mutex> lock(pool.mu);
  pool.free.emplace(bytes_, ptr_);
}

Stream::Stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }

Stream::~Stream() {
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void Stream::synchronize(const char* what) const { check(cudaStreamSynchronize(stream_), what); }

Event::Event(Kind kind) {
  unsigned flags = kind == kTimed ? cudaEventDefault : cudaEventDisableTiming;
  if (kind == kInterprocess) flags |= cudaEventInterprocess;
  check(cudaEventCreateWithFlags(&event_, flags), "cudaEventCreate");
}

Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) { check(cudaEventRecord(event_, stream), "cudaEventRecord"); }

bool Event::query() const {
  cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  check(rc, "a kernel or copy on the GPU failed");
  return true;
}

uint64_t TimedEvents::record(cudaStream_t stream) {
  std::unique_ptr<Event> e;
  if (idle_.empty()) {
    e = std::make_unique<Event>(Event::kTimed);
  } else {
    e = std::move(idle_.back());
    idle_.pop_back();
  }
  e->record(stream);
  held_.emplace(++last_, std::move(e));
  return last_;
}

bool TimedEvents::take(const uint64_t* ids, size_t n, double* seconds) {
  std::vector<Event*> events(n);
  for (size_t i = 0; i < n; ++i) {
    auto it = held_.find(ids[i]);
    SQZ_ENFORCE(it != held_.end(), "timed event ", ids[i], " is not held");
    if (!it->second->query()) return false;
    events[i] = it->second.get();
  }
  for (size_t i = 0; i + 1 < n; ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events[i]->get(), events[i + 1]->get()),
          "cudaEventElapsedTime");
    seconds[i] = ms * 1e-3;
  }
  for (size_t i = 0; i < n; ++i)
    if (auto it = held_.find(ids[i]); it != held_.end()) {  // (an id named twice)
      idle_.push_back(std::move(it->second));
      held_.erase(it);
    }
  return true;
}

void TimedEvents::reserve(size_t n) {
  while (held_.size() + idle_.size() < n) idle_.push_back(std::make_unique<Event>(Event::kTimed));
}

void TimedEvents::clear() {
  held_.clear();
  idle_.clear();
}

}  // namespace squeeze::cuda
