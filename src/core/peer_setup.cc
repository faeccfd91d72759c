// Peer setup (see peer_setup.h).
#include "core/peer_setup.h"

#include <map>
#include <tuple>

#include "base/error.h"
#include "base/logging.h"
#include "bootstrap/acceptor.h"

namespace squeeze {
namespace {

// Accepts authenticated sockets and hands them out by (rank, purpose, index), whatever order
// they arrive in.
class PeerAcceptor {
 public:
  PeerAcceptor(Socket& listener, const Secret& secret, uint64_t commHash, int myRank)
      : listener_(listener),
        acceptor_(listener, secret, strCat("rank ", myRank, "'s listener")),
        commHash_(commHash),
        myRank_(myRank) {}

  Socket take(int rank, LinkPurpose purpose, uint16_t index, Deadline deadline) {
    const Key key{rank, static_cast<int>(purpose), index};
    for (;;) {
      auto it = stash_.find(key);
      if (it != stash_.end()) {
        Socket s = std::move(it->second);
        stash_.erase(it);
        return s;
      }
      auto peer = acceptor_.next(deadline);
      if (!peer)
        raise(ErrorCode::kTimeout, "rank ", myRank_, " waited for rank ", rank,
              " to connect until the timeout; that rank is not running, is stuck, or cannot "
              "reach ", listener_.localAddr().toString(),
              " (check SQZ_SOCKET_IFNAME on both sides)");
      const Hello& h = peer->hello;
      if (h.commHash != commHash_) {
        SQZ_WARN(kInit, "rank ", myRank_, ": dropped a connection from rank ", h.rank,
                 " of another communicator");
        continue;
      }
      stash_[Key{h.rank, static_cast<int>(h.purpose), h.index}] = std::move(peer->sock);
    }
  }

 private:
  using Key = std::tuple<int, int, int>;
  Socket& listener_;
  AuthAcceptor acceptor_;
  uint64_t commHash_;
  int myRank_;
  std::map<Key, Socket> stash_;
};

class SocketPeerLink final : public PeerLink {
 public:
  SocketPeerLink(Socket& control, int myRank, const PeerInfo& peer, PeerAcceptor& acceptor,
                 const Secret& secret, uint64_t commHash, Deadline deadline)
      : control_(control), myRank_(myRank), peer_(peer), acceptor_(acceptor), secret_(secret),
        commHash_(commHash), deadline_(deadline),
        what_(strCat("setup between rank ", myRank, " and rank ", peer.rank)) {}

  void sendBytes(const void* data, size_t n) override {
    control_.sendAll(data, n, deadline_, what_);
  }
  void recvBytes(void* data, size_t n) override { control_.recvAll(data, n, deadline_, what_); }

  Socket openDataSocket(uint16_t index) override {
    if (myRank_ < peer_.rank) return acceptor_.take(peer_.rank, LinkPurpose::kData, index, deadline_);
    Socket s = Socket::connectTo(peer_.listenAddr, deadline_, what_);
    authenticateAsClient(s, secret_, Hello{commHash_, myRank_, LinkPurpose::kData, index},
                         deadline_);
    return s;
  }

 private:
  Socket& control_;
  int myRank_;
  const PeerInfo& peer_;
  PeerAcceptor& acceptor_;
  const Secret& secret_;
  uint64_t commHash_;
  Deadline deadline_;
  std::string what_;
};

}  // namespace

PeerSet connectPeers(int myRank, const std::vector<PeerInfo>& peers, Socket& listener,
                     const Secret& secret, uint64_t commHash, const CommConfig& config) {
  const int n = static_cast<int>(peers.size());
  PeerSet set;
  set.conns.resize(n);
  set.controls.resize(n);
  TransportContext tctx{myRank, n, commHash, config};
  for (const std::string& name : config.transports) {
    auto t = createTransport(name, tctx);
    SQZ_ENFORCE(t != nullptr, "transport ", name, " was validated but cannot be created");
    set.transports.push_back(std::move(t));
  }
  PeerAcceptor acceptor(listener, secret, commHash, myRank);
  const Deadline deadline = deadlineAfterMs(config.timeoutMs);

  auto setupPair = [&](int peer) {
    Socket& control = set.controls[peer];
    if (peer < myRank) {
      control = Socket::connectTo(peers[peer].listenAddr, deadline,
                                  strCat("rank ", myRank, ": connecting to rank ", peer));
      authenticateAsClient(control, secret, Hello{commHash, myRank, LinkPurpose::kControl, 0},
                           deadline);
    } else {
      control = acceptor.take(peer, LinkPurpose::kControl, 0, deadline);
    }
    Transport* chosen = nullptr;
    for (auto& t : set.transports)
      if (t->canConnect(peers[myRank], peers[peer])) {
        chosen = t.get();
        break;
      }
    // Both sides must choose alike; say which we chose and compare.
    char mine[16] = {}, theirs[16] = {};
    if (chosen) std::snprintf(mine, sizeof mine, "%s", chosen->name());
    control.sendAll(mine, sizeof mine, deadline, "transport selection");
    control.recvAll(theirs, sizeof theirs, deadline, "transport selection");
    theirs[sizeof theirs - 1] = '\0';
    if (!chosen)
      raise(ErrorCode::kInvalidUsage, "rank ", myRank, " has no transport in SQZ_TRANSPORT that"
            " can reach rank ", peer, " on host ", peers[peer].hostId,
            " (shm reaches only ranks on this host); add tcp to SQZ_TRANSPORT.");
    if (std::string(mine) != theirs)
      raise(ErrorCode::kInvalidUsage, "rank ", myRank, " chose transport ", mine, " for rank ",
            peer, " but rank ", peer, " chose '", theirs,
            "'; give all ranks the same SQZ_TRANSPORT.");
    SocketPeerLink link(control, myRank, peers[peer], acceptor, secret, commHash, deadline);
    set.conns[peer] = chosen->connect(LinkSetup{myRank, peers[myRank], peers[peer], commHash,
                                                config, link});
  };

  for (int peer = 0; peer < myRank; ++peer) setupPair(peer);
  for (int peer = myRank + 1; peer < n; ++peer) setupPair(peer);
  for (auto& t : set.transports) t->setupDone();
  return set;
}

}  // namespace squeeze
