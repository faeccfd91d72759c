// The harness's side of its ranks: spawn, pump, reap (see rank_control.h).
#include "rank_control.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <squeeze/squeeze.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "protocol.h"

extern char** environ;

namespace squeeze::fault {
namespace {

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

// FAULT_LAB's hosts' network namespaces (/run/netns/NAME-hI), by host; empty without a lab.
std::vector<int> labNamespaces;

}  // namespace

std::string enterLab() {
  const char* lab = std::getenv("FAULT_LAB");
  if (!lab || !*lab) return "";
  for (int h = 0; h < kRanks; ++h) {
    const std::string path = std::string("/run/netns/") + lab + "-h" + std::to_string(h);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return "FAULT_LAB=" + std::string(lab) + ": no " + path + " (bring the lab up first: "
             "tests/netlab/netlab.sh up --name " + lab + " -n 4)";
    labNamespaces.push_back(fd);
  }
  if (setns(labNamespaces[0], CLONE_NEWNET) != 0)
    return "FAULT_LAB: cannot enter host 0's network namespace (needs root): " +
           std::string(std::strerror(errno));
  return "";
}

const char* rankInterface() { return labNamespaces.empty() ? "lo" : "lab0"; }

bool pump(std::vector<RankProc>& ranks, int64_t deadline, const std::function<bool()>& done) {
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
                                 int timeoutMs, int first, int count, int host) {
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
  // Loopback (or the lab's links) only, whatever the caller's env says.
  envStore.push_back(std::string("SQZ_SOCKET_IFNAME=") + rankInterface());
  std::vector<char*> envp;
  for (auto& s : envStore) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<RankProc> ranks(count);
  for (int r = 0; r < count; ++r) {
    std::vector<std::string> argStore = {"sqz-fault-harness", "rank"};
    argStore.insert(argStore.end(), rankArgs.begin(), rankArgs.end());
    argStore.insert(argStore.begin() + 3, std::to_string(first + r));  // after the mode
    std::vector<char*> argv;
    for (auto& s : argStore) argv.push_back(s.data());
    argv.push_back(nullptr);

    int ev[2], er[2], go[2];
    if (pipe2(ev, O_CLOEXEC) || pipe2(er, O_CLOEXEC) || pipe2(go, O_CLOEXEC)) {
      std::perror("sqz-fault-harness: pipe2");
      std::exit(1);
    }
    const pid_t parent = getpid();
    const int netns = labNamespaces.empty() ? -1 : labNamespaces[host >= 0 ? host : first + r];
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("sqz-fault-harness: fork");
      std::exit(1);
    }
    if (pid == 0) {
      // A harness that dies takes its ranks with it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      if (netns >= 0 && setns(netns, CLONE_NEWNET) != 0) _exit(126);  // its lab host
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

}  // namespace squeeze::fault
