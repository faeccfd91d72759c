// sqzrun's own lines on stderr ("sqzrun: ..."), and the plural its messages count ranks with.
#pragma once

#include <unistd.h>

#include <string>

#include "base/strings.h"
#include "fd.h"

namespace squeeze::launcher {

template <class... Args>
void say(const Args&... args) {
  std::string line = strCat("sqzrun: ", args..., "\n");
  writeAll(STDERR_FILENO, line.data(), line.size());
}

// "1 rank", "3 ranks"
inline std::string plural(int n, const char* word) {
  return strCat(n, " ", word, n == 1 ? "" : "s");
}

}  // namespace squeeze::launcher
