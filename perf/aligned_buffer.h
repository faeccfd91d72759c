// AlignedBuffer: the page-aligned heap buffer a perf driver sends from, receives into and keeps
// its expected data in (the sqz-*-perf binaries and the peer drivers in perf/compare/).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace squeeze::perf {

/// A heap buffer for a driver's send, receive or expected data, aligned to pages.
struct AlignedBuffer {
  void* ptr = nullptr;
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(ptr); }
  /// Allocates `bytes` rounded up to whole pages (at least one) and zeroes them, so the pages are
  /// touched now and not in the first timed call. Returns false when out of memory.
  bool allocate(size_t bytes) {
    std::free(ptr);
    size_t rounded = roundedBytes(bytes);
    ptr = std::aligned_alloc(kPage, rounded);
    if (!ptr) return false;
    std::memset(ptr, 0, rounded);
    return true;
  }
  /// The rounded size allocate(bytes) asks for.
  static size_t roundedBytes(size_t bytes) {
    return std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  }
  float* floats() const { return static_cast<float*>(ptr); }

 private:
  static constexpr size_t kPage = 4096;
};

}  // namespace squeeze::perf
