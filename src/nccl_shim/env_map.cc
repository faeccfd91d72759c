// The NCCL_* -> SQZ_* table. Only variables with a Squeeze meaning are here; docs/porting.md lists
// the NCCL ones that have none (NCCL_PROTO, NCCL_BUFFSIZE, NCCL_*CHANNELS, NCCL_IB_*, ...), which
// the shim ignores.
#include "nccl_shim/env_map.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "base/strings.h"

namespace squeeze::nccl_shim {

namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool isOne(const GetEnv& get, const char* name) {
  auto v = get(name);
  return v && trim(*v) == "1";
}

// NCCL_DEBUG: VERSION WARN INFO ABORT TRACE -> Squeeze's levels (no version banner, no abort).
std::optional<std::string> debugLevel(const GetEnv& get) {
  auto v = get("NCCL_DEBUG");
  if (!v) return std::nullopt;
  const std::string level = upper(trim(*v));
  if (level == "INFO" || level == "TRACE" || level == "WARN") return level;
  if (level == "VERSION" || level == "ABORT") return std::string("WARN");
  return std::nullopt;
}

// NCCL_DEBUG_SUBSYS: NCCL's subsystems -> Squeeze's (INIT, TRANSPORT, ALGO, TUNING, ENV, ALL);
// a leading ^ negates the list in both.
std::optional<std::string> debugSubsys(const GetEnv& get) {
  auto v = get("NCCL_DEBUG_SUBSYS");
  if (!v) return std::nullopt;
  std::string list = trim(*v);
  std::string prefix;
  if (!list.empty() && list[0] == '^') {
    prefix = "^";
    list = list.substr(1);
  }
  static const std::pair<const char*, const char*> kSubsys[] = {
      {"INIT", "INIT"},   {"BOOTSTRAP", "INIT"}, {"NET", "TRANSPORT"}, {"SHM", "TRANSPORT"},
      {"P2P", "TRANSPORT"}, {"COLL", "ALGO"},    {"TUNING", "TUNING"}, {"ENV", "ENV"},
      {"ALL", "ALL"}};
  std::string out;
  for (const std::string& item : split(list, ',')) {
    for (const auto& [nccl, sqz] : kSubsys)
      if (upper(trim(item)) == nccl && out.find(sqz) == std::string::npos)
        out += strCat(out.empty() ? "" : ",", sqz);
  }
  if (out.empty()) return std::nullopt;
  return prefix + out;
}

std::optional<std::string> same(const GetEnv& get, const char* name) {
  auto v = get(name);
  if (!v || trim(*v).empty()) return std::nullopt;
  return trim(*v);
}

// NCCL_ALGO: Ring and Tree (NCCL's tree is a double binary tree, as Squeeze's "tree"); the rest
// (CollNet*, NVLS*, PAT) have no Squeeze algorithm, and an exclusion list (^...) no form in
// SQZ_ALGO: those leave the choice to Squeeze's tuner.
std::optional<std::string> algo(const GetEnv& get) {
  auto v = get("NCCL_ALGO");
  if (!v) return std::nullopt;
  const std::string list = trim(*v);
  if (list.empty() || list[0] == '^' || list.find(':') != std::string::npos) return std::nullopt;
  std::string out;
  for (const std::string& item : split(list, ',')) {
    const std::string name = upper(trim(item));
    const char* sqz = name == "RING" ? "ring" : name == "TREE" ? "tree" : nullptr;
    if (sqz) out += strCat(out.empty() ? "" : ",", sqz);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD: sockets per peer connection, Squeeze's 1-16.
std::optional<std::string> tcpSockets(const GetEnv& get) {
  auto threads = get("NCCL_SOCKET_NTHREADS"), perThread = get("NCCL_NSOCKS_PERTHREAD");
  if (!threads && !perThread) return std::nullopt;
  const long t = threads ? std::strtol(threads->c_str(), nullptr, 10) : 1;
  const long s = perThread ? std::strtol(perThread->c_str(), nullptr, 10) : 1;
  if (t < 1 || s < 1) return std::nullopt;
  return std::to_string(std::min(16L, t * s));
}

// NCCL_P2P_DISABLE (GPU to GPU within a host: Squeeze's cuda_ipc) and NCCL_SHM_DISABLE.
std::optional<std::string> transports(const GetEnv& get) {
  const bool noP2p = isOne(get, "NCCL_P2P_DISABLE"), noShm = isOne(get, "NCCL_SHM_DISABLE");
  if (!noP2p && !noShm) return std::nullopt;
  std::string out;
  if (!noP2p) out += "cuda_ipc,";
  if (!noShm) out += "shm,";
  return out + "tcp";
}

}  // namespace

const std::vector<EnvMapping>& envMappings() {
  static const std::vector<EnvMapping> table = {
      {"SQZ_DEBUG", "NCCL_DEBUG", debugLevel},
      {"SQZ_DEBUG_SUBSYS", "NCCL_DEBUG_SUBSYS", debugSubsys},
      {"SQZ_DEBUG_FILE", "NCCL_DEBUG_FILE",
       [](const GetEnv& get) { return same(get, "NCCL_DEBUG_FILE"); }},
      {"SQZ_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
       [](const GetEnv& get) { return same(get, "NCCL_SOCKET_IFNAME"); }},
      {"SQZ_ALGO", "NCCL_ALGO", algo},
      {"SQZ_TCP_NSOCKS", "NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD", tcpSockets},
      {"SQZ_TRANSPORT", "NCCL_P2P_DISABLE, NCCL_SHM_DISABLE", transports},
  };
  return table;
}

std::vector<std::pair<std::string, std::string>> mappedEnv(const GetEnv& get) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const EnvMapping& m : envMappings()) {
    if (get(m.sqz)) continue;
    if (auto value = m.translate(get)) out.emplace_back(m.sqz, *value);
  }
  return out;
}

void applyNcclEnv() {
  static std::once_flag once;
  std::call_once(once, [] {
    GetEnv get = [](const char* name) -> std::optional<std::string> {
      const char* v = std::getenv(name);
      return v ? std::optional<std::string>(v) : std::nullopt;
    };
    for (const auto& [name, value] : mappedEnv(get)) setenv(name.c_str(), value.c_str(), 0);
  });
}

}  // namespace squeeze::nccl_shim
