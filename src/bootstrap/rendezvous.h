// Rendezvous: every rank connects to the root, proves the secret and sends its PeerInfo; when all
// nranks have arrived the root checks that they agree (same nranks, distinct ranks) and sends
// everyone the table. The root serves rounds one after another: each round makes one
// communicator, and the round number goes into its hash.
#pragma once

#include <memory>
#include <vector>

#include "bootstrap/unique_id.h"
#include "transports/transport.h"

namespace squeeze {

class RendezvousRoot {
 public:
  // Listens on `bindAddr` (port 0: ephemeral) and serves up to maxRounds rounds on a background
  // thread (maxRounds <= 0: until the process exits). Returns the id ranks must use.
  static UniqueIdData start(const SockAddr& bindAddr, int maxRounds, int timeoutMs);
  // Like start(), with a caller-chosen secret (SQZ_ROOT / MASTER_ADDR rendezvous).
  static UniqueIdData startWithSecret(const SockAddr& bindAddr, const Secret& secret,
                                      int maxRounds, int timeoutMs);
};

struct RendezvousResult {
  std::vector<PeerInfo> peers;  // indexed by rank
  uint64_t round = 0;
};

// Joins the rendezvous of `id` as `rank` of `nranks`. Throws Error(kTimeout) if the root is not
// reachable or the others do not arrive in time; kInvalidUsage if the ranks disagree.
RendezvousResult joinRendezvous(const UniqueIdData& id, int rank, int nranks,
                                const PeerInfo& self, int timeoutMs);

// This host's identity for transport selection: hostname, boot id and network namespace.
std::string localHostId();

}  // namespace squeeze
