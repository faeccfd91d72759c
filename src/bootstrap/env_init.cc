// Launcher environment detection for sqzCommInitFromEnv (see env_init.h).
#include "bootstrap/env_init.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "base/crypto.h"
#include "base/error.h"
#include "base/logging.h"
#include "bootstrap/rendezvous.h"

namespace squeeze {
namespace {

const char* env(const char* key) {
  const char* v = std::getenv(key);
  return v && *v ? v : nullptr;
}

int parseInt(const char* key, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (*end != '\0' || v < 0 || v > (1 << 24))
    raise(ErrorCode::kInvalidArgument, key, "='", value, "' is not a rank or size.");
  return static_cast<int>(v);
}

// SQZ_SECRET is required: an unauthenticated rendezvous lets anyone who can reach the port join
// the job or feed it data. "none" is the explicit, logged opt-out for a trusted network.
Secret secretFrom(const Params& p, const std::string& rootAddr, int rank) {
  Secret s{};
  if (p.secret.empty())
    raise(ErrorCode::kInvalidUsage, "SQZ_ROOT rendezvous at ", rootAddr, " needs SQZ_SECRET: "
          "set the same 32 random hex digits on every rank (e.g. export SQZ_SECRET=$(head -c16 "
          "/dev/urandom | xxd -p) before launching), or SQZ_SECRET=none to run unauthenticated "
          "on a network you trust; sqzrun and sqzGetUniqueId make a secret for you.");
  if (p.secret == "none") {
    if (rank == 0)
      SQZ_WARN(kInit, "SQZ_SECRET=none: the rendezvous at ", rootAddr,
               " is unauthenticated (anyone who can reach it can join the job).");
    std::string seed = "sqz-unauthenticated|" + rootAddr;
    Digest d = sha256(seed.data(), seed.size());
    std::memcpy(s.data(), d.data(), s.size());
    return s;
  }
  if (!fromHex(p.secret, s.data(), s.size()))
    raise(ErrorCode::kInvalidArgument, "SQZ_SECRET must be 32 hex digits (128 bits), e.g. from "
          "'head -c16 /dev/urandom | xxd -p', or 'none'; it is not (its value is not shown).");
  return s;
}

// Roots this process hosts, by address: a second sqzCommInitFromEnv reuses the running one.
UniqueIdData hostedRoot(const SockAddr& addr, const Secret& secret, int timeoutMs) {
  static std::mutex mu;
  static std::map<std::string, UniqueIdData> roots;
  std::lock_guard<std::mutex> lock(mu);
  auto it = roots.find(addr.toString());
  if (it != roots.end()) return it->second;
  UniqueIdData id = RendezvousRoot::startWithSecret(addr, secret, 0, timeoutMs);
  roots.emplace(addr.toString(), id);
  return id;
}

}  // namespace

EnvRendezvous resolveEnvRendezvous(const Params& p, int timeoutMs) {
  EnvRendezvous out;
  struct Pair {
    const char* rank;
    const char* size;
  };
  static const Pair kPairs[] = {{"SQZ_RANK", "SQZ_WORLD_SIZE"},
                                {"RANK", "WORLD_SIZE"},
                                {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                {"PMI_RANK", "PMI_SIZE"},
                                {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const Pair& pair : kPairs) {
    if (env(pair.rank) && env(pair.size)) {
      out.rank = parseInt(pair.rank, env(pair.rank));
      out.nranks = parseInt(pair.size, env(pair.size));
      out.source = strCat(pair.rank, "/", pair.size);
      break;
    }
  }
  if (out.rank < 0)
    raise(ErrorCode::kInvalidUsage,
          "sqzCommInitFromEnv found no launcher environment: set SQZ_RANK and SQZ_WORLD_SIZE "
          "(or run under sqzrun, torchrun, mpirun or srun).");
  if (out.nranks < 1 || out.rank >= out.nranks)
    raise(ErrorCode::kInvalidArgument, out.source, " gives rank ", out.rank, " of ", out.nranks,
          "; the rank must be below the size.");

  if (!p.uniqueId.empty()) {
    char raw[UniqueIdData::kBytes];
    if (!fromHex(p.uniqueId, raw, sizeof raw))
      raise(ErrorCode::kInvalidArgument, "SQZ_UNIQUE_ID must be ", 2 * sizeof raw,
            " hex digits (as sqzrun sets it).");
    out.id = UniqueIdData::parse(raw);
    out.source += " + SQZ_UNIQUE_ID";
    return out;
  }

  std::string rootStr = p.root;
  if (rootStr.empty() && env("MASTER_ADDR") && env("MASTER_PORT"))
    rootStr = strCat(env("MASTER_ADDR"), ":", env("MASTER_PORT"));
  if (rootStr.empty())
    raise(ErrorCode::kInvalidUsage, "sqzCommInitFromEnv has a rank (", out.source,
          ") but no rendezvous address: set SQZ_ROOT=host:port (or MASTER_ADDR and "
          "MASTER_PORT) to an address rank 0 can listen on.");
  std::string error;
  auto addr = SockAddr::parse(rootStr, &error);
  if (!addr)
    raise(ErrorCode::kInvalidArgument, "the rendezvous address '", rootStr, "' is invalid: ",
          error);
  Secret secret = secretFrom(p, addr->toString(), out.rank);
  out.source += " + root " + addr->toString();
  if (out.rank == 0) {
    out.id = hostedRoot(*addr, secret, timeoutMs);
    return out;
  }
  out.id = UniqueIdData::fromSecret(*addr, secret);
  return out;
}

}  // namespace squeeze
