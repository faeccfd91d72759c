// --tag-output: whole lines from a rank's pipe, tagged "[RANK] " (see tagged_output.h).
#include "tagged_output.h"

#include <unistd.h>

#include <cerrno>

#include "base/strings.h"

namespace squeeze::launcher {
namespace {

void emitLines(OutputStream& s, bool final) {
  std::string tag = strCat("[", s.rank, "] ");
  std::string out;
  size_t start = 0;
  for (;;) {
    size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos) break;
    out += tag;
    out.append(s.partial, start, nl + 1 - start);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  // A line with no end yet: hold it, unless it is the last or too long to keep waiting for.
  if (!s.partial.empty() && (final || s.partial.size() >= 64 * 1024)) {
    out += tag + s.partial + "\n";
    s.partial.clear();
  }
  if (!out.empty()) writeAll(s.dest, out.data(), out.size());
}

}  // namespace

void drainOutput(OutputStream& s, bool final) {
  char buf[16384];
  // At most 256 KiB per wakeup (unless final), so one chatty rank cannot starve the signals.
  for (int reads = 0;; ++reads) {
    if (!final && reads == 16) return;
    ssize_t n = ::read(s.fd.get(), buf, sizeof buf);
    if (n > 0) {
      s.partial.append(buf, static_cast<size_t>(n));
      emitLines(s, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (n < 0 && errno != EAGAIN)) {  // EOF
      emitLines(s, true);
      s.fd.reset();
    } else if (final) {  // ranks are gone; a grandchild may keep the pipe open: do not wait
      emitLines(s, true);
    }
    return;
  }
}

}  // namespace squeeze::launcher
