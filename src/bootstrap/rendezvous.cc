// Rendezvous root and client (see rendezvous.h). Wire, after authentication:
//   rank -> root: JoinRequest (fixed size)
//   root -> rank: JoinReply header {status, round, nranks, message[256]}, then nranks PeerRecords
// The root never allocates from a size an unauthenticated peer sent; nranks is bounded.
#include "bootstrap/rendezvous.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "base/crypto.h"
#include "base/error.h"
#include "base/fd.h"
#include "base/logging.h"
#include "bootstrap/acceptor.h"
#include "bootstrap/rendezvous_wire.h"

namespace squeeze {
namespace {

using rendezvous_wire::JoinReplyHeader;
using rendezvous_wire::JoinRequest;
using rendezvous_wire::PeerRecord;

constexpr int kMaxRanks = 1 << 16;

PeerRecord toRecord(const PeerInfo& p) {
  PeerRecord r{};
  r.rank = p.rank;
  r.pid = p.pid;
  r.family = p.listenAddr.storage.ss_family;
  r.port = p.listenAddr.port();
  if (r.family == AF_INET)
    std::memcpy(r.addr, &reinterpret_cast<const sockaddr_in*>(&p.listenAddr.storage)->sin_addr, 4);
  else
    std::memcpy(r.addr, &reinterpret_cast<const sockaddr_in6*>(&p.listenAddr.storage)->sin6_addr,
                16);
  std::strncpy(r.hostId, p.hostId.c_str(), sizeof r.hostId - 1);
  return r;
}

PeerInfo fromRecord(const PeerRecord& r) {
  PeerInfo p;
  p.rank = r.rank;
  p.pid = r.pid;
  if (r.family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&p.listenAddr.storage);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_addr, r.addr, 4);
    p.listenAddr.len = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&p.listenAddr.storage);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_addr, r.addr, 16);
    p.listenAddr.len = sizeof(sockaddr_in6);
  }
  p.listenAddr.setPort(r.port);
  p.hostId.assign(r.hostId, strnlen(r.hostId, sizeof r.hostId));
  return p;
}

class RootServer {
 public:
  RootServer(Socket listener, UniqueIdData id, int maxRounds, int timeoutMs)
      : listener_(std::move(listener)),
        id_(id),
        maxRounds_(maxRounds),
        timeoutMs_(timeoutMs),
        acceptor_(listener_, id_.secret,
                  strCat("rendezvous root ", listener_.localAddr().toString())),
        wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (wake_.get() < 0) throw SysError("eventfd() for the rendezvous root", errno);
  }

  void run() {
    uint64_t round = 0;
    while (!stopping_ && (maxRounds_ <= 0 || round < static_cast<uint64_t>(maxRounds_))) {
      try {
        if (serveRound(round)) ++round;
      } catch (const std::exception& e) {
        if (stopping_) break;
        SQZ_WARN(kInit, "rendezvous root ", listener_.localAddr().toString(), ": round ", round,
                 " failed: ", e.what());
      }
    }
    SQZ_DEBUG(kInit, "rendezvous root ", listener_.localAddr().toString(), " done after ",
              round, " round(s)", stopping_ ? " (stopped)" : "");
  }

  // Makes run() return soon, from any thread: a wait for connections ends at once; a transfer
  // to a rank that already proved the secret ends within its own bound.
  void stop() {
    stopping_ = true;
    const uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
  }

 private:
  struct Joined {
    Socket sock;
    JoinRequest req;
  };

  // Returns true when the round completed and the table went out.
  bool serveRound(uint64_t round) {
    std::map<int, Joined> joined;
    int nranks = -1;
    Deadline roundDeadline = Deadline::max();
    std::string failure;
    while (nranks < 0 || static_cast<int>(joined.size()) < nranks) {
      auto peer = acceptor_.next(roundDeadline, wake_.get());
      if (stopping_) return false;  // the process exits: the ranks that joined see the close
      if (!peer) {
        failure = strCat("only ", joined.size(), " of ", nranks,
                         " ranks reached the rendezvous before the timeout (", timeoutMs_,
                         " ms); the missing ranks never started or were given another id");
        break;
      }
      Joined j{std::move(peer->sock), {}};
      if (peer->hello.purpose != LinkPurpose::kRendezvous || peer->hello.commHash != id_.nonce) {
        SQZ_WARN(kInit, "rendezvous root: dropped a connection that is not a rendezvous of this id");
        continue;
      }
      try {
        // The client proved the secret: it is one of ours, and sends its request at once.
        Deadline hs = std::min(roundDeadline,
                               deadlineAfterMs(std::min(timeoutMs_, AuthAcceptor::kHandshakeCapMs)));
        j.sock.recvAll(&j.req, sizeof j.req, hs, "rendezvous: reading the join request");
      } catch (const std::exception& e) {
        SQZ_WARN(kInit, "rendezvous root: dropped a connection: ", e.what());
        continue;
      }
      const JoinRequest& r = j.req;
      if (r.nranks < 1 || r.nranks > kMaxRanks || r.self.rank < 0 || r.self.rank >= r.nranks) {
        reject(j.sock, ErrorCode::kInvalidArgument,
               strCat("rank ", r.self.rank, " of ", r.nranks, " is not a valid rank/size"));
        continue;
      }
      if (nranks < 0) {
        nranks = r.nranks;
        roundDeadline = deadlineAfterMs(timeoutMs_);
      }
      if (r.nranks != nranks) {
        failure = strCat("rank ", r.self.rank, " says there are ", r.nranks,
                         " ranks but the first rank to arrive said ", nranks,
                         "; every rank must pass the same nranks");
        reject(j.sock, ErrorCode::kInvalidUsage, failure);
        break;
      }
      if (joined.count(r.self.rank)) {
        failure = strCat("two processes both claim rank ", r.self.rank, " (pids ",
                         joined[r.self.rank].req.self.pid, " and ", r.self.pid,
                         "); every rank must pass a distinct rank");
        reject(j.sock, ErrorCode::kInvalidUsage, failure);
        break;
      }
      int rank = r.self.rank;
      joined.emplace(rank, std::move(j));
    }
    if (!failure.empty()) {
      ErrorCode code = nranks < 0 || failure.find("timeout") != std::string::npos
                           ? ErrorCode::kTimeout
                           : ErrorCode::kInvalidUsage;
      for (auto& [rank, j] : joined) reject(j.sock, code, failure);
      SQZ_WARN(kInit, "rendezvous round ", round, " failed: ", failure);
      return false;
    }
    JoinReplyHeader h{};
    h.status = 0;
    h.nranks = nranks;
    h.round = round;
    std::vector<PeerRecord> table(nranks);
    for (auto& [rank, j] : joined) table[rank] = j.req.self;
    Deadline d = deadlineAfterMs(timeoutMs_);
    for (auto& [rank, j] : joined) {
      try {
        j.sock.sendAll(&h, sizeof h, d, "rendezvous: sending the table");
        j.sock.sendAll(table.data(), table.size() * sizeof(PeerRecord), d,
                       "rendezvous: sending the table");
      } catch (const std::exception& e) {
        SQZ_WARN(kInit, "rendezvous: rank ", rank, " left before the table arrived: ", e.what());
      }
    }
    SQZ_INFO(kInit, "rendezvous round ", round, " complete: ", nranks, " ranks");
    return true;
  }

  void reject(Socket& s, ErrorCode code, const std::string& why) {
    JoinReplyHeader h{};
    h.status = static_cast<int32_t>(code);
    std::strncpy(h.message, why.c_str(), sizeof h.message - 1);
    try {
      s.sendAll(&h, sizeof h, deadlineAfterMs(1000), "rendezvous: sending an error");
    } catch (const std::exception&) {
    }
  }

  Socket listener_;
  UniqueIdData id_;
  int maxRounds_;
  int timeoutMs_;
  AuthAcceptor acceptor_;  // refers to listener_ and id_.secret: declared after them
  Fd wake_;                // stop() writes to it: acceptor_.next() returns
  std::atomic<bool> stopping_{false};
};

// The roots this process hosts, each on a thread of its own that is never detached. A root that
// has served its rounds ends, and its thread is joined at the next start. Every root still
// serving at exit is stopped and joined by an exit handler registered after libcrypto's own, so
// it runs first: no handshake can then ask a cleaned-up libcrypto for random bytes. A root that
// serves every round of a launcher's job (sqzrun, SQZ_ROOT) cannot know when its last rank has
// arrived, so it serves until the process exits. Immortal (never destroyed), so the exit
// handler never meets a destroyed registry. A child forked after a start has none of these
// threads: it leaves the parent's entries alone (joining or waking them would stop the
// parent's roots through the shared eventfd).
class HostedRoots {
 public:
  static HostedRoots& get() {
    static HostedRoots* roots = [] {
      initCrypto();  // first: libcrypto's exit handler is registered before ours
      auto* r = new HostedRoots;
      std::atexit([] { HostedRoots::get().stopAll(); });
      return r;
    }();
    return *roots;
  }

  void start(std::unique_ptr<RootServer> server) {
    std::lock_guard<std::mutex> lock(mu_);
    reapFinished();
    Entry& e = entries_.emplace_back();
    e.pid = ::getpid();
    e.server = std::move(server);
    e.thread = std::thread([&e] {
      e.server->run();
      e.done = true;
    });
  }

  // Stops every root and joins its thread; later starts run as before.
  void stopAll() {
    std::list<Entry> stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = entries_.begin(); it != entries_.end();) {
        auto next = std::next(it);
        if (it->pid == ::getpid()) stopping.splice(stopping.end(), entries_, it);
        it = next;
      }
    }
    for (Entry& e : stopping) e.server->stop();
    for (Entry& e : stopping) e.thread.join();
  }

 private:
  struct Entry {
    pid_t pid = 0;  // the process whose thread serves it
    std::unique_ptr<RootServer> server;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  // Joins (at once) the threads of roots that have served all their rounds. Caller holds mu_.
  void reapFinished() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->done && it->pid == ::getpid()) {
        it->thread.join();
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::mutex mu_;  // protects entries_ (each entry's fields are the thread's own once started)
  std::list<Entry> entries_;
};

}  // namespace

UniqueIdData RendezvousRoot::startWithSecret(const SockAddr& bindAddr, const Secret& secret,
                                             int maxRounds, int timeoutMs) {
  Socket listener = Socket::listenOn(bindAddr);
  UniqueIdData id = UniqueIdData::fromSecret(listener.localAddr(), secret);
  HostedRoots::get().start(
      std::make_unique<RootServer>(std::move(listener), id, maxRounds, timeoutMs));
  SQZ_INFO(kInit, "rendezvous root listening on ", id.root.toString());
  return id;
}

UniqueIdData RendezvousRoot::start(const SockAddr& bindAddr, int maxRounds, int timeoutMs) {
  return startWithSecret(bindAddr, randomSecret(), maxRounds, timeoutMs);
}

RendezvousResult joinRendezvous(const UniqueIdData& id, int rank, int nranks, const PeerInfo& self,
                                int timeoutMs) {
  Deadline deadline = deadlineAfterMs(timeoutMs);
  const std::string where = strCat("rank ", rank, ": rendezvous with the root at ",
                                   id.root.toString());
  Socket s = Socket::connectTo(id.root, deadline, where);
  Hello hello;
  hello.commHash = id.nonce;
  hello.rank = rank;
  hello.purpose = LinkPurpose::kRendezvous;
  authenticateAsClient(s, id.secret, hello, deadline);
  JoinRequest req{};
  req.nranks = nranks;
  req.self = toRecord(self);
  s.sendAll(&req, sizeof req, deadline, where);
  JoinReplyHeader h{};
  s.recvAll(&h, sizeof h, deadline,
            strCat(where, ": waiting for all ", nranks, " ranks to join"));
  if (h.status != 0) {
    const std::string message(h.message, strnlen(h.message, sizeof h.message));
    // Only the codes reject() sends are relayed: any other number from the wire would reach the
    // C API as a result code that means something else, or nothing.
    const auto code = static_cast<ErrorCode>(h.status);
    if (code != ErrorCode::kInvalidArgument && code != ErrorCode::kInvalidUsage &&
        code != ErrorCode::kTimeout)
      raise(ErrorCode::kRemote, where, ": the root sent unknown status ", h.status, ": ", message);
    raise(code, where, " failed: ", message);
  }
  if (h.nranks != nranks) raise(ErrorCode::kRemote, where, ": the root sent a table of ", h.nranks);
  std::vector<PeerRecord> table(nranks);
  s.recvAll(table.data(), table.size() * sizeof(PeerRecord), deadline, where);
  RendezvousResult out;
  out.round = h.round;
  for (int i = 0; i < nranks; ++i) {
    const PeerRecord& r = table[i];
    // The communicator indexes peers by position: entry i must be rank i, with an address.
    if (r.rank != i || (r.family != AF_INET && r.family != AF_INET6))
      raise(ErrorCode::kRemote, where, ": the root sent a bad table (entry ", i, " says rank ",
            r.rank, ", address family ", r.family, ")");
    out.peers.push_back(fromRecord(r));
  }
  return out;
}

std::string localHostId() {
  char host[65] = {};
  gethostname(host, sizeof host - 1);
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  struct stat st{};
  // Ranks in different network namespaces are different hosts for us (the netns test lab).
  uint64_t netns = stat("/proc/self/ns/net", &st) == 0 ? st.st_ino : 0;
  std::string key = strCat(host, "|", bootId, "|", netns);
  Digest d = sha256(key.data(), key.size());
  return strCat(std::string(host).substr(0, 64), "/", toHex(d.data(), 8));
}

}  // namespace squeeze
