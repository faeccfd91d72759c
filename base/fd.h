// An owned file descriptor: the one RAII fd class every layer uses (shm segments, sqzrun's pipes
// and signalfd, the transports' eventfds and timers).
#pragma once

#include <utility>

namespace squeeze {

// Closes its fd (when >= 0) on destruction, on reset() and when moved onto. close(2) is never
// retried: on Linux the fd is released even when close fails with EINTR, so a retry could close
// an fd another thread has just been given.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  // Gives up ownership without closing: the caller closes the returned fd.
  int release() { return std::exchange(fd_, -1); }
  // Closes the fd held (if any) and takes `fd` (-1: none).
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace squeeze
