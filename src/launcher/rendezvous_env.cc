// The rendezvous root sqzrun hosts and each rank's environment (see rendezvous_env.h).
#include "rendezvous_env.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include "base/error.h"
#include "base/strings.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/unique_id.h"
#include "transports/tcp/socket.h"

extern char** environ;

namespace squeeze::launcher {

RankEnvironment startRendezvous(int timeoutMs) {
  RankEnvironment env;
  std::string addrError;
  auto addr = SockAddr::parse("127.0.0.1:1", &addrError);
  if (!addr) raise(ErrorCode::kInternal, "cannot parse the loopback address: ", addrError);
  addr->setPort(0);
  UniqueIdData id = RendezvousRoot::start(*addr, /*maxRounds=*/0, timeoutMs);
  char raw[UniqueIdData::kBytes];
  id.serialize(raw);
  env.uniqueIdHex = toHex(raw, sizeof raw);
  if (!std::getenv("MASTER_ADDR") || !std::getenv("MASTER_PORT")) {
    // A port the kernel just handed out and released: torch's store on rank 0 binds it next.
    Socket probe = Socket::listenOn(*addr);
    env.torchMaster = {"MASTER_ADDR=127.0.0.1", strCat("MASTER_PORT=", probe.localAddr().port())};
  }
  env.rootAddress = id.root.toString();
  return env;
}

std::vector<std::string> RankEnvironment::forRank(int rank, int nranks) const {
  static constexpr const char* kOwned[] = {"SQZ_UNIQUE_ID",  "SQZ_RANK",       "SQZ_WORLD_SIZE",
                                           "SQZ_LOCAL_RANK", "SQZ_LOCAL_SIZE", "RANK",
                                           "WORLD_SIZE",     "LOCAL_RANK",     "LOCAL_WORLD_SIZE"};
  std::vector<std::string> env;
  bool haveIfname = false;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    std::string_view key = kv.substr(0, kv.find('='));
    if (std::find(std::begin(kOwned), std::end(kOwned), key) != std::end(kOwned)) continue;
    if (!torchMaster.empty() && (key == "MASTER_ADDR" || key == "MASTER_PORT")) continue;
    if (key == "SQZ_SOCKET_IFNAME") haveIfname = true;
    env.emplace_back(kv);
  }
  env.push_back("SQZ_UNIQUE_ID=" + uniqueIdHex);
  env.push_back(strCat("SQZ_RANK=", rank));
  env.push_back(strCat("SQZ_WORLD_SIZE=", nranks));
  env.push_back(strCat("SQZ_LOCAL_RANK=", rank));
  env.push_back(strCat("SQZ_LOCAL_SIZE=", nranks));
  // torch.distributed's env:// names, so that PyTorch programs run under sqzrun as under torchrun.
  env.push_back(strCat("RANK=", rank));
  env.push_back(strCat("WORLD_SIZE=", nranks));
  env.push_back(strCat("LOCAL_RANK=", rank));
  env.push_back(strCat("LOCAL_WORLD_SIZE=", nranks));
  env.insert(env.end(), torchMaster.begin(), torchMaster.end());
  if (!haveIfname) env.push_back("SQZ_SOCKET_IFNAME=lo");
  return env;
}

}  // namespace squeeze::launcher
