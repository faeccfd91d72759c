// A rank's wait status in words and as an exit code (see exit_status.h).
#include "exit_status.h"

#include <sys/wait.h>

#include <cstring>

#include "base/strings.h"

namespace squeeze::launcher {
namespace {

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? strCat("SIG", abbrev) : strCat("signal ", sig);
}

}  // namespace

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return strCat("exited with status ", WEXITSTATUS(status));
  int sig = WTERMSIG(status);
  return strCat("was killed by ", signalName(sig), WCOREDUMP(status) ? ", core dumped" : "",
                " (status ", 128 + sig, ")");
}

int exitCodeOf(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace squeeze::launcher
