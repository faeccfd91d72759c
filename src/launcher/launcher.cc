// The launcher: starting the ranks and supervising them (see launcher.h).
#include "launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <memory>

#include "base/error.h"
#include "base/params.h"
#include "base/strings.h"
#include "exit_status.h"
#include "say.h"
#include "spawn.h"

namespace squeeze::launcher {
namespace {

constexpr int kGraceMs = 2000;  // SIGTERM, then SIGKILL this much later

}  // namespace

bool Launcher::spawn(int rank) {
  std::vector<std::string> envStrings = env_.forRank(rank, opt_.nranks);
  std::vector<std::string> argStrings = opt_.command;
  std::vector<std::string> shStrings{"/bin/sh", program_};
  shStrings.insert(shStrings.end(), opt_.command.begin() + 1, opt_.command.end());
  std::vector<char*> envp = cArray(envStrings), argv = cArray(argStrings),
                     shArgv = cArray(shStrings);

  Pipe reportPipe = makePipe(false);
  Pipe out, err;
  if (opt_.tagOutput) {
    out = makePipe(true);
    err = makePipe(true);
  }
  const CpuMask* cpus = binding_.maskFor(rank);

  ChildPlan plan{.path = program_.c_str(),
                 .argv = argv.data(),
                 .shArgv = shArgv.data(),
                 .envp = envp.data(),
                 .pgid = pgid_,
                 .parent = ::getpid(),
                 .mask = &signals_.originalMask(),
                 .nofile = &originalNofile_,
                 .cpus = cpus,
                 .stdinFd = devNull_.get(),
                 .outFd = out.write.get(),
                 .errFd = err.write.get(),
                 .reportFd = reportPipe.write.get()};
  pid_t pid = ::fork();
  if (pid < 0) throw SysError(strCat("fork() for rank ", rank), errno);
  if (pid == 0) runChild(plan);

  ::setpgid(pid, pgid_);  // also here, so the group exists before we signal it (EACCES after exec)
  if (pgid_ == 0) pgid_ = pid;
  ranks_[rank].pid = pid;
  ranks_[rank].running = true;
  rankOfPid_[pid] = rank;
  if (opt_.tagOutput) {
    streams_.push_back(OutputStream{std::move(out.read), rank, STDOUT_FILENO, {}});
    streams_.push_back(OutputStream{std::move(err.read), rank, STDERR_FILENO, {}});
  }

  // Wait for the exec (EOF) or the child's reports.
  reportPipe.write.reset();
  bool execOk = true;
  for (;;) {
    ChildReport r{};
    ssize_t n = ::read(reportPipe.read.get(), &r, sizeof r);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof r)) break;  // EOF: exec'd
    if (r.stage == ChildStage::kBind) {
      say("warning: cannot bind rank ", rank, " to ", binding_.nameFor(rank), ": ",
          std::strerror(r.err), "; it runs unbound");
    } else {
      say("cannot execute '", opt_.command[0], "' (", program_, "): ", std::strerror(r.err));
      execOk = false;
    }
  }
  if (opt_.verbose && execOk)
    say("rank ", rank, ": pid ", pid,
        cpus ? strCat(", bound to ", binding_.nameFor(rank)) : std::string());
  return execOk;
}

int Launcher::runningCount() const {
  return static_cast<int>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const RankProc& r) { return r.running; }));
}

void Launcher::signalRanks(int sig) {
  if (pgid_ > 0) ::killpg(pgid_, sig);
  // A rank that left the group (setsid) is still ours to signal. Unreaped pids are not reused.
  for (const RankProc& r : ranks_)
    if (r.running && ::getpgid(r.pid) != pgid_) ::kill(r.pid, sig);
}

void Launcher::stopRanks(const std::string& why) {
  int n = runningCount();
  if (n == 0) return;
  if (!why.empty()) say(why);
  signalRanks(SIGTERM);
  killAt_ = deadlineAfterMs(kGraceMs);
}

void Launcher::onRankExit(int rank, int status) {
  RankProc& r = ranks_[rank];
  r.running = false;
  if (opt_.verbose) say("rank ", rank, " (pid ", r.pid, ") ", describeStatus(status));
  if (exitCodeOf(status) == 0 || stop_ != Stop::kNone) return;
  stop_ = Stop::kRankFailed;
  exitCode_ = exitCodeOf(status);
  int others = runningCount();
  std::string line = strCat("rank ", rank, " (pid ", r.pid, ") ", describeStatus(status));
  if (others == 0) {
    say(line);
  } else {
    stopRanks(strCat(line, "; stopping the other ",
                     others == 1 ? std::string("rank") : plural(others, "rank")));
  }
}

void Launcher::reapChildren() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    auto it = rankOfPid_.find(pid);
    if (it != rankOfPid_.end()) onRankExit(it->second, status);
  }
}

void Launcher::handleSignals() {
  signalfd_siginfo info;
  while (::read(signals_.fd(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reapChildren() runs after every wakeup
    receivedSignal_ = sig;
    if (sig == SIGINT && ++sigintCount_ >= 2) {
      say("second SIGINT: killing ", plural(runningCount(), "rank"));
      signalRanks(SIGKILL);
      if (stop_ == Stop::kNone) {
        stop_ = Stop::kInterrupted;  // the SIGKILLs that follow are ours: not reported
        exitCode_ = 128 + SIGINT;    // and sqzrun dies by SIGINT (finish())
      }
      continue;
    }
    signalRanks(sig);
  }
}

void Launcher::eventLoop() {
  std::vector<pollfd> fds;
  while (runningCount() > 0) {
    fds.clear();
    fds.push_back(pollfd{signals_.fd(), POLLIN, 0});
    std::vector<OutputStream*> polled;
    for (OutputStream& s : streams_) {
      if (s.fd.get() < 0) continue;
      fds.push_back(pollfd{s.fd.get(), POLLIN, 0});
      polled.push_back(&s);
    }
    int waitMs = -1;
    for (const auto& d : {timeoutAt_, killAt_}) {
      if (!d) continue;
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*d - Clock::now()).count();
      int ms = static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
      waitMs = waitMs < 0 ? ms : std::min(waitMs, ms);
    }
    int rc = ::poll(fds.data(), fds.size(), waitMs);
    if (rc < 0 && errno != EINTR) throw SysError("poll()", errno);

    if (rc > 0) {
      for (size_t i = 0; i < polled.size(); ++i)
        if (fds[i + 1].revents) drainOutput(*polled[i], false);
      if (fds[0].revents) handleSignals();
    }
    reapChildren();

    Deadline now = Clock::now();
    if (timeoutAt_ && now >= *timeoutAt_) {
      timeoutAt_.reset();
      if (stop_ == Stop::kNone) {
        stop_ = Stop::kTimeout;
        exitCode_ = kExitTimeout;
        stopRanks(strCat("--timeout ", *opt_.timeoutSec, " s expired; stopping ",
                         plural(runningCount(), "rank")));
      }
    }
    if (killAt_ && now >= *killAt_) {
      killAt_.reset();
      int n = runningCount();
      if (n > 0) {
        say(plural(n, "rank"), n == 1 ? " is" : " are", " still running ", kGraceMs / 1000,
            " s after SIGTERM; sending SIGKILL");
        signalRanks(SIGKILL);
      }
    }
  }
  for (OutputStream& s : streams_)
    if (s.fd.get() >= 0) drainOutput(s, true);
}

int Launcher::run() {
  std::string error;
  auto path = resolveProgram(opt_.command[0], &error);
  if (!path) {
    say("cannot execute '", opt_.command[0], "': ", error);
    return kExitCannotExec;
  }
  program_ = *path;
  Params params = loadParams();  // throws naming a malformed SQZ_* variable
  int timeoutMs = static_cast<int>(std::clamp<int64_t>(params.timeoutMs, 1, INT_MAX));

  signals_.start();
  // The root holds a socket per rank and, with --tag-output, two pipes per rank: take the hard
  // limit (the ranks get the original one back).
  ::getrlimit(RLIMIT_NOFILE, &originalNofile_);
  rlimit raised = originalNofile_;
  raised.rlim_cur = raised.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &raised);
  if (::isatty(STDIN_FILENO)) devNull_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (opt_.bind) binding_ = planBinding(opt_.nranks);

  env_ = startRendezvous(timeoutMs);
  if (opt_.verbose)
    say("rendezvous root at ", env_.rootAddress, "; starting ", plural(opt_.nranks, "rank"), " of ",
        program_);

  if (opt_.timeoutSec)
    timeoutAt_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(*opt_.timeoutSec));
  ranks_.resize(static_cast<size_t>(opt_.nranks));
  for (int r = 0; r < opt_.nranks; ++r) {
    if (!spawn(r)) {
      stop_ = Stop::kCannotExec;
      exitCode_ = kExitCannotExec;
      stopRanks(r > 0 ? strCat("stopping the ", plural(r, "rank"), " already started")
                      : std::string());
      break;
    }
  }
  eventLoop();
  if (stop_ == Stop::kNone) return 0;
  return exitCode_;
}

}  // namespace squeeze::launcher
