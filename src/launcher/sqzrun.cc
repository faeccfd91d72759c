// sqzrun: starts N ranks of a program on this host, for development and tests.
//
// sqzrun hosts the rendezvous root itself (RendezvousRoot on 127.0.0.1, serving rounds until
// sqzrun exits) and hands every rank its id in SQZ_UNIQUE_ID, so sqzCommInitFromEnv() in the
// ranks needs nothing else. Across hosts, use mpirun/srun/torchrun instead (see DESIGN.md).
//
// This file is main(): the command line, then the launcher, then the exit. The parts:
//   options.h         the command line and the help text
//   launcher.h        starting the ranks and supervising them: process model, event loop
//   spawn.h           one rank's fork and exec (the child's async-signal-safe steps)
//   rendezvous_env.h  the rendezvous root and each rank's environment
//   binding.h         --bind: a core per rank, from hwloc
//   tagged_output.h   --tag-output: the ranks' lines, tagged "[RANK] "
//   signals.h         the signals sqzrun handles (a signalfd), and dying by a forwarded one
//   exit_status.h     sqzrun's exit statuses and a rank's wait status in words
//   fd.h, say.h       owned fds and pipes; sqzrun's own lines on stderr
#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <optional>

#include "exit_status.h"
#include "launcher.h"
#include "options.h"
#include "say.h"
#include "signals.h"

namespace squeeze::launcher {
namespace {

// Makes sure fds 0-2 are open, so no pipe we create lands on one of them.
void ensureStdFds() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF)
      ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
}

}  // namespace
}  // namespace squeeze::launcher

int main(int argc, char** argv) {
  using namespace squeeze::launcher;
  ensureStdFds();
  std::optional<Options> opt;
  try {
    opt = parseOptions(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "sqzrun: %s\n\n%s", e.message.c_str(), kUsage);
    return kExitUsage;
  }
  if (!opt) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Launcher launcher(std::move(*opt));
  int code;
  try {
    code = launcher.run();
  } catch (const std::exception& e) {
    say(e.what());
    launcher.killAll();
    code = 1;
  }
  finish(code, launcher.receivedSignal());
}
