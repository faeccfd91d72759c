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
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "bootstrap/auth.h"
#include "bootstrap/unique_id.h"

namespace squeeze::attack {
namespace {

using Seconds = std::chrono::duration<double>;

enum Kind { kScan, kGarbage, kWrongSecret, kHalfOpen, kSlowClient, kNumKinds };
constexpr const char* kKindNames[kNumKinds] = {"scan", "garbage", "wrong-secret", "half-open",
                                               "slow-client"};

constexpr int kConnectMs = 500;
constexpr auto kRevisit = std::chrono::milliseconds(100);  // per port, between two attacks
constexpr size_t kMaxHalfOpen = 16;
constexpr auto kHalfOpenHold = std::chrono::seconds(8);
constexpr size_t kMaxSlow = 8;
constexpr auto kSlowByteEvery = std::chrono::milliseconds(200);
constexpr auto kSlowBound = std::chrono::seconds(20);
constexpr int kMaxWorkers = 8;  // garbage and wrong-secret threads, each
constexpr int kGarbageReadMs = 200;
constexpr int kWrongSecretMs = 3000;
// auth.cc's wire format, spelled out here so the attacker also builds against older bootstraps
// (to show what this test catches there): ClientHello's size, magic and version.
constexpr size_t kHelloBytes = 72;
constexpr uint32_t kAuthMagic = 0x4854515a;  // "ZQTH"
constexpr uint32_t kAuthVersion = 1;

struct Target {
  int family = AF_INET;
  uint16_t port = 0;
  bool operator<(const Target& o) const {
    return family != o.family ? family < o.family : port < o.port;
  }
  std::string name() const {
    return family == AF_INET ? "127.0.0.1:" + std::to_string(port)
                             : "[::1]:" + std::to_string(port);
  }
};

// Counters shared by the main loop and the worker threads.
class Tally {
 public:
  void attempt(Kind k) {
    std::lock_guard<std::mutex> lock(mu_);
    ++attempts_[k];
  }
  void connected(Kind k, const Target& t) {
    std::lock_guard<std::mutex> lock(mu_);
    ++connected_[k];
    ports_[k].insert(t);
  }
  // A named outcome of one attack ("refused", "server closed", ...), with an example message.
  void outcome(Kind k, const std::string& what, const std::string& example = "") {
    std::lock_guard<std::mutex> lock(mu_);
    auto& o = outcomes_[k][what];
    ++o.count;
    if (o.example.empty()) o.example = example;
  }
  // How long the server kept a connection of kind k before closing it.
  void serverDropped(Kind k, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    dropSeconds_[k].push_back(seconds);
  }
  long count(Kind k, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = outcomes_[k].find(what);
    return it == outcomes_[k].end() ? 0 : it->second.count;
  }

  void print() {
    std::lock_guard<std::mutex> lock(mu_);
    for (int k = 0; k < kNumKinds; ++k) {
      std::printf("sqz-attacker: kind %-12s attempts %6ld connected %6ld ports %4zu\n",
                  kKindNames[k], attempts_[k], connected_[k], ports_[k].size());
      for (const auto& [what, o] : outcomes_[k]) {
        std::printf("sqz-attacker:   %-12s %-28s %6ld%s%s\n", kKindNames[k], what.c_str(), o.count,
                    o.example.empty() ? "" : "  e.g. ", o.example.c_str());
      }
      std::vector<double>& d = dropSeconds_[k];
      if (!d.empty()) {
        std::sort(d.begin(), d.end());
        std::printf("sqz-attacker:   %-12s server closed it after      min %.2f s, median %.2f s, "
                    "max %.2f s (%zu connections)\n",
                    kKindNames[k], d.front(), d[d.size() / 2], d.back(), d.size());
      }
    }
    std::fflush(stdout);
  }

 private:
  struct Outcome {
    long count = 0;
    std::string example;
  };
  std::mutex mu_;
  long attempts_[kNumKinds] = {};
  long connected_[kNumKinds] = {};
  std::set<Target> ports_[kNumKinds];
  std::map<std::string, Outcome> outcomes_[kNumKinds];
  std::vector<double> dropSeconds_[kNumKinds];
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "sqz-attacker: %s\n"
               "Usage: sqz-attacker --pid PID --seconds S   (S from 1 to 3600)\n",
               why.c_str());
  std::exit(2);
}

// ---------------------------------------------------------------------------------------------
// Discovery

// False once pid is gone or a zombie (its parent has not reaped it yet, but its ports are closed).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

// pid and every descendant, through /proc/P/task/T/children (one read per task), or, where the
// kernel lacks that file, through the parent field of every /proc/N/stat.
std::vector<pid_t> processTree(pid_t root) {
  std::vector<pid_t> tree{root};
  bool haveChildrenFiles = true;
  for (size_t i = 0; i < tree.size() && haveChildrenFiles; ++i) {
    const std::string taskDir = "/proc/" + std::to_string(tree[i]) + "/task";
    DIR* d = opendir(taskDir.c_str());
    if (!d) continue;  // exited meanwhile
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream children(taskDir + "/" + e->d_name + "/children");
      if (!children) {
        haveChildrenFiles = i > 0;  // missing for the root's tasks: no such file on this kernel
        continue;
      }
      pid_t child;
      while (children >> child) tree.push_back(child);
    }
    closedir(d);
  }
  if (haveChildrenFiles) return tree;

  std::multimap<pid_t, pid_t> byParent;
  DIR* proc = opendir("/proc");
  if (!proc) return {root};
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 2));
    char state;
    pid_t ppid;
    if (rest >> state >> ppid) byParent.emplace(ppid, static_cast<pid_t>(pid));
  }
  closedir(proc);
  tree.assign(1, root);
  for (size_t i = 0; i < tree.size(); ++i) {
    auto [lo, hi] = byParent.equal_range(tree[i]);
    for (auto it = lo; it != hi; ++it) tree.push_back(it->second);
  }
  return tree;
}

std::set<unsigned long> socketInodes(const std::vector<pid_t>& pids) {
  std::set<unsigned long> inodes;
  for (pid_t pid : pids) {
    const std::string fdDir = "/proc/" + std::to_string(pid) + "/fd";
    DIR* d = opendir(fdDir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      char link[64];
      ssize_t n = readlink((fdDir + "/" + e->d_name).c_str(), link, sizeof link - 1);
      if (n <= 0) continue;
      link[n] = '\0';
      unsigned long inode;
      if (std::sscanf(link, "socket:[%lu]", &inode) == 1) inodes.insert(inode);
    }
    closedir(d);
  }
  return inodes;
}

struct Listeners {
  std::set<Target> loopback;
  std::set<std::string> other;  // listeners on any other address: never attacked
};

// LISTEN (state 0A) entries of /proc/PID/net/tcp{,6} whose inode is in `inodes`.
Listeners listeners(pid_t pid, const std::set<unsigned long>& inodes) {
  Listeners out;
  for (int family : {AF_INET, AF_INET6}) {
    std::ifstream table("/proc/" + std::to_string(pid) +
                        (family == AF_INET ? "/net/tcp" : "/net/tcp6"));
    std::string line;
    std::getline(table, line);  // header
    while (std::getline(table, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout;
      unsigned long inode = 0;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode))
        continue;
      if (state != "0A" || !inodes.count(inode)) continue;
      const size_t colon = local.find(':');
      if (colon == std::string::npos) continue;
      const std::string addrHex = local.substr(0, colon);
      Target t;
      t.family = family;
      t.port = static_cast<uint16_t>(std::strtoul(local.c_str() + colon + 1, nullptr, 16));
      // The kernel prints each 32-bit word of the address as it lies in memory, in host order.
      bool isLoopback;
      if (family == AF_INET) {
        in_addr a{};
        a.s_addr = static_cast<uint32_t>(std::strtoul(addrHex.c_str(), nullptr, 16));
        isLoopback = addrHex.size() == 8 && a.s_addr == htonl(INADDR_LOOPBACK);
      } else {
        in6_addr a{};
        for (int w = 0; w < 4 && addrHex.size() == 32; ++w) {
          uint32_t word =
              static_cast<uint32_t>(std::strtoul(addrHex.substr(8 * w, 8).c_str(), nullptr, 16));
          std::memcpy(a.s6_addr + 4 * w, &word, 4);
        }
        isLoopback = addrHex.size() == 32 && IN6_IS_ADDR_LOOPBACK(&a);
      }
      if (isLoopback)
        out.loopback.insert(t);
      else
        out.other.insert(local + " (" + (family == AF_INET ? "tcp" : "tcp6") + ")");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Connections

// A non-blocking socket connected to the target on loopback, or -1 (errno-style code in *err).
int connectLoopback(const Target& t, int* err) {
  sockaddr_storage ss{};
  socklen_t len;
  if (t.family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = htons(t.port);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    a->sin6_port = htons(t.port);
    len = sizeof *a;
  }
  int fd = ::socket(t.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, kConnectMs) != 1) {
      ::close(fd);
      *err = ETIMEDOUT;
      return -1;
    }
    int soErr = 0;
    socklen_t soLen = sizeof soErr;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &soLen);
    rc = soErr == 0 ? 0 : -1;
    errno = soErr;
  }
  if (rc != 0) {
    *err = errno;
    ::close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Connects for an attack of kind k, counting the attempt and its result.
int connectFor(Kind k, const Target& t, Tally& tally) {
  tally.attempt(k);
  int err = 0;
  int fd = connectLoopback(t, &err);
  if (fd < 0) {
    tally.outcome(k, std::string("connect failed: ") + std::strerror(err));
    return -1;
  }
  tally.connected(k, t);
  return fd;
}

// Closes with an RST instead of a FIN.
void abortiveClose(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
}

// Reads whatever is there without waiting. False once the peer closed or reset the connection.
bool drain(int fd) {
  char buf[512];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

// A hello that passes every size and magic check and fails only the proof.
std::vector<uint8_t> plausibleHello(std::mt19937_64& rng) {
  std::vector<uint8_t> h(kHelloBytes);
  for (auto& b : h) b = static_cast<uint8_t>(rng());
  const uint32_t magic = kAuthMagic, version = kAuthVersion;
  const int32_t rank = static_cast<int32_t>(rng() % 4);
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 4);
  std::memcpy(h.data() + 16, &rank, 4);
  h[20] = static_cast<uint8_t>(1 + rng() % 3);  // purpose
  h[21] = 0;
  h[22] = h[23] = 0;  // index
  return h;
}

// ---------------------------------------------------------------------------------------------
// The attacks that block (bounded): each runs on its own thread.

void garbage(Target t, uint64_t seed, Tally& tally) {
  int fd = connectFor(kGarbage, t, tally);
  if (fd < 0) return;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> bytes(1024 + rng() % (15 * 1024));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  // Fields a careless parser would size an allocation or a loop from.
  const uint32_t huge[] = {0xffffffffu, 0x7fffffffu, 0x40000000u, 0x80000000u, 0x00ffffffu};
  for (size_t off = 0; off + 8 <= bytes.size(); off += 512) {
    uint32_t v = huge[rng() % std::size(huge)];
    std::memcpy(&bytes[off], &v, 4);
    std::memcpy(&bytes[off + 4], &v, 4);
  }
  if (rng() % 2) {  // past the magic and version check, into the fields behind it
    std::memcpy(&bytes[0], &kAuthMagic, 4);
    std::memcpy(&bytes[4], &kAuthVersion, 4);
  }
  size_t sent = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (sent < bytes.size() && std::chrono::steady_clock::now() < until) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 50);
    } else if (n < 0 && errno != EINTR) {
      break;  // the server closed on us: the expected answer to garbage
    }
  }
  size_t received = 0;
  bool closedByServer = false;
  const auto start = std::chrono::steady_clock::now();
  const auto readUntil = start + std::chrono::milliseconds(kGarbageReadMs);
  char buf[4096];
  while (!closedByServer && std::chrono::steady_clock::now() < readUntil) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    readUntil - std::chrono::steady_clock::now())
                                    .count());
    if (::poll(&p, 1, std::max(left, 0)) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0)
      received += static_cast<size_t>(n);
    else if (n == 0 || errno != EINTR)
      closedByServer = true;
  }
  ::close(fd);
  tally.outcome(kGarbage, closedByServer ? "closed by the server" : "still open after 200 ms",
                std::to_string(sent) + " B sent, " + std::to_string(received) + " B back");
}

void wrongSecret(Target t, uint64_t seed, Tally& tally) {
  int fd = connectFor(kWrongSecret, t, tally);
  if (fd < 0) return;
  Socket s(fd);
  Secret secret = randomSecret();
  Hello hello;
  hello.commHash = seed;  // nobody's comm hash
  hello.rank = static_cast<int32_t>(seed % 4);
  hello.purpose = static_cast<LinkPurpose>(1 + (seed >> 8) % 3);
  hello.index = 0;
  try {
    authenticateAsClient(s, secret, hello, deadlineAfterMs(kWrongSecretMs));
    tally.outcome(kWrongSecret, "ACCEPTED (security bug)", t.name());
  } catch (const Error& e) {
    const std::string what = e.what();
    std::string outcome = "refused: " + std::string(e.code() == ErrorCode::kTimeout ? "no answer"
                                                    : e.code() == ErrorCode::kRemote ? "closed"
                                                                                     : "other");
    if (what.find("reading the challenge") != std::string::npos) outcome += " before challenge";
    tally.outcome(kWrongSecret, outcome, what.substr(0, 100));
  }
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
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 Seconds(seconds_));
    bool pidExited = false;
    while (std::chrono::steady_clock::now() < end) {
      if (!alive(pid_)) {
        pidExited = true;
        break;
      }
      const Listeners found = listeners(pid_, socketInodes(processTree(pid_)));
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
    std::printf("sqz-attacker: %s after %.1f s; %zu loopback listening ports seen, %zu other "
                "listeners left alone\n",
                pidExited ? (std::string("pid ") + std::to_string(pid_) + " exited").c_str()
                          : "time is up",
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
