// Peer setup: turns the rendezvous table into one Connection per peer. For each pair there is an
// authenticated control socket (kept for the communicator's life) over which the chosen transport
// sets itself up. Pairs are set up in increasing (higher rank, lower rank) order on every rank —
// the higher rank dials, the lower one accepts — so setup cannot deadlock.
#pragma once

#include <memory>
#include <vector>

#include "bootstrap/unique_id.h"
#include "core/config.h"
#include "transports/transport.h"

namespace squeeze {

struct PeerSet {
  std::vector<std::unique_ptr<Transport>> transports;  // owned; connections may refer to them
  std::vector<std::unique_ptr<Connection>> conns;      // by rank; null for self
  std::vector<Socket> controls;                        // by rank; invalid for self
};

// `listener` is this rank's socket, advertised as peers[myRank].listenAddr.
PeerSet connectPeers(int myRank, const std::vector<PeerInfo>& peers, Socket& listener,
                     const Secret& secret, uint64_t commHash, const CommConfig& config);

}  // namespace squeeze
