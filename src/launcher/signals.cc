// The signals sqzrun handles, read from a signalfd, and its exit (see signals.h).
#include "signals.h"

#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "base/error.h"

namespace squeeze::launcher {

void SignalReader::start() {
  ::pthread_sigmask(SIG_SETMASK, nullptr, &originalMask_);
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGCHLD);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    // A signal ignored at startup (nohup, a background job of a script) stays ignored, as it
    // does for the ranks, which inherit the disposition.
    struct sigaction old;
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaddset(&handled, sig);
  }
  // Before any thread starts, so the rendezvous thread inherits the mask and the signals stay
  // pending for the signalfd.
  ::pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  int fd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) throw SysError("signalfd()", errno);
  fd_ = Fd(fd);
}

[[noreturn]] void finish(int code, int receivedSignal) {
  std::fflush(nullptr);
  // Died by a signal we forwarded: die by it too, so a calling shell sees what happened
  // (an interactive loop stops on Ctrl-C). The rendezvous thread is detached: no exit().
  if (receivedSignal != 0 && code == 128 + receivedSignal) {
    ::signal(receivedSignal, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, receivedSignal);
    ::pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
    ::raise(receivedSignal);
  }
  ::_exit(code);
}

}  // namespace squeeze::launcher
