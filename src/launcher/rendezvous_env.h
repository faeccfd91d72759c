// The rendezvous root sqzrun hosts on 127.0.0.1 (RendezvousRoot, serving rounds until sqzrun
// exits) and the environment that hands it to every rank: sqzrun's own, plus SQZ_UNIQUE_ID,
// SQZ_RANK, SQZ_WORLD_SIZE, SQZ_LOCAL_RANK, SQZ_LOCAL_SIZE, torch.distributed's RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (and MASTER_ADDR/MASTER_PORT unless the user set
// both), and SQZ_SOCKET_IFNAME=lo unless it is set. So sqzCommInitFromEnv() needs nothing else.
#pragma once

#include <string>
#include <vector>

namespace squeeze::launcher {

struct RankEnvironment {
  std::string uniqueIdHex;
  std::vector<std::string> torchMaster;  // MASTER_ADDR/MASTER_PORT, unless the user set both
  std::string rootAddress;               // where the root listens, for --verbose

  // The environment of rank `rank` of `nranks`, as "NAME=value" strings.
  std::vector<std::string> forRank(int rank, int nranks) const;
};

// Starts the root (in a thread of its own: block signals first) with the rendezvous timeout
// SQZ_TIMEOUT_MS, and picks a free MASTER_PORT unless the user set MASTER_ADDR and MASTER_PORT.
RankEnvironment startRendezvous(int timeoutMs);

}  // namespace squeeze::launcher
