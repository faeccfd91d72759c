// sqz-fault-harness: fault-injection tests of the promise "a dead or silent peer is an error on
// every other rank within the timeout, never a hang; sqzCommAbort unblocks a call in flight"
// (DESIGN.md, Errors). One program is both the harness and the ranks it starts.
//
// Cases (the arguments):
//   kill tcp|shm N   N repetitions: 4 ranks loop checked 8 MiB float all-reduces; one random rank
//                    gets SIGKILL at a random moment; every survivor's call must fail
//                    (sqzRemoteError or sqzTimeout) within SQZ_TIMEOUT_MS (5000) + 2 s.
//   stop tcp|shm N   as kill, with SIGSTOP and SQZ_TIMEOUT_MS=3000: survivors fail (sqzTimeout,
//                    or sqzRemoteError when a neighbour's timeout reaches them first) no sooner
//                    than 95% of the timeout and within timeout + 10%; a timeout's message names
//                    the operation, its sequence number and a peer waited on.
//   abort tcp|shm    rank 0 blocks in an all-reduce nobody joins and another thread aborts the
//                    communicator 300 ms later: the call must return within 1 s of the abort, the
//                    process's fds, threads and /dev/shm/sqz-* segments must be back to what they
//                    were before the communicator, and a new communicator of the same 4 processes
//                    must produce a bit-exact all-reduce.
//
// How: the harness hosts the rendezvous root in-process (sqzGetUniqueId), then fork+execs itself
// 4 times as `rank MODE R ID...` with the ids in hex. A rank writes one line per event to fd 3
// (a call's end: index, result, CLOCK_MONOTONIC time, error text; notes; failures) and reads
// go-ahead bytes from fd 4; its stderr comes to the harness too, which prints it only when a
// repetition fails. CLOCK_MONOTONIC is system-wide, so rank times compare with the time the
// harness took just before kill(). Every wait of the harness is bounded: a hang is a failed
// repetition with a message, and every child is killed and reaped before the next repetition.
// FAULT_SEED=N repeats a run's choices of victim and delay.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <squeeze/squeeze.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

constexpr int kRanks = 4;
// 8 MiB of float: a call lasts long enough that a signal lands mid-call.
constexpr size_t kCount = 2 * 1024 * 1024;
constexpr int kEventFd = 3;  // rank -> harness, one line per event
constexpr int kGoFd = 4;     // harness -> rank, go-ahead bytes
constexpr int kKillTimeoutMs = 5000;
constexpr int kStopTimeoutMs = 3000;
// Far above the 300 ms before the abort: only the abort may end the blocked call.
constexpr int kAbortTimeoutMs = 10000;
constexpr int64_t kMs = 1000000;
constexpr int64_t kSec = 1000 * kMs;

int64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kSec + ts.tv_nsec;
}

void sleepNs(int64_t ns) {
  if (ns <= 0) return;
  timespec ts{static_cast<time_t>(ns / kSec), static_cast<long>(ns % kSec)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

const char* resultName(int rc) {
  switch (rc) {
    case sqzSuccess:
      return "Success";
    case sqzCudaError:
      return "CudaError";
    case sqzSystemError:
      return "SystemError";
    case sqzInternalError:
      return "InternalError";
    case sqzInvalidArgument:
      return "InvalidArgument";
    case sqzInvalidUsage:
      return "InvalidUsage";
    case sqzRemoteError:
      return "RemoteError";
    case sqzInProgress:
      return "InProgress";
    case sqzTimeout:
      return "Timeout";
    default:
      return "?";
  }
}

std::string hexEncode(const sqzUniqueId& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (char c : id.internal) {
    auto b = static_cast<unsigned char>(c);
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

bool hexDecode(const char* s, sqzUniqueId* id) {
  if (std::strlen(s) != 2 * sizeof id->internal) return false;
  for (size_t i = 0; i < sizeof id->internal; ++i) {
    unsigned v = 0;
    if (std::sscanf(s + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

// ---- Process census: what the abort case compares before and after -------------------------

// Calls fn(name) for every entry of the directory but . and ..; false when it cannot be read.
template <class F>
bool forEachEntry(const char* path, F&& fn) {
  DIR* d = opendir(path);
  if (!d) return false;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') fn(std::string(e->d_name));
  closedir(d);
  return true;
}

int countDirEntries(const char* path) {
  int n = 0;
  if (!forEachEntry(path, [&](const std::string&) { ++n; })) return -1;
  return n;  // for /proc/self/fd this includes opendir's own fd, the same every time
}

// The first line of a small file, without its newline ("?" when it cannot be read).
std::string firstLine(const std::string& path) {
  char buf[256] = {};
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return "?";
  if (!std::fgets(buf, sizeof buf, f)) buf[0] = '\0';
  std::fclose(f);
  buf[std::strcspn(buf, "\n")] = '\0';
  return buf;
}

std::string listFds() {
  std::string out;
  const bool read = forEachEntry("/proc/self/fd", [&](const std::string& fd) {
    char target[256] = {};
    const std::string link = "/proc/self/fd/" + fd;
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    out += (out.empty() ? "" : ", ") + fd + "->" + (n > 0 ? target : "?");
  });
  return read ? out : "(cannot read /proc/self/fd)";
}

// The names of this process's threads (/proc/self/task/*/comm), to say which one was left.
std::string listThreads() {
  std::string out;
  const bool read = forEachEntry("/proc/self/task", [&](const std::string& tid) {
    out += (out.empty() ? "" : ", ") + tid + ":" + firstLine("/proc/self/task/" + tid + "/comm");
  });
  return read ? out : "(cannot read /proc/self/task)";
}

// This process's shared-memory segments: the shm transport names them /sqz-<hash>-...-<pid>-*.
std::vector<std::string> shmSegmentsOf(pid_t pid) {
  std::vector<std::string> found;
  const std::string mark = "-" + std::to_string(pid) + "-";
  forEachEntry("/dev/shm", [&](const std::string& name) {
    if (name.starts_with("sqz-") && name.find(mark) != std::string::npos) found.push_back(name);
  });
  return found;
}

struct Census {
  int fds = 0;
  int threads = 0;
};

Census takeCensus() {
  return {countDirEntries("/proc/self/fd"), countDirEntries("/proc/self/task")};
}

// ---- Rank mode ----------------------------------------------------------------------------------

// One line to the harness; the text is flattened to one line and cut to stay one atomic write.
void emit(const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  n = std::clamp(n, 0, static_cast<int>(sizeof buf) - 2);
  for (int i = 0; i < n; ++i)
    if (buf[i] == '\n' || buf[i] == '\r') buf[i] = ' ';
  buf[n++] = '\n';
  for (int off = 0; off < n;) {
    ssize_t w = write(kEventFd, buf + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) _exit(3);  // the harness is gone: nothing left to report to
    off += static_cast<int>(w);
  }
}

// Element i of rank r's input to call c: small integers, so every sum is exact in float and the
// result differs from call to call (a stale buffer cannot pass).
float inputValue(int rank, int call, size_t i) {
  return static_cast<float>((i + 31u * static_cast<unsigned>(call)) % 97 + rank);
}

float expectedValue(int call, size_t i) {
  float sum = 0;
  for (int r = 0; r < kRanks; ++r) sum += inputValue(r, call, i);
  return sum;
}

struct Buffers {
  std::vector<float> send = std::vector<float>(kCount);
  std::vector<float> recv = std::vector<float>(kCount);
};

// Runs call number `call` (numbering spans the rank's communicators) and reports its end.
// Returns the result; on success the data has been checked and a mismatch reported as a failure.
sqzResult_t checkedAllReduce(sqzComm_t comm, int rank, int call, Buffers& b, bool* wrong) {
  for (size_t i = 0; i < kCount; ++i) b.send[i] = inputValue(rank, call, i);
  std::memset(b.recv.data(), 0xff, kCount * sizeof(float));  // NaN: never an expected value
  sqzResult_t rc =
      sqzAllReduce(b.send.data(), b.recv.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
  const int64_t t = nowNs();
  emit("call %d %d %" PRId64 " %s", call, static_cast<int>(rc), t,
       rc == sqzSuccess ? "" : sqzGetLastError(comm));
  *wrong = false;
  if (rc != sqzSuccess) return rc;
  for (size_t i = 0; i < kCount; ++i) {
    const float want = expectedValue(call, i);
    if (std::memcmp(&b.recv[i], &want, sizeof want) != 0) {
      emit("fail call %d: element %zu is %g, expected %g (bit-exact sum of 4 ranks)", call, i,
           static_cast<double>(b.recv[i]), static_cast<double>(want));
      *wrong = true;
      break;
    }
  }
  return rc;
}

bool initComm(sqzComm_t* comm, const sqzUniqueId& id, int rank, const char* which) {
  sqzConfig_t config = SQZ_CONFIG_INITIALIZER;  // transport and timeout come from SQZ_* env
  sqzResult_t rc = sqzCommInitRankConfig(comm, kRanks, id, rank, &config);
  if (rc == sqzSuccess) return true;
  emit("fail sqzCommInitRankConfig (%s communicator): %s: %s", which, resultName(rc),
       sqzGetLastError(nullptr));
  return false;
}

// kill/stop: checked all-reduces until one fails (the fault) or the bound; then leave cleanly.
int rankLoop(int rank, const sqzUniqueId& id) {
  constexpr int kMaxCalls = 2000;
  constexpr int64_t kMaxNs = 60 * kSec;
  Buffers b;
  sqzComm_t comm = nullptr;
  if (!initComm(&comm, id, rank, "first")) return 1;
  const int64_t t0 = nowNs();
  int status = 0;
  for (int call = 0; call < kMaxCalls && nowNs() - t0 < kMaxNs; ++call) {
    bool wrong = false;
    if (checkedAllReduce(comm, rank, call, b, &wrong) != sqzSuccess) break;
    if (wrong) {
      status = 1;
      break;
    }
  }
  sqzResult_t rc = sqzCommDestroy(comm);
  if (rc != sqzSuccess) {
    emit("fail sqzCommDestroy after the loop: %s: %s", resultName(rc), sqzGetLastError(nullptr));
    status = 1;
  }
  emit("done");
  return status;
}

// Waits (bounded) until the process's fds and threads are back to `before`; reports what is left.
bool censusBackTo(const Census& before, const char* when) {
  Census now = takeCensus();
  for (int64_t settleEnd = nowNs() + kSec; nowNs() < settleEnd;) {
    if (now.fds <= before.fds && now.threads <= before.threads) break;
    sleepNs(20 * kMs);
    now = takeCensus();
  }
  bool ok = true;
  if (now.fds != before.fds) {
    emit("fail %s: %d open fds, %d before the communicator: %s", when, now.fds, before.fds,
         listFds().c_str());
    ok = false;
  }
  if (now.threads != before.threads) {
    emit("fail %s: %d threads, %d before the communicator: %s", when, now.threads,
         before.threads, listThreads().c_str());
    ok = false;
  }
  std::vector<std::string> left = shmSegmentsOf(getpid());
  if (!left.empty()) {
    std::string names;
    for (const auto& n : left) names += " /dev/shm/" + n;
    emit("fail %s: shared-memory segments of this process left:%s", when, names.c_str());
    ok = false;
  }
  if (ok)
    emit("note %s: back to %d fds (%s), %d threads, no /dev/shm/sqz-*-%d-* segment", when, now.fds,
         listFds().c_str(), now.threads, static_cast<int>(getpid()));
  return ok;
}

// Rank 0's part of the abort case: a call nobody joins, aborted from another thread.
bool abortBlockedCall(sqzComm_t comm, Buffers& b) {
  constexpr int64_t kAbortAfterNs = 300 * kMs;
  int64_t abortAt = 0;
  sqzResult_t abortRc = sqzSuccess;
  std::thread aborter([&] {
    sleepNs(kAbortAfterNs);
    abortAt = nowNs();
    abortRc = sqzCommAbort(comm);
  });
  const int64_t start = nowNs();
  sqzResult_t rc =
      sqzAllReduce(b.send.data(), b.recv.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
  const int64_t returnedAt = nowNs();
  // comm may be freed by now: the error text comes from this thread's record.
  std::string text = rc == sqzSuccess ? "" : sqzGetLastError(nullptr);
  aborter.join();
  emit("abort %" PRId64 " %d %s", returnedAt - abortAt, static_cast<int>(rc), text.c_str());
  bool ok = true;
  if (rc == sqzSuccess) {
    emit("fail the all-reduce nobody joined returned Success");
    ok = false;
  } else if (returnedAt < abortAt) {
    emit(
        "fail the all-reduce nobody joined returned %s %.0f ms after it started, before the "
        "abort: %s",
        resultName(rc), (returnedAt - start) / 1e6, text.c_str());
    ok = false;
  }
  if (abortRc != sqzSuccess) {
    emit("fail sqzCommAbort returned %s: %s", resultName(abortRc), sqzGetLastError(nullptr));
    ok = false;
  }
  return ok;
}

bool waitForGo() {
  pollfd p{kGoFd, POLLIN, 0};
  int n = poll(&p, 1, 60000);
  char c = 0;
  if (n == 1 && read(kGoFd, &c, 1) == 1) return true;
  emit("fail no go-ahead from the harness within 60 s");
  return false;
}

int rankAbort(int rank, const sqzUniqueId& first, const sqzUniqueId& second) {
  Buffers b;
  // A first thread makes the runtime start its own lazily created helpers (ThreadSanitizer's
  // background thread), which would otherwise be counted as a thread Squeeze left behind.
  std::thread([] {}).join();
  const Census before = takeCensus();
  bool ok = true;
  sqzComm_t comm = nullptr;
  if (!initComm(&comm, first, rank, "first")) return 1;
  bool wrong = false;
  if (checkedAllReduce(comm, rank, 0, b, &wrong) != sqzSuccess || wrong) return 1;
  if (rank == 0) {
    ok &= abortBlockedCall(comm, b);
    ok &= censusBackTo(before, "after sqzCommAbort");
    emit("stage aborted");
  } else {
    emit("stage waiting");
    if (!waitForGo()) return 1;
    sqzResult_t rc = sqzCommDestroy(comm);
    if (rc != sqzSuccess) {
      emit("fail sqzCommDestroy of the first communicator after rank 0 aborted: %s: %s",
           resultName(rc), sqzGetLastError(nullptr));
      ok = false;
    }
  }
  comm = nullptr;
  if (!initComm(&comm, second, rank, "second")) return 1;
  if (checkedAllReduce(comm, rank, 1, b, &wrong) != sqzSuccess || wrong) ok = false;
  sqzResult_t rc = sqzCommDestroy(comm);
  if (rc != sqzSuccess) {
    emit("fail sqzCommDestroy of the second communicator: %s", resultName(rc));
    ok = false;
  }
  ok &= censusBackTo(before, "after the second communicator");
  emit("done");
  return ok ? 0 : 1;
}

int rankMain(int argc, char** argv) {
  // argv: rank loop|abort R ID [ID2]
  sqzUniqueId first{}, second{};
  const bool abortMode = argc == 6 && std::strcmp(argv[2], "abort") == 0;
  const bool loopMode = argc == 5 && std::strcmp(argv[2], "loop") == 0;
  const int rank = argc > 3 ? std::atoi(argv[3]) : -1;
  if ((!abortMode && !loopMode) || rank < 0 || rank >= kRanks || !hexDecode(argv[4], &first) ||
      (abortMode && !hexDecode(argv[5], &second))) {
    std::fprintf(stderr,
                 "sqz-fault-harness: 'rank' mode is started by the harness itself "
                 "(rank loop|abort R HEXID [HEXID]); run a case instead, e.g. 'kill tcp 20'\n");
    return 2;
  }
  return abortMode ? rankAbort(rank, first, second) : rankLoop(rank, first);
}

// ---- Harness mode -------------------------------------------------------------------------------

struct Event {
  std::string kind;  // call, abort, note, fail, stage, done
  int call = -1;
  int rc = 0;
  int64_t t = 0;  // call: when it returned; abort: ns from the abort to the call's return
  std::string text;
};

struct RankProc {
  pid_t pid = -1;
  int eventFd = -1;  // read ends
  int errFd = -1;
  int goFd = -1;  // write end
  std::string pending;
  std::string err;
  std::vector<Event> events;
  bool reaped = false;
  int status = 0;

  const Event* firstFailedCall() const {
    for (const Event& e : events)
      if (e.kind == "call" && e.rc != sqzSuccess) return &e;
    return nullptr;
  }
  int okCalls() const {
    int n = 0;
    for (const Event& e : events) n += e.kind == "call" && e.rc == sqzSuccess;
    return n;
  }
  const Event* find(const std::string& kind, const std::string& text = "") const {
    for (const Event& e : events)
      if (e.kind == kind && (text.empty() || e.text == text)) return &e;
    return nullptr;
  }
};

Event parseEvent(const std::string& line) {
  Event e;
  size_t sp = line.find(' ');
  e.kind = line.substr(0, sp);
  std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
  int used = 0;
  if (e.kind == "call") {
    if (std::sscanf(rest.c_str(), "%d %d %" SCNd64 " %n", &e.call, &e.rc, &e.t, &used) >= 3)
      rest = rest.substr(std::min<size_t>(used, rest.size()));
    else
      e.kind = "garbled";
  } else if (e.kind == "abort") {
    if (std::sscanf(rest.c_str(), "%" SCNd64 " %d %n", &e.t, &e.rc, &used) >= 2)
      rest = rest.substr(std::min<size_t>(used, rest.size()));
    else
      e.kind = "garbled";
  }
  e.text = rest;
  return e;
}

void closeFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// Reads whatever the ranks have written, waiting at most until `deadline`, and returns as soon
// as `done()` holds (checked after every read, and at least every 50 ms).
template <class Pred>
bool pump(std::vector<RankProc>& ranks, int64_t deadline, Pred done) {
  for (;;) {
    if (done()) return true;
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // rank, is the event pipe
    for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
      if (ranks[r].eventFd >= 0) {
        fds.push_back({ranks[r].eventFd, POLLIN, 0});
        who.push_back({r, true});
      }
      if (ranks[r].errFd >= 0) {
        fds.push_back({ranks[r].errFd, POLLIN, 0});
        who.push_back({r, false});
      }
    }
    const int64_t left = deadline - nowNs();
    if (left <= 0) return done();
    // With every pipe closed, poll is just a sleep: done() may still be waiting on waitpid.
    int n = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left / kMs + 1, 50)));
    if (n < 0 && errno != EINTR) {
      std::perror("sqz-fault-harness: poll");
      return done();
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      RankProc& rp = ranks[who[i].first];
      char buf[8192];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        closeFd(who[i].second ? rp.eventFd : rp.errFd);
        continue;
      }
      if (!who[i].second) {
        rp.err.append(buf, got);
        constexpr size_t kKeep = 16384;  // the tail is what explains a failure
        if (rp.err.size() > 2 * kKeep) rp.err.erase(0, rp.err.size() - kKeep);
        continue;
      }
      rp.pending.append(buf, got);
      for (size_t nl; (nl = rp.pending.find('\n')) != std::string::npos;) {
        rp.events.push_back(parseEvent(rp.pending.substr(0, nl)));
        rp.pending.erase(0, nl + 1);
      }
    }
  }
}

std::vector<RankProc> spawnRanks(const std::vector<std::string>& rankArgs, const char* transport,
                                 int timeoutMs) {
  // The environment is built before fork: the child of a threaded process (the rendezvous root
  // runs here) may only make async-signal-safe calls.
  std::vector<std::string> envStore;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.starts_with("SQZ_TRANSPORT=") || kv.starts_with("SQZ_TIMEOUT_MS=") ||
        kv.starts_with("SQZ_SOCKET_IFNAME=") || kv.starts_with("SQZ_UNIQUE_ID=") ||
        kv.starts_with("SQZ_RANK=") || kv.starts_with("SQZ_WORLD_SIZE="))
      continue;
    envStore.push_back(kv);
  }
  envStore.push_back(std::string("SQZ_TRANSPORT=") + transport);
  envStore.push_back("SQZ_TIMEOUT_MS=" + std::to_string(timeoutMs));
  envStore.push_back("SQZ_SOCKET_IFNAME=lo");  // loopback only, whatever the caller's env says
  std::vector<char*> envp;
  for (auto& s : envStore) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<RankProc> ranks(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    std::vector<std::string> argStore = {"sqz-fault-harness", "rank"};
    argStore.insert(argStore.end(), rankArgs.begin(), rankArgs.end());
    argStore.insert(argStore.begin() + 3, std::to_string(r));  // after the mode
    std::vector<char*> argv;
    for (auto& s : argStore) argv.push_back(s.data());
    argv.push_back(nullptr);

    int ev[2], er[2], go[2];
    if (pipe2(ev, O_CLOEXEC) || pipe2(er, O_CLOEXEC) || pipe2(go, O_CLOEXEC)) {
      std::perror("sqz-fault-harness: pipe2");
      std::exit(1);
    }
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("sqz-fault-harness: fork");
      std::exit(1);
    }
    if (pid == 0) {
      // A harness that dies takes its ranks with it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      // Above fds 2..4 first, so placing one cannot clobber another; only the copies dup2 makes
      // (without close-on-exec) reach the rank.
      int evHigh = fcntl(ev[1], F_DUPFD_CLOEXEC, 100);
      int erHigh = fcntl(er[1], F_DUPFD_CLOEXEC, 100);
      int goHigh = fcntl(go[0], F_DUPFD_CLOEXEC, 100);
      dup2(evHigh, kEventFd);
      dup2(erHigh, 2);
      dup2(goHigh, kGoFd);
      execve("/proc/self/exe", argv.data(), envp.data());
      _exit(127);
    }
    close(ev[1]);
    close(er[1]);
    close(go[0]);
    ranks[r].pid = pid;
    ranks[r].eventFd = ev[0];
    ranks[r].errFd = er[0];
    ranks[r].goFd = go[1];
  }
  return ranks;
}

// Waits for every rank to exit on its own until `deadline`, then SIGCONTs and SIGKILLs the rest.
// Returns the ranks that had to be killed.
std::vector<int> reapAll(std::vector<RankProc>& ranks, int64_t deadline) {
  auto reapSome = [&] {
    bool all = true;
    for (RankProc& rp : ranks) {
      if (rp.reaped) continue;
      if (waitpid(rp.pid, &rp.status, WNOHANG) == rp.pid)
        rp.reaped = true;
      else
        all = false;
    }
    return all;
  };
  // Their pipes are read meanwhile, so a rank with a lot to say is not blocked on a full pipe.
  pump(ranks, deadline, reapSome);
  std::vector<int> killed;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (ranks[r].reaped) continue;
    killed.push_back(r);
    kill(ranks[r].pid, SIGCONT);
    kill(ranks[r].pid, SIGKILL);
  }
  if (!pump(ranks, nowNs() + 10 * kSec, reapSome))
    for (RankProc& rp : ranks)
      if (!rp.reaped)
        std::printf("  ERROR: pid %d survived SIGKILL for 10 s (uninterruptible?); left behind\n",
                    static_cast<int>(rp.pid));
  // The last words of the exited, up to their pipes' ends.
  pump(ranks, nowNs() + kSec, [&] {
    for (const RankProc& rp : ranks)
      if (rp.eventFd >= 0 || rp.errFd >= 0) return false;
    return true;
  });
  for (RankProc& rp : ranks) {
    closeFd(rp.eventFd);
    closeFd(rp.errFd);
    closeFd(rp.goFd);
  }
  return killed;
}

std::string exitText(const RankProc& rp) {
  if (!rp.reaped) return "not reaped";
  if (WIFEXITED(rp.status)) return "exit " + std::to_string(WEXITSTATUS(rp.status));
  if (WIFSIGNALED(rp.status)) return std::string("killed by ") + strsignal(WTERMSIG(rp.status));
  return "status " + std::to_string(rp.status);
}

bool exitedCleanly(const RankProc& rp) {
  return rp.reaped && WIFEXITED(rp.status) && WEXITSTATUS(rp.status) == 0;
}

void printRankLogs(const std::vector<RankProc>& ranks) {
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const RankProc& rp = ranks[r];
    std::printf("  --- rank %d (pid %d, %s): %d successful calls\n", r, static_cast<int>(rp.pid),
                exitText(rp).c_str(), rp.okCalls());
    for (const Event& e : rp.events)
      if (e.kind != "call" || e.rc != sqzSuccess)
        std::printf("    %s %s%s%s\n", e.kind.c_str(),
                    e.kind == "call" ? ("#" + std::to_string(e.call) + " ").c_str() : "",
                    e.kind == "call" ? resultName(e.rc) : "",
                    e.text.empty() ? "" : (" " + e.text).c_str());
    if (!rp.err.empty()) {
      std::printf("    stderr:\n");
      size_t from = rp.err.size() > 4000 ? rp.err.size() - 4000 : 0;
      std::string tail = rp.err.substr(from);
      for (size_t pos = 0; pos < tail.size();) {
        size_t nl = tail.find('\n', pos);
        if (nl == std::string::npos) nl = tail.size();
        std::printf("      %s\n", tail.substr(pos, nl - pos).c_str());
        pos = nl + 1;
      }
    }
  }
}

std::string msText(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", ns / 1e6);
  return buf;
}

bool newUniqueId(sqzUniqueId* id) {
  sqzResult_t rc = sqzGetUniqueId(id);
  if (rc == sqzSuccess) return true;
  std::printf("  ERROR: sqzGetUniqueId: %s: %s\n", resultName(rc), sqzGetLastError(nullptr));
  return false;
}

// The ranks named in a message as "rank N".
std::vector<int> ranksNamed(const std::string& text) {
  std::vector<int> named;
  for (size_t pos = 0; (pos = text.find("rank ", pos)) != std::string::npos;) {
    pos += 5;
    if (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
      named.push_back(std::atoi(text.c_str() + pos));
  }
  return named;
}

bool containsNoCase(std::string hay, std::string needle) {
  for (auto* s : {&hay, &needle})
    for (char& c : *s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return hay.find(needle) != std::string::npos;
}

// What a timeout's message must say: the operation, its sequence number (the all-reduce's index
// on this communicator, as "#N" or "seq"), and a peer that was waited on.
std::string timeoutMessageProblem(const Event& e, int self) {
  std::string missing;
  if (!containsNoCase(e.text, "allreduce") && !containsNoCase(e.text, "all-reduce"))
    missing += " the operation (allreduce)";
  if (e.text.find("#" + std::to_string(e.call)) == std::string::npos &&
      !containsNoCase(e.text, "seq"))
    missing += " the sequence number (#" + std::to_string(e.call) + " or 'seq')";
  bool peer = false;
  for (int r : ranksNamed(e.text)) peer |= r != self && r >= 0 && r < kRanks;
  if (!peer) missing += " a peer ('rank N', N other than " + std::to_string(self) + ")";
  return missing.empty() ? "" : "does not name" + missing;
}

struct Totals {
  int reps = 0;
  int passed = 0;
  double maxMs = 0;
  double minMs = 1e300;
};

// One kill or stop repetition; prints its line and returns whether it met every bound.
bool signalRepetition(bool stop, const char* transport, int rep, int reps, std::mt19937_64& rng,
                      Totals& totals) {
  const int timeoutMs = stop ? kStopTimeoutMs : kKillTimeoutMs;
  const int64_t upperNs = stop ? timeoutMs * kMs * 11 / 10 : timeoutMs * kMs + 2 * kSec;
  const int64_t lowerNs = stop ? timeoutMs * kMs * 95 / 100 : 0;
  const int sig = stop ? SIGSTOP : SIGKILL;
  const char* caseName = stop ? "stop" : "kill";
  std::string why;  // empty: the repetition passed

  sqzUniqueId id{};
  if (!newUniqueId(&id)) {
    ++totals.reps;
    std::printf("%s %s %d/%d: FAILED: no rendezvous id\n", caseName, transport, rep, reps);
    return false;
  }
  std::vector<RankProc> ranks = spawnRanks({"loop", hexEncode(id)}, transport, timeoutMs);

  // All four inside the loop: each has finished its second call.
  auto anyFailed = [&] {
    for (const RankProc& rp : ranks)
      if (rp.firstFailedCall() || rp.find("fail") || rp.find("done") || rp.eventFd < 0) return true;
    return false;
  };
  auto allRunning = [&] {
    if (anyFailed()) return true;
    for (const RankProc& rp : ranks)
      if (rp.okCalls() < 2) return false;
    return true;
  };
  pump(ranks, nowNs() + 60 * kSec, allRunning);
  int victim = -1;
  int64_t signalledAt = 0;
  std::vector<int> survivors;
  if (anyFailed()) {
    why = "a rank failed or left before the signal";
  } else if (!allRunning()) {
    why = "the 4 ranks did not all finish 2 calls within 60 s";
  } else {
    sleepNs(static_cast<int64_t>(rng() % 201) * kMs);
    victim = static_cast<int>(rng() % kRanks);
    signalledAt = nowNs();
    kill(ranks[victim].pid, sig);
    for (int r = 0; r < kRanks; ++r)
      if (r != victim) survivors.push_back(r);
    // Wait past the bound a little, so a late error is told apart from none at all.
    pump(ranks, signalledAt + upperNs + 3 * kSec, [&] {
      for (int r : survivors)
        if (!ranks[r].firstFailedCall() && ranks[r].eventFd >= 0) return false;
      return true;
    });
  }
  if (stop && victim >= 0) kill(ranks[victim].pid, SIGCONT);
  if (victim >= 0) kill(ranks[victim].pid, SIGKILL);
  // Survivors leave on their own once their call has failed.
  std::vector<int> killed = reapAll(ranks, nowNs() + 5 * kSec);

  char line[1024];
  std::string detail;
  bool sawTimeout = false;
  std::vector<std::string> messages;
  for (int r : survivors) {
    const Event* e = ranks[r].firstFailedCall();
    if (!e) {
      snprintf(line, sizeof line, "%s rank %d no error", detail.empty() ? "" : ";", r);
      detail += line;
      if (why.empty())
        why = "rank " + std::to_string(r) + " reported no failed call within " +
              std::to_string((upperNs + 3 * kSec) / kMs) + " ms of the signal";
      continue;
    }
    const double ms = (e->t - signalledAt) / 1e6;
    snprintf(line, sizeof line, "%s rank %d %s in #%d after %.0f ms", detail.empty() ? "" : ";", r,
             resultName(e->rc), e->call, ms);
    detail += line;
    totals.maxMs = std::max(totals.maxMs, ms);
    totals.minMs = std::min(totals.minMs, ms);
    if (why.empty() && e->rc != sqzRemoteError && e->rc != sqzTimeout)
      why = "rank " + std::to_string(r) + " got " + resultName(e->rc) +
            " (expected RemoteError or Timeout): " + e->text;
    if (why.empty() && e->t < signalledAt)
      why = "rank " + std::to_string(r) + "'s call failed before the signal: " + e->text;
    if (why.empty() && e->t - signalledAt > upperNs)
      why = "rank " + std::to_string(r) + " failed " + msText(e->t - signalledAt) +
            " ms after the signal, past the bound of " + std::to_string(upperNs / kMs) + " ms";
    if (why.empty() && e->t - signalledAt < lowerNs)
      why = "rank " + std::to_string(r) + " failed " + msText(e->t - signalledAt) +
            " ms after the signal, before the timeout could have passed (" +
            std::to_string(lowerNs / kMs) + " ms)";
    if (e->rc == sqzTimeout) {
      sawTimeout = true;
      if (stop) {
        messages.push_back("rank " + std::to_string(r) + ": " + e->text);
        std::string problem = timeoutMessageProblem(*e, r);
        if (why.empty() && !problem.empty())
          why = "rank " + std::to_string(r) + "'s timeout message " + problem + ": " + e->text;
      }
    }
    if (why.empty() && ranks[r].find("fail"))
      why = "rank " + std::to_string(r) + ": " + ranks[r].find("fail")->text;
    if (why.empty() && !exitedCleanly(ranks[r]))
      why = "rank " + std::to_string(r) + " did not exit cleanly after its error (" +
            exitText(ranks[r]) + ")";
  }
  if (why.empty() && stop && !sawTimeout && victim >= 0)
    why = "no survivor reported Timeout: somebody must have waited on the stopped rank";
  for (int r : killed)
    if (why.empty() && r != victim)
      why = "rank " + std::to_string(r) + " had to be killed: it did not exit 5 s after the fault";
  // Survivors unlinked their segments; a SIGKILLed victim cannot, so its are noted and removed.
  for (int r = 0; r < kRanks; ++r) {
    for (const std::string& name : shmSegmentsOf(ranks[r].pid)) {
      if (r == victim) {
        std::printf("  note: the killed rank %d left /dev/shm/%s; removed\n", r, name.c_str());
        unlink(("/dev/shm/" + name).c_str());
      } else if (why.empty()) {
        why = "rank " + std::to_string(r) + " exited and left /dev/shm/" + name;
      }
    }
  }

  ++totals.reps;
  const bool ok = why.empty();
  totals.passed += ok;
  // The victim's reported calls say whether the signal landed inside the survivors' failed call.
  std::printf("%s %s %d/%d: victim rank %d (had reported %d calls):%s -> %s%s\n", caseName,
              transport, rep, reps, victim, victim >= 0 ? ranks[victim].okCalls() : 0,
              detail.c_str(), ok ? "ok" : "FAILED: ", why.c_str());
  if (stop)
    for (const std::string& m : messages) std::printf("  timeout message of %s\n", m.c_str());
  if (!ok) printRankLogs(ranks);
  std::fflush(stdout);
  return ok;
}

int signalCase(bool stop, const char* transport, int reps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Totals totals;
  for (int rep = 1; rep <= reps; ++rep) signalRepetition(stop, transport, rep, reps, rng, totals);
  const int timeoutMs = stop ? kStopTimeoutMs : kKillTimeoutMs;
  std::printf(
      "SUMMARY %s %s: %d/%d repetitions ok; survivors' errors max %.0f ms (min %.0f) after the "
      "signal (bound %s%d ms, SQZ_TIMEOUT_MS=%d, seed %" PRIu64 ")\n",
      stop ? "stop" : "kill", transport, totals.passed, reps, totals.maxMs,
      totals.minMs > 1e299 ? 0 : totals.minMs,
      stop ? (std::to_string(timeoutMs * 95 / 100) + "..").c_str() : "<= ",
      stop ? timeoutMs * 11 / 10 : timeoutMs + 2000, timeoutMs, seed);
  return totals.passed == reps ? 0 : 1;
}

int abortCase(const char* transport) {
  constexpr int64_t kBoundNs = kSec;
  sqzUniqueId first{}, second{};
  if (!newUniqueId(&first) || !newUniqueId(&second)) return 1;
  std::vector<RankProc> ranks =
      spawnRanks({"abort", hexEncode(first), hexEncode(second)}, transport, kAbortTimeoutMs);
  std::string why;
  auto failedEarly = [&] {
    for (const RankProc& rp : ranks)
      if (rp.find("fail") || rp.eventFd < 0) return true;
    return false;
  };
  auto staged = [&] {
    if (failedEarly()) return true;
    if (!ranks[0].find("stage", "aborted")) return false;
    for (int r = 1; r < kRanks; ++r)
      if (!ranks[r].find("stage", "waiting")) return false;
    return true;
  };
  pump(ranks, nowNs() + 60 * kSec, staged);
  if (!staged()) why = "the ranks did not reach the abort within 60 s";
  // Ranks 1-3 go on even after a failure of rank 0, so it shows whether they can recover.
  for (int r = 1; r < kRanks; ++r)
    if (ranks[r].goFd >= 0 && write(ranks[r].goFd, "g", 1) != 1 && why.empty())
      why = "cannot send the go-ahead to rank " + std::to_string(r);
  auto allDone = [&] {
    for (const RankProc& rp : ranks)
      if (rp.eventFd >= 0) return false;
    return true;
  };
  pump(ranks, nowNs() + 60 * kSec, allDone);
  std::vector<int> killed = reapAll(ranks, nowNs() + 5 * kSec);

  const Event* a = ranks[0].find("abort");
  double abortMs = a ? a->t / 1e6 : -1;
  if (why.empty() && !a) why = "rank 0 did not report the aborted call";
  if (why.empty() && a->t > kBoundNs)
    why = "the aborted call returned " + msText(a->t) + " ms after sqzCommAbort (bound 1000)";
  for (int r = 0; r < kRanks && why.empty(); ++r) {
    if (const Event* f = ranks[r].find("fail"))
      why = "rank " + std::to_string(r) + ": " + f->text;
    else if (std::find(killed.begin(), killed.end(), r) != killed.end())
      why = "rank " + std::to_string(r) + " had to be killed";
    else if (!exitedCleanly(ranks[r]))
      why = "rank " + std::to_string(r) + ": " + exitText(ranks[r]);
    else if (!ranks[r].find("done"))
      why = "rank " + std::to_string(r) + " did not finish";
  }
  for (int r = 0; r < kRanks && why.empty(); ++r) {
    bool recovered = false;
    for (const Event& e : ranks[r].events)
      recovered |= e.kind == "call" && e.call == 1 && e.rc == 0;
    if (!recovered)
      why = "rank " + std::to_string(r) + " has no checked all-reduce on the new communicator";
  }
  std::printf("abort %s: the aborted call returned %s %.1f ms after sqzCommAbort: %s\n", transport,
              a ? resultName(a->rc) : "?", abortMs, a ? a->text.c_str() : "");
  for (const Event& e : ranks[0].events)
    if (e.kind == "note") std::printf("  rank 0: %s\n", e.text.c_str());
  const bool ok = why.empty();
  if (!ok) printRankLogs(ranks);
  std::printf(
      "SUMMARY abort %s: %s; abort -> return %.1f ms (bound 1000 ms); new communicator of "
      "the same 4 processes %s\n",
      transport, ok ? "ok" : ("FAILED: " + why).c_str(), abortMs,
      ok ? "all-reduced bit-exact" : "see above");
  return ok ? 0 : 1;
}

int usage(const char* problem) {
  std::fprintf(stderr,
               "sqz-fault-harness: %s\n"
               "usage: sqz-fault-harness kill|stop tcp|shm REPETITIONS\n"
               "       sqz-fault-harness abort tcp|shm\n"
               "  kill: SIGKILL one of 4 ranks mid-all-reduce; survivors must fail within "
               "timeout + 2 s\n"
               "  stop: SIGSTOP one; survivors must time out within timeout + 10%%\n"
               "  abort: sqzCommAbort from another thread; the call returns within 1 s, nothing "
               "leaks, a new communicator works\n"
               "  FAULT_SEED=N repeats the random choices of an earlier run.\n",
               problem);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "rank") == 0) return rankMain(argc, argv);
  if (argc < 3) return usage("missing arguments");
  const std::string mode = argv[1], transport = argv[2];
  if (transport != "tcp" && transport != "shm")
    return usage(("unknown transport '" + transport + "': use tcp or shm").c_str());
  signal(SIGPIPE, SIG_IGN);  // a dead rank's go-ahead pipe is an error to report, not a death
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // The rendezvous root listens here: loopback only.
  setenv("SQZ_SOCKET_IFNAME", "lo", 1);
  if (mode == "abort") {
    if (argc != 3) return usage("'abort' takes only the transport");
    return abortCase(transport.c_str());
  }
  if (mode != "kill" && mode != "stop")
    return usage(("unknown case '" + mode + "': use kill, stop or abort").c_str());
  if (argc != 4)
    return usage(("'" + mode + "' takes the transport and a repetition count").c_str());
  char* end = nullptr;
  long reps = std::strtol(argv[3], &end, 10);
  if (*end != '\0' || reps < 1 || reps > 1000)
    return usage(("repetitions '" + std::string(argv[3]) + "' must be a number 1..1000").c_str());
  uint64_t seed = static_cast<uint64_t>(nowNs());
  if (const char* s = std::getenv("FAULT_SEED")) seed = std::strtoull(s, nullptr, 10);
  return signalCase(mode == "stop", transport.c_str(), static_cast<int>(reps), seed);
}
