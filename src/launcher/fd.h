// sqzrun's file descriptors: an owned fd, the pipes it makes for the ranks (exec reports and
// --tag-output), and writeAll(), which writes every byte or drops them once the reader is gone.
#pragma once

#include <cstddef>

namespace squeeze::launcher {

// An fd closed when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset();

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read, write;
};

// Both ends close-on-exec; throws SysError.
Pipe makePipe(bool nonblockingRead);

// Writes all n bytes, waiting out EAGAIN; drops the rest when the reader is gone.
void writeAll(int fd, const char* data, size_t n);

}  // namespace squeeze::launcher
