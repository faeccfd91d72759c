// The owned file descriptor (see fd.h).
#include "base/fd.h"

#include <unistd.h>

namespace squeeze {

void Fd::reset(int fd) {
  int old = std::exchange(fd_, fd);
  if (old >= 0 && old != fd) ::close(old);  // once: no retry on EINTR (see fd.h)
}

}  // namespace squeeze
