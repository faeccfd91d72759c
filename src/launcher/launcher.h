// The launcher proper: sqzrun's run from the resolved program to its exit status. It starts
// the rendezvous root and the ranks, then supervises them until the last one is reaped.
//
// Process model: the ranks share one new process group (led by rank 0), so one killpg()
// reaches every rank and whatever it started, and terminal signals reach sqzrun alone, which
// forwards them exactly once. Each rank also gets PR_SET_PDEATHSIG(SIGTERM), so ranks do not
// outlive a sqzrun that is killed outright.
//
// Event loop: one poll() waits on the signalfd (signals.h), on the ranks' output pipes
// (--tag-output) and on the nearest deadline (--timeout, or the SIGKILL that follows a SIGTERM
// by kGraceMs). Nothing spins. The first rank to fail (or the timeout, or an exec that failed)
// stops the others and gives sqzrun its exit status.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <csignal>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "binding.h"
#include "fd.h"
#include "options.h"
#include "rendezvous_env.h"
#include "signals.h"
#include "tagged_output.h"
#include "transports/tcp/socket.h"

namespace squeeze::launcher {

struct RankProc {
  pid_t pid = -1;
  bool running = false;
};

class Launcher {
 public:
  explicit Launcher(Options opt) : opt_(std::move(opt)) {}

  // Runs everything; returns the exit status for sqzrun.
  int run();
  // After run() threw: SIGKILL whatever was started.
  void killAll() { signalRanks(SIGKILL); }
  int receivedSignal() const { return receivedSignal_; }

 private:
  // Returns false if the exec failed (reported, and exitCode_ set).
  bool spawn(int rank);
  void eventLoop();
  void handleSignals();
  void reapChildren();
  void onRankExit(int rank, int status);
  void stopRanks(const std::string& why);
  void signalRanks(int sig);
  int runningCount() const;

  enum class Stop { kNone, kRankFailed, kTimeout, kCannotExec, kInterrupted };

  Options opt_;
  std::string program_;  // resolved path
  RankEnvironment env_;
  SignalReader signals_;
  rlimit originalNofile_{};
  Fd devNull_;           // ranks' stdin when ours is a terminal
  CoreBinding binding_;  // --bind
  std::vector<RankProc> ranks_;
  std::unordered_map<pid_t, int> rankOfPid_;
  std::vector<OutputStream> streams_;
  pid_t pgid_ = 0;

  Stop stop_ = Stop::kNone;
  int exitCode_ = 0;
  std::optional<Deadline> timeoutAt_;
  std::optional<Deadline> killAt_;
  int receivedSignal_ = 0;  // the last forwarded signal, re-raised at exit if it killed a rank
  int sigintCount_ = 0;
};

}  // namespace squeeze::launcher
