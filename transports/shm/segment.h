// POSIX shared-memory segments as the same-host transports use them (shm's pair rings and
// doorbells, cuda_ipc's control blocks): an owned mapping, a name unlinked unless released, and
// the create (exclusive, mode 0600, pages reserved) and open (size checked against what the peer
// promised) steps, with errors that say what to do. The segment's fd is a base/fd.h Fd.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace squeeze {

constexpr size_t kPageBytes = 4096;
constexpr size_t roundUpToPage(size_t n) { return (n + kPageBytes - 1) / kPageBytes * kPageBytes; }

// "/sqz-<commHash in hex>-": how every segment name of one communicator starts.
std::string segmentPrefix(uint64_t commHash);

// A shared mapping, unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t len) : addr_(addr), len_(len) {}
  Mapping(Mapping&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)), len_(std::exchange(o.len_, 0)) {}
  Mapping& operator=(Mapping&& o) noexcept {
    std::swap(addr_, o.addr_);
    std::swap(len_, o.len_);
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  uint8_t* data() const { return static_cast<uint8_t*>(addr_); }
  size_t size() const { return len_; }

 private:
  void* addr_ = nullptr;
  size_t len_ = 0;
};

// Unlinks a shm name on destruction unless released (or already unlinked).
class NameGuard {
 public:
  explicit NameGuard(std::string name) : name_(std::move(name)) {}
  NameGuard(const NameGuard&) = delete;
  NameGuard& operator=(const NameGuard&) = delete;
  ~NameGuard() { unlink(); }
  void unlink();
  void release() { name_.clear(); }

 private:
  std::string name_;
};

// Creates /dev/shm<name> (exclusively, mode 0600) with `bytes` reserved, and maps it. The name
// stays linked; the caller owns unlinking it (arm a NameGuard right after). Throws SysError.
Mapping createSegment(const std::string& name, size_t bytes);

// Opens and maps peer `peerRank`'s segment `name`: all of it, or its first `mapBytes` when not
// 0. Throws Error(kRemote) if it is smaller than minBytes, SysError when it cannot be opened.
Mapping openSegment(const std::string& name, size_t minBytes, int peerRank, size_t mapBytes = 0);

}  // namespace squeeze
