// --tag-output: each rank's stdout and stderr come to sqzrun through a pipe, and go out whole
// line by whole line with "[RANK] " in front, so the lines of different ranks never mix.
#pragma once

#include <string>

#include "fd.h"

namespace squeeze::launcher {

// One rank's stdout or stderr under --tag-output: whole lines go out with the tag in front.
struct OutputStream {
  Fd fd;  // the pipe's non-blocking read end; closed at EOF
  int rank;
  int dest;  // STDOUT_FILENO or STDERR_FILENO
  std::string partial;
};

// Reads what the rank wrote and passes its whole lines on. `final`: the ranks are gone; pass on
// all that is there, an unfinished last line too, without waiting for more.
void drainOutput(OutputStream& s, bool final);

}  // namespace squeeze::launcher
