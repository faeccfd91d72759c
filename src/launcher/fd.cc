// sqzrun's pipes and whole writes (see fd.h).
#include "fd.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "base/error.h"

namespace squeeze::launcher {

Pipe makePipe(bool nonblockingRead) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw SysError("pipe2()", errno);
  Pipe p{Fd(fds[0]), Fd(fds[1])};
  if (nonblockingRead) ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return p;
}

void writeAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else {
      return;  // the reader is gone: drop the output, as a rank writing there directly would
    }
  }
}

}  // namespace squeeze::launcher
