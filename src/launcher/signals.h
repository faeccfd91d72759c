// The signals sqzrun handles: SIGCHLD, SIGINT, SIGTERM and SIGHUP are blocked in every thread
// (before the rendezvous thread starts) and read from a signalfd, which the launcher's one
// poll() waits on. The ranks get the original mask back. At the end, a sqzrun whose ranks died
// by a signal it forwarded dies by that signal too.
#pragma once

#include <signal.h>

#include "fd.h"

namespace squeeze::launcher {

class SignalReader {
 public:
  // Blocks the signals in this thread (and so in the threads it starts later) and opens the
  // signalfd; throws SysError. A signal ignored at startup stays ignored.
  void start();
  // Non-blocking: read signalfd_siginfo records until EAGAIN.
  int fd() const { return fd_.get(); }
  // The mask before start(): what the ranks run with.
  const sigset_t& originalMask() const { return originalMask_; }

 private:
  sigset_t originalMask_{};
  Fd fd_;
};

// Exits with `code`; but when the ranks died by the signal sqzrun forwarded last
// (code == 128 + receivedSignal), dies by it, so a calling shell sees what happened.
[[noreturn]] void finish(int code, int receivedSignal);

}  // namespace squeeze::launcher
