// sqz-attacker: attacks every loopback TCP port a running job listens on, so attack_test.sh can
// check that a port scan, garbage bytes, a wrong secret, half-open connections and a slow client
// cause no crash, no hang and no wrong result.
//
//   sqz-attacker --pid PID --seconds S
//
// Until PID exits (or turns zombie) or S seconds pass, it finds the TCP ports in LISTEN state
// owned by PID or any descendant (socket inodes from /proc/<pid>/fd matched against
// /proc/PID/net/tcp{,6}), refuses any listener not bound to exactly 127.0.0.1 or ::1, and hits
// each port, round-robin over the kinds below; a port seen for the first time gets one of every
// kind at once, since a communicator's setup ports live for milliseconds.
//   scan          connect, close at once (alternately a FIN and an RST)
//   garbage       connect, write 1-16 KB of random bytes seeded with huge length fields (some
//                 after a valid auth magic), read what comes back for 200 ms, close
//   wrong-secret  the real client handshake (squeeze::authenticateAsClient) with a random secret
//                 and a plausible hello; must be refused
//   half-open     connect, send nothing; at most 16 held, the oldest closed first, none past 8 s
//   slow-client   a well-formed auth hello, one byte every 200 ms, until the server drops it
// At the end it prints, per kind, attempts, connections made and distinct ports connected to, and
// how long the server kept silent and slow clients. Every wait is bounded; refused and reset
// connections are counted, never fatal (setup ports close all the time). Exit status: 0; 1 when a
// wrong secret was accepted (or /proc cannot be read); 2 on bad usage.
//
// The parts: listeners.h (discovery), attacks.h (the attacks on one connection), tally.h (the
// counts printed at the end); this file holds the main loop, the attacks it keeps open
// (half-open, slow-client), and main().
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "attacks.h"
#include "bootstrap/unique_id.h"
#include "listeners.h"
#include "tally.h"

namespace squeeze::attack {
namespace {

using Seconds = std::chrono::duration<double>;

constexpr auto kRevisit = std::chrono::milliseconds(100);  // per port, between two attacks
constexpr size_t kMaxHalfOpen = 16;
constexpr auto kHalfOpenHold = std::chrono::seconds(8);
constexpr size_t kMaxSlow = 8;
constexpr auto kSlowByteEvery = std::chrono::milliseconds(200);
constexpr auto kSlowBound = std::chrono::seconds(20);
constexpr int kMaxWorkers = 8;  // garbage and wrong-secret threads, each

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "sqz-attacker: %s\n"
               "Usage: sqz-attacker --pid PID --seconds S   (S from 1 to 3600)\n",
               why.c_str());
  std::exit(2);
}

// ---------------------------------------------------------------------------------------------
// The attacks that hold connections open: run by the main loop.

struct Held {
  int fd;
  Target target;
  std::chrono::steady_clock::time_point opened;
  // slow-client only
  std::vector<uint8_t> hello;
  size_t sent = 0;
  std::chrono::steady_clock::time_point nextByte;
};

class Attacker {
 public:
  Attacker(pid_t pid, double seconds) : pid_(pid), seconds_(seconds), rng_(randomU64()) {}

  int run() {
    // Said at once (and flushed): a harness may hold its job back until the attacker watches,
    // since a communicator's setup ports live for milliseconds (exit_test.sh does).
    std::printf("sqz-attacker: watching pid %ld and its descendants\n", static_cast<long>(pid_));
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    const auto end =
        start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(Seconds(seconds_));
    bool pidExited = false;
    while (std::chrono::steady_clock::now() < end) {
      if (!alive(pid_)) {
        pidExited = true;
        break;
      }
      const Listeners found = findListeners(pid_);
      for (const std::string& other : found.other)
        if (refused_.insert(other).second)
          std::printf("sqz-attacker: not attacking the listener on %s: not 127.0.0.1 or ::1\n",
                      other.c_str());
      const auto now = std::chrono::steady_clock::now();
      for (const Target& t : found.loopback) {
        auto [it, isNew] = ports_.try_emplace(t, PortState{});
        PortState& ps = it->second;
        if (isNew) {
          for (int k = 0; k < kNumKinds; ++k) attack(static_cast<Kind>(k), t);
          ps.last = now;
        } else if (now - ps.last >= kRevisit) {
          attack(static_cast<Kind>(ps.nextKind), t);
          ps.nextKind = (ps.nextKind + 1) % kNumKinds;
          ps.last = now;
        }
      }
      serviceHeld();
      reapWorkers(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const double took = Seconds(std::chrono::steady_clock::now() - start).count();
    for (Held& h : halfOpen_) ::close(h.fd);
    for (Held& h : slow_) ::close(h.fd);
    reapWorkers(true);
    std::printf(
        "sqz-attacker: %s after %.1f s; %zu loopback listening ports seen, %zu other "
        "listeners left alone\n",
        pidExited ? (std::string("pid ") + std::to_string(pid_) + " exited").c_str() : "time is up",
        took, ports_.size(), refused_.size());
    tally_.print();
    if (tally_.count(kWrongSecret, "ACCEPTED (security bug)") > 0) {
      std::printf("sqz-attacker: FAIL: a connection with a wrong secret was accepted\n");
      return 1;
    }
    return 0;
  }

 private:
  struct PortState {
    std::chrono::steady_clock::time_point last;
    int nextKind = 0;
  };
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  void attack(Kind k, const Target& t) {
    switch (k) {
      case kScan: {
        int fd = connectFor(kScan, t, tally_);
        if (fd < 0) return;
        if (scans_++ % 2)
          abortiveClose(fd);
        else
          ::close(fd);
        return;
      }
      case kGarbage:
      case kWrongSecret:
        startWorker(k, t);
        return;
      case kHalfOpen: {
        if (halfOpen_.size() >= kMaxHalfOpen) {
          closeHeld(kHalfOpen, halfOpen_.front(), "closed by us (16 held)");
          halfOpen_.pop_front();
        }
        int fd = connectFor(kHalfOpen, t, tally_);
        if (fd >= 0) halfOpen_.push_back(Held{fd, t, std::chrono::steady_clock::now(), {}, 0, {}});
        return;
      }
      case kSlowClient: {
        if (slow_.size() >= kMaxSlow) return;  // not an attempt: the next kind's turn comes
        int fd = connectFor(kSlowClient, t, tally_);
        if (fd < 0) return;
        const auto now = std::chrono::steady_clock::now();
        slow_.push_back(Held{fd, t, now, plausibleHello(rng_), 0, now});
        return;
      }
      default:
        return;
    }
  }

  void startWorker(Kind k, const Target& t) {
    std::atomic<int>& running = k == kGarbage ? garbageRunning_ : wrongRunning_;
    if (running >= kMaxWorkers) return;
    ++running;
    auto done = std::make_shared<std::atomic<bool>>(false);
    const uint64_t seed = rng_();
    workers_.push_back(Worker{std::thread([this, k, t, seed, done, &running] {
                                if (k == kGarbage)
                                  garbage(t, seed, tally_);
                                else
                                  wrongSecret(t, seed, tally_);
                                --running;
                                *done = true;
                              }),
                              done});
  }

  void reapWorkers(bool all) {
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (all || *it->done) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void closeHeld(Kind k, Held& h, const std::string& why) {
    ::close(h.fd);
    tally_.outcome(k, why);
  }

  // Half-open: notes when the server gives up on them; slow clients: the next byte when due.
  void serviceHeld() {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = halfOpen_.begin(); it != halfOpen_.end();) {
      if (!drain(it->fd)) {
        tally_.serverDropped(kHalfOpen, Seconds(now - it->opened).count());
        closeHeld(kHalfOpen, *it, "closed by the server");
        it = halfOpen_.erase(it);
      } else if (now - it->opened >= kHalfOpenHold) {
        closeHeld(kHalfOpen, *it, "closed by us (held 8 s)");
        it = halfOpen_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = slow_.begin(); it != slow_.end();) {
      bool open = drain(it->fd);
      if (open && it->sent < it->hello.size() && now >= it->nextByte) {
        ssize_t n = ::send(it->fd, &it->hello[it->sent], 1, MSG_NOSIGNAL);
        if (n == 1) {
          ++it->sent;
          it->nextByte = now + kSlowByteEvery;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          open = false;
        }
      }
      if (!open) {
        tally_.serverDropped(kSlowClient, Seconds(now - it->opened).count());
        closeHeld(kSlowClient, *it,
                  it->sent < it->hello.size() ? "closed by the server mid-hello"
                                              : "closed by the server after the hello");
        it = slow_.erase(it);
      } else if (now - it->opened >= kSlowBound) {
        closeHeld(kSlowClient, *it, "closed by us (20 s)");
        it = slow_.erase(it);
      } else {
        ++it;
      }
    }
  }

  pid_t pid_;
  double seconds_;
  std::mt19937_64 rng_;
  Tally tally_;
  std::map<Target, PortState> ports_;
  std::set<std::string> refused_;
  std::deque<Held> halfOpen_;
  std::list<Held> slow_;
  std::list<Worker> workers_;
  std::atomic<int> garbageRunning_{0};
  std::atomic<int> wrongRunning_{0};
  long scans_ = 0;
};

}  // namespace
}  // namespace squeeze::attack

int main(int argc, char** argv) {
  long pid = 0;
  double seconds = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) squeeze::attack::usage(arg + " needs a value");
    char* end = nullptr;
    const char* value = argv[++i];
    if (arg == "--pid") {
      pid = std::strtol(value, &end, 10);
      if (!*value || *end || pid <= 1)
        squeeze::attack::usage(std::string("--pid wants a process id, not '") + value + "'");
    } else if (arg == "--seconds") {
      seconds = std::strtod(value, &end);
      if (!*value || *end || !(seconds >= 1 && seconds <= 3600))
        squeeze::attack::usage(std::string("--seconds wants 1 to 3600, not '") + value + "'");
    } else {
      squeeze::attack::usage("unknown argument '" + arg + "'");
    }
  }
  if (pid == 0 || seconds == 0) squeeze::attack::usage("--pid and --seconds are required");
  if (!squeeze::attack::alive(static_cast<pid_t>(pid))) {
    std::fprintf(stderr, "sqz-attacker: no running process %ld to attack\n", pid);
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);
  return squeeze::attack::Attacker(static_cast<pid_t>(pid), seconds).run();
}
