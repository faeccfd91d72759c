// sqzrun's file descriptors: the pipes it makes for the ranks (exec reports and --tag-output),
// held in base/fd.h's owned Fd, and writeAll(), which writes every byte or drops them once the
// reader is gone.
#pragma once

#include <cstddef>

#include "base/fd.h"

namespace squeeze::launcher {

struct Pipe {
  Fd read, write;
};

// Both ends close-on-exec; throws SysError.
Pipe makePipe(bool nonblockingRead);

// Writes all n bytes, waiting out EAGAIN; drops the rest when the reader is gone.
void writeAll(int fd, const char* data, size_t n);

}  // namespace squeeze::launcher
