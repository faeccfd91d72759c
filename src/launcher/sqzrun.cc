// sqzrun: starts N ranks of a program on this host, for development and tests.
//
// sqzrun hosts the rendezvous root itself (RendezvousRoot on 127.0.0.1, serving rounds until
// sqzrun exits) and hands every rank its id in SQZ_UNIQUE_ID, so sqzCommInitFromEnv() in the
// ranks needs nothing else. Across hosts, use mpirun/srun/torchrun instead (see DESIGN.md).
//
// Process model: the ranks share one new process group (led by rank 0), so one killpg()
// reaches every rank and whatever it started, and terminal signals reach sqzrun alone, which
// forwards them exactly once. Each rank also gets PR_SET_PDEATHSIG(SIGTERM), so ranks do not
// outlive a sqzrun that is killed outright.
//
// Event loop: SIGCHLD, SIGINT, SIGTERM and SIGHUP are blocked in every thread (before the
// rendezvous thread starts) and read from a signalfd; one poll() waits on it, on the ranks'
// output pipes (--tag-output) and on the nearest deadline (--timeout, or the SIGKILL that
// follows a SIGTERM by kGraceMs). Nothing spins.
//
// Between fork() and exec the child calls only async-signal-safe functions (the parent has the
// rendezvous thread running): every string, the resolved program path and the CPU mask are
// prepared in the parent.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "base/params.h"
#include "base/strings.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/unique_id.h"
#include "info/topology.h"
#include "squeeze_config.h"
#include "transports/tcp/socket.h"

extern char** environ;

namespace squeeze {
namespace {

constexpr int kMaxRanks = 1024;
constexpr int kGraceMs = 2000;  // SIGTERM, then SIGKILL this much later
constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotExec = 127;

constexpr const char kUsage[] =
    "Usage: sqzrun [options] -n N PROGRAM [ARGS...]\n"
    "\n"
    "Starts N ranks of PROGRAM on this host. sqzrun hosts the rendezvous on 127.0.0.1, so\n"
    "sqzCommInitFromEnv() in every rank joins one communicator. Each rank gets SQZ_UNIQUE_ID,\n"
    "SQZ_RANK, SQZ_WORLD_SIZE, SQZ_LOCAL_RANK, SQZ_LOCAL_SIZE, and SQZ_SOCKET_IFNAME=lo unless\n"
    "it is already set; also torch.distributed's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
    "and MASTER_ADDR=127.0.0.1 with a free MASTER_PORT unless both are set (init_method env://).\n"
    "The rest of the environment is inherited.\n"
    "\n"
    "Options:\n"
    "  -n, --np N          number of ranks, 1 to 1024 (required)\n"
    "  --timeout SECONDS   stop every rank and exit 124 after this long (default: no limit)\n"
    "  --bind              bind rank i to core i mod (number of cores), with hwloc; sqz-info\n"
    "                      lists the cores\n"
    "  --tag-output        prefix every line the ranks print with \"[RANK] \"\n"
    "  -v, --verbose       print the rendezvous address and each rank's pid and binding\n"
    "  -h, --help          print this help and exit\n"
    "\n"
    "SIGINT, SIGTERM and SIGHUP are forwarded to every rank; a second SIGINT kills them. When\n"
    "a rank exits non-zero or is killed, the others get SIGTERM, then SIGKILL 2 s later. The\n"
    "ranks run in their own process group; when stdin is a terminal they read /dev/null.\n"
    "\n"
    "Exit status: 0 when every rank exits 0; else the status of the first rank that failed\n"
    "(128+N for signal N); 124 on --timeout; 127 when PROGRAM cannot be run; 2 on bad\n"
    "usage; 1 when sqzrun itself fails.\n";

// ---------------------------------------------------------------------------------------------
// Options

struct Options {
  int nranks = 0;
  std::optional<double> timeoutSec;
  bool bind = false;
  bool tagOutput = false;
  bool verbose = false;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

struct UsageError {
  std::string message;
};

std::optional<int> parseRankCount(const std::string& s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  return std::stoi(s);
}

// Returns nullopt for --help.
std::optional<Options> parseOptions(int argc, char** argv) {
  Options opt;
  bool haveN = false;
  int i = 1;
  // The value of an option given as "--opt VALUE", "--opt=VALUE" or (short) "-nVALUE".
  auto takeValue = [&](const std::string& arg, const std::string& name) -> std::string {
    if (arg.size() > name.size()) {
      // "--timeout=5" or "-n4"
      return arg[name.size()] == '=' ? arg.substr(name.size() + 1) : arg.substr(name.size());
    }
    if (i + 1 >= argc) throw UsageError{strCat(name, " needs a value")};
    return argv[++i];
  };
  auto matches = [](const std::string& arg, const std::string& name, bool glued) {
    if (arg == name) return true;
    if (arg.rfind(name + "=", 0) == 0) return true;
    return glued && arg.size() > name.size() && arg.rfind(name, 0) == 0;
  };

  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // PROGRAM
    if (arg == "-h" || arg == "--help") return std::nullopt;
    if (matches(arg, "-n", true) || matches(arg, "--np", false)) {
      std::string name = arg.rfind("--np", 0) == 0 ? "--np" : "-n";
      std::string v = takeValue(arg, name);
      auto n = parseRankCount(v);
      if (!n || *n < 1 || *n > kMaxRanks)
        throw UsageError{
            strCat(name, " wants a rank count from 1 to ", kMaxRanks, ", not '", v, "'")};
      opt.nranks = *n;
      haveN = true;
    } else if (matches(arg, "--timeout", false)) {
      std::string v = takeValue(arg, "--timeout");
      char* end = nullptr;
      errno = 0;
      double s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(s) || s <= 0 || s > 1e7)
        throw UsageError{strCat("--timeout wants a positive number of seconds, not '", v, "'")};
      opt.timeoutSec = s;
    } else if (arg == "--bind") {
      opt.bind = true;
    } else if (arg == "--tag-output") {
      opt.tagOutput = true;
    } else if (arg == "-v" || arg == "--verbose") {
      opt.verbose = true;
    } else {
      throw UsageError{strCat("unknown option '", arg, "'")};
    }
  }
  for (; i < argc; ++i) opt.command.emplace_back(argv[i]);
  if (!haveN) throw UsageError{"-n N is required"};
  if (opt.command.empty()) throw UsageError{"no PROGRAM to run"};
  return opt;
}

// ---------------------------------------------------------------------------------------------
// Small helpers

void writeAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else {
      return;  // the reader is gone: drop the output, as a rank writing there directly would
    }
  }
}

template <class... Args>
void say(const Args&... args) {
  std::string line = strCat("sqzrun: ", args..., "\n");
  writeAll(STDERR_FILENO, line.data(), line.size());
}

std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? strCat("SIG", abbrev) : strCat("signal ", sig);
}

// "exited with status 3", "was killed by SIGKILL (status 137)"
std::string describeStatus(int status) {
  if (WIFEXITED(status)) return strCat("exited with status ", WEXITSTATUS(status));
  int sig = WTERMSIG(status);
  return strCat("was killed by ", signalName(sig), WCOREDUMP(status) ? ", core dumped" : "",
                " (status ", 128 + sig, ")");
}

int exitCodeOf(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string plural(int n, const char* word) { return strCat(n, " ", word, n == 1 ? "" : "s"); }

// The file execve() should run for `name`, searched in PATH like execvp(). Returns nullopt and
// sets *error otherwise.
std::optional<std::string> resolveProgram(const std::string& name, std::string* error) {
  auto check = [](const std::string& path) -> int {  // 0 or an errno
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (::access(path.c_str(), X_OK) != 0) return errno;
    return 0;
  };
  if (name.find('/') != std::string::npos) {
    int err = check(name);
    if (err == 0) return name;
    *error = std::strerror(err);
    return std::nullopt;
  }
  const char* pathEnv = std::getenv("PATH");
  std::string path = pathEnv ? pathEnv : "/bin:/usr/bin";
  int firstErr = ENOENT;
  for (const std::string& dir : split(path, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    int err = check(candidate);
    if (err == 0) return candidate;
    if (err != ENOENT && err != ENOTDIR && firstErr == ENOENT) firstErr = err;
  }
  *error = firstErr == ENOENT ? std::string("command not found (searched PATH)")
                              : std::string(std::strerror(firstErr));
  return std::nullopt;
}

// NULL-terminated char* arrays over strings the caller keeps alive.
std::vector<char*> cArray(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// A CPU mask for sched_setaffinity, sized for the largest PU index.
class CpuMask {
 public:
  explicit CpuMask(const std::vector<int>& cpus) {
    int maxCpu = cpus.empty() ? 0 : *std::max_element(cpus.begin(), cpus.end());
    int ncpus = std::max(maxCpu + 1, CPU_SETSIZE);
    set_ = CPU_ALLOC(ncpus);
    size_ = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size_, set_);
    for (int c : cpus) CPU_SET_S(c, size_, set_);
  }
  CpuMask(const CpuMask&) = delete;
  CpuMask& operator=(const CpuMask&) = delete;
  ~CpuMask() { CPU_FREE(set_); }
  const cpu_set_t* get() const { return set_; }
  size_t size() const { return size_; }

 private:
  cpu_set_t* set_;
  size_t size_;
};

// An fd closed when it goes out of scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read, write;
};

Pipe makePipe(bool nonblockingRead) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw SysError("pipe2()", errno);
  Pipe p{Fd(fds[0]), Fd(fds[1])};
  if (nonblockingRead) ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return p;
}

// ---------------------------------------------------------------------------------------------
// The child, between fork() and exec: async-signal-safe calls only.

enum class ChildStage : int32_t { kBind = 1, kExec = 2 };
struct ChildReport {
  ChildStage stage;
  int32_t err;
};

struct ChildPlan {
  const char* path;
  char* const* argv;
  char* const* shArgv;  // /bin/sh PATH ARGS..., for a script without #! (as execvp does)
  char* const* envp;
  pid_t pgid;  // 0: lead a new group
  pid_t parent;
  const sigset_t* mask;
  const rlimit* nofile;
  const CpuMask* cpus;  // nullptr: do not bind
  int stdinFd;          // -1: inherit
  int outFd, errFd;     // -1: inherit
  int reportFd;         // close-on-exec; EOF at the parent means the exec worked
};

void report(int fd, ChildStage stage, int err) {
  ChildReport r{stage, err};
  ssize_t ignored = ::write(fd, &r, sizeof r);
  (void)ignored;
}

[[noreturn]] void runChild(const ChildPlan& p) {
  ::setpgid(0, p.pgid);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != p.parent) ::_exit(kExitCannotExec);  // sqzrun died already
  if (p.cpus && ::sched_setaffinity(0, p.cpus->size(), p.cpus->get()) != 0)
    report(p.reportFd, ChildStage::kBind, errno);  // a warning: it runs unbound
  if (p.stdinFd >= 0) ::dup2(p.stdinFd, STDIN_FILENO);
  if (p.outFd >= 0) ::dup2(p.outFd, STDOUT_FILENO);
  if (p.errFd >= 0) ::dup2(p.errFd, STDERR_FILENO);
  ::setrlimit(RLIMIT_NOFILE, p.nofile);
  ::pthread_sigmask(SIG_SETMASK, p.mask, nullptr);
  ::execve(p.path, p.argv, p.envp);
  if (errno == ENOEXEC) ::execve(p.shArgv[0], p.shArgv, p.envp);
  report(p.reportFd, ChildStage::kExec, errno);
  ::_exit(kExitCannotExec);
}

// ---------------------------------------------------------------------------------------------
// The launcher

// One rank's stdout or stderr under --tag-output: whole lines go out with the tag in front.
struct OutputStream {
  Fd fd;
  int rank;
  int dest;  // STDOUT_FILENO or STDERR_FILENO
  std::string partial;
};

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
  void setUpSignals();
  void planBinding();
  std::vector<std::string> rankEnvironment(int rank) const;
  // Returns false if the exec failed (reported, and exitCode_ set).
  bool spawn(int rank);
  void eventLoop();
  void handleSignals();
  void reapChildren();
  void onRankExit(int rank, int status);
  void stopRanks(const std::string& why);
  void signalRanks(int sig);
  void drainOutput(OutputStream& s, bool final);
  void emitLines(OutputStream& s, bool final);
  int runningCount() const;

  enum class Stop { kNone, kRankFailed, kTimeout, kCannotExec, kInterrupted };

  Options opt_;
  std::string program_;  // resolved path
  std::string uniqueIdHex_;
  std::vector<std::string> torchMaster_;  // MASTER_ADDR/MASTER_PORT, unless the user set both
  sigset_t originalMask_{};
  sigset_t handledSignals_{};
  rlimit originalNofile_{};
  Fd signalFd_;
  Fd devNull_;                                       // ranks' stdin when ours is a terminal
  std::vector<std::unique_ptr<CpuMask>> coreMasks_;  // --bind: one per core
  std::vector<std::string> coreNames_;
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

void Launcher::setUpSignals() {
  ::pthread_sigmask(SIG_SETMASK, nullptr, &originalMask_);
  sigemptyset(&handledSignals_);
  sigaddset(&handledSignals_, SIGCHLD);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    // A signal ignored at startup (nohup, a background job of a script) stays ignored, as it
    // does for the ranks, which inherit the disposition.
    struct sigaction old;
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaddset(&handledSignals_, sig);
  }
  // Before any thread starts, so the rendezvous thread inherits the mask and the signals stay
  // pending for the signalfd.
  ::pthread_sigmask(SIG_BLOCK, &handledSignals_, nullptr);
  int fd = ::signalfd(-1, &handledSignals_, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) throw SysError("signalfd()", errno);
  signalFd_ = Fd(fd);
}

void Launcher::planBinding() {
  if (!opt_.bind) return;
  if (!topologyAvailable()) {
    say("--bind: this sqzrun was built without hwloc; the ranks run unbound");
    return;
  }
  std::string error;
  auto topo = loadTopology(&error);
  if (!topo) {
    say("--bind: cannot read the topology (", error, "); the ranks run unbound");
    return;
  }
  for (const CoreInfo& core : topo->cores) {
    coreMasks_.push_back(std::make_unique<CpuMask>(core.pus));
    coreNames_.push_back(
        strCat("core ", core.logicalIndex, " (PUs ", formatCpuList(core.pus), ")"));
  }
  int ncores = static_cast<int>(coreMasks_.size());
  if (opt_.nranks > ncores)
    say("--bind: ", plural(opt_.nranks, "rank"), " on ", plural(ncores, "core"),
        ": some cores run more than one rank");
}

std::vector<std::string> Launcher::rankEnvironment(int rank) const {
  static constexpr const char* kOwned[] = {
      "SQZ_UNIQUE_ID", "SQZ_RANK",   "SQZ_WORLD_SIZE", "SQZ_LOCAL_RANK",
      "SQZ_LOCAL_SIZE", "RANK",      "WORLD_SIZE",     "LOCAL_RANK",
      "LOCAL_WORLD_SIZE"};
  std::vector<std::string> env;
  bool haveIfname = false;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    std::string_view key = kv.substr(0, kv.find('='));
    if (std::find(std::begin(kOwned), std::end(kOwned), key) != std::end(kOwned)) continue;
    if (!torchMaster_.empty() && (key == "MASTER_ADDR" || key == "MASTER_PORT")) continue;
    if (key == "SQZ_SOCKET_IFNAME") haveIfname = true;
    env.emplace_back(kv);
  }
  env.push_back("SQZ_UNIQUE_ID=" + uniqueIdHex_);
  env.push_back(strCat("SQZ_RANK=", rank));
  env.push_back(strCat("SQZ_WORLD_SIZE=", opt_.nranks));
  env.push_back(strCat("SQZ_LOCAL_RANK=", rank));
  env.push_back(strCat("SQZ_LOCAL_SIZE=", opt_.nranks));
  // torch.distributed's env:// names, so that PyTorch programs run under sqzrun as under torchrun.
  env.push_back(strCat("RANK=", rank));
  env.push_back(strCat("WORLD_SIZE=", opt_.nranks));
  env.push_back(strCat("LOCAL_RANK=", rank));
  env.push_back(strCat("LOCAL_WORLD_SIZE=", opt_.nranks));
  env.insert(env.end(), torchMaster_.begin(), torchMaster_.end());
  if (!haveIfname) env.push_back("SQZ_SOCKET_IFNAME=lo");
  return env;
}

bool Launcher::spawn(int rank) {
  std::vector<std::string> envStrings = rankEnvironment(rank);
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
  const CpuMask* cpus = coreMasks_.empty() ? nullptr : coreMasks_[rank % coreMasks_.size()].get();

  ChildPlan plan{.path = program_.c_str(),
                 .argv = argv.data(),
                 .shArgv = shArgv.data(),
                 .envp = envp.data(),
                 .pgid = pgid_,
                 .parent = ::getpid(),
                 .mask = &originalMask_,
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
      say("warning: cannot bind rank ", rank, " to ", coreNames_[rank % coreNames_.size()], ": ",
          std::strerror(r.err), "; it runs unbound");
    } else {
      say("cannot execute '", opt_.command[0], "' (", program_, "): ", std::strerror(r.err));
      execOk = false;
    }
  }
  if (opt_.verbose && execOk)
    say("rank ", rank, ": pid ", pid,
        cpus ? strCat(", bound to ", coreNames_[rank % coreNames_.size()]) : std::string());
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
  while (::read(signalFd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
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

void Launcher::emitLines(OutputStream& s, bool final) {
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

void Launcher::drainOutput(OutputStream& s, bool final) {
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

void Launcher::eventLoop() {
  std::vector<pollfd> fds;
  while (runningCount() > 0) {
    fds.clear();
    fds.push_back(pollfd{signalFd_.get(), POLLIN, 0});
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

  setUpSignals();
  // The root holds a socket per rank and, with --tag-output, two pipes per rank: take the hard
  // limit (the ranks get the original one back).
  ::getrlimit(RLIMIT_NOFILE, &originalNofile_);
  rlimit raised = originalNofile_;
  raised.rlim_cur = raised.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &raised);
  if (::isatty(STDIN_FILENO)) devNull_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  planBinding();

  std::string addrError;
  auto addr = SockAddr::parse("127.0.0.1:1", &addrError);
  if (!addr) raise(ErrorCode::kInternal, "cannot parse the loopback address: ", addrError);
  addr->setPort(0);
  UniqueIdData id = RendezvousRoot::start(*addr, /*maxRounds=*/0, timeoutMs);
  char raw[UniqueIdData::kBytes];
  id.serialize(raw);
  uniqueIdHex_ = toHex(raw, sizeof raw);
  if (!std::getenv("MASTER_ADDR") || !std::getenv("MASTER_PORT")) {
    // A port the kernel just handed out and released: torch's store on rank 0 binds it next.
    Socket probe = Socket::listenOn(*addr);
    torchMaster_ = {"MASTER_ADDR=127.0.0.1", strCat("MASTER_PORT=", probe.localAddr().port())};
  }
  if (opt_.verbose)
    say("rendezvous root at ", id.root.toString(), "; starting ", plural(opt_.nranks, "rank"),
        " of ", program_);

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

// Makes sure fds 0-2 are open, so no pipe we create lands on one of them.
void ensureStdFds() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF)
      ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
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

}  // namespace
}  // namespace squeeze

int main(int argc, char** argv) {
  using namespace squeeze;
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
