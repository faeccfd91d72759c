// CallMemory (see call_memory.h).
#include "core/call_memory.h"

#include <variant>

#include "base/error.h"
#include "device/memory.h"
#include "device/reduce.h"
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include "device/cuda/runtime.h"
#endif

namespace squeeze {

struct CallMemory::Pool {
#if SQZ_HAVE_CUDA
  using Storage = std::variant<std::vector<char>, cuda::PinnedBuffer, cuda::DeviceBuffer>;
#else
  using Storage = std::variant<std::vector<char>>;
#endif
  struct Entry {
    Space space;
    Storage storage;
    char* data() {
      return std::visit([](auto& s) { return static_cast<char*>(s.data()); }, storage);
    }
    size_t size() const {
      return std::visit([](const auto& s) { return static_cast<size_t>(s.size()); }, storage);
    }
  };
  std::vector<Entry> entries;
  std::vector<char> hostWork;
#if SQZ_HAVE_CUDA
  cuda::DeviceBuffer deviceWork;
#endif
};

CallMemory::CallMemory() : pool_(std::make_unique<Pool>()) {}
CallMemory::~CallMemory() = default;

void CallMemory::begin(device::GpuStream stream) {
#if !SQZ_HAVE_CUDA
  SQZ_ENFORCE(stream == nullptr, "a device call in a build without CUDA");
#endif
  stream_ = stream;
  free_.clear();
  for (size_t i = 0; i < pool_->entries.size(); ++i) free_.push_back(static_cast<int>(i));
}

int CallMemory::acquire(size_t bytes, Space space) {
  SQZ_ENFORCE(onDevice() || space == Space::kHost, "device memory asked for in a host call");
  auto& entries = pool_->entries;
  // Reuse a free buffer of the same space, preferring one already large enough.
  int pick = -1;
  for (size_t k = 0; k < free_.size(); ++k) {
    const Pool::Entry& e = entries[free_[k]];
    if (e.space != space) continue;
    if (pick < 0 || (e.size() >= bytes && entries[free_[pick]].size() < bytes)) pick = int(k);
  }
  int index;
  if (pick >= 0) {
    index = free_[pick];
    free_.erase(free_.begin() + pick);
  } else {
    index = static_cast<int>(entries.size());
    Pool::Entry e{space, std::vector<char>()};
#if SQZ_HAVE_CUDA
    if (space == Space::kPinned) e.storage = cuda::PinnedBuffer();
    if (space == Space::kDevice) e.storage = cuda::DeviceBuffer();
#endif
    entries.push_back(std::move(e));
  }
  Pool::Entry& e = entries[index];
  if (e.size() < bytes) {
    std::visit(
        [bytes](auto& s) {
          if constexpr (std::is_same_v<std::decay_t<decltype(s)>, std::vector<char>>)
            s.resize(bytes);
          else
            s.reserve(bytes);
        },
        e.storage);
  }
  return index;
}

char* CallMemory::data(int index) const { return pool_->entries[index].data(); }

Space CallMemory::space(int index) const { return pool_->entries[index].space; }

char* CallMemory::work(size_t bytes) {
#if SQZ_HAVE_CUDA
  if (onDevice()) {
    pool_->deviceWork.reserve(bytes);
    return static_cast<char*>(pool_->deviceWork.data());
  }
#endif
  if (pool_->hostWork.size() < bytes) pool_->hostWork.resize(bytes);
  return pool_->hostWork.data();
}

void CallMemory::copy(void* dst, const void* src, size_t bytes) {
  if (dst != src) device::copyBytes(dst, src, bytes, stream_);
}

void CallMemory::divide(void* buf, size_t n, DataType dtype, int divisor) {
#if SQZ_HAVE_CUDA
  if (onDevice()) {
    device::gpuDivide(buf, n, dtype, divisor, stream_);
    return;
  }
#endif
  device::cpuDivide(buf, n, dtype, divisor);
}

void CallMemory::synchronize(const char* what) { device::syncStream(stream_, what); }

}  // namespace squeeze
