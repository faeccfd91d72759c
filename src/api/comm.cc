// The C API's communicator calls: unique ids, init (sqzConfig_t resolved over the SQZ_*
// parameters), split, revoke, shrink and grow (which move the communicator's codecs to the new
// one), finalize, destroy and abort, and the queries (rank, size, device, async
// error, last algorithm). It also keeps the set of live communicators that commIsLive reads,
// and stops their threads at exit.
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "api/api_checks.h"
#include "base/params.h"
#include "bootstrap/env_init.h"
#include "bootstrap/rendezvous.h"
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include "device/cuda/runtime.h"
#endif

using namespace squeeze;
using namespace squeeze::api;

namespace {

// The communicators alive now (from init or split until destroy or abort), for commIsLive.
std::mutex liveCommsMu;  // protects liveComms
std::set<const sqzComm*> liveComms;

pid_t liveCommsPid = 0;  // the process that registered stopThreadsAtExit

// At exit, the communicators the program did not destroy: their progress threads are joined, so
// nothing of Squeeze runs while the process, the CUDA runtime and libcrypto wind down. Their
// connections stay as they are: the kernel closes them with the process, after what was already
// sent, as it would without this. A child forked from the process has none of these threads.
void stopThreadsAtExit() {
  if (::getpid() != liveCommsPid) return;
  std::lock_guard<std::mutex> lock(liveCommsMu);
  for (const sqzComm* comm : liveComms) comm->impl->stopThreads();
}

sqzComm* adopt(std::unique_ptr<sqzComm> handle) {
  // Exit handlers run in reverse order of registration: registered once the first communicator
  // (and again once the first device communicator) exists, after libcrypto and the CUDA runtime
  // it set up registered theirs, ours runs first.
  static std::once_flag first, firstDevice;
  auto registerHandler = [] {
    liveCommsPid = ::getpid();
    std::atexit(stopThreadsAtExit);
  };
  std::call_once(first, registerHandler);
  if (handle->impl->config().device >= 0) std::call_once(firstDevice, registerHandler);
  std::lock_guard<std::mutex> lock(liveCommsMu);
  liveComms.insert(handle.get());
  return handle.release();
}

void forget(sqzComm* comm) {
  std::lock_guard<std::mutex> lock(liveCommsMu);
  liveComms.erase(comm);
}

CommConfig resolveConfig(const sqzConfig_t* cfg) {
  Params p = loadParams();
  if (cfg) {
    if (cfg->magic != SQZ_CONFIG_MAGIC)
      raise(ErrorCode::kInvalidArgument, "sqzConfig_t was not initialized; start from "
            "'sqzConfig_t config = SQZ_CONFIG_INITIALIZER;'.");
    if (cfg->size < offsetof(sqzConfig_t, socketIfname) + sizeof(cfg->socketIfname))
      raise(ErrorCode::kInvalidArgument, "sqzConfig_t.size is ", cfg->size,
            ", smaller than this library's; rebuild against this squeeze.h.");
    if (cfg->timeoutMs != SQZ_CONFIG_UNDEF_INT) p.timeoutMs = cfg->timeoutMs;
    if (cfg->transports) p.transport = cfg->transports;
    if (cfg->tcpNsocks != SQZ_CONFIG_UNDEF_INT) p.tcpNsocks = cfg->tcpNsocks;
    if (cfg->chunkBytes != SQZ_CONFIG_UNDEF_INT) {
      if (cfg->chunkBytes < 0)
        raise(ErrorCode::kInvalidArgument, "sqzConfig_t.chunkBytes is negative");
      p.chunkBytes = static_cast<uint64_t>(cfg->chunkBytes);
    }
    if (cfg->socketIfname) p.socketIfname = cfg->socketIfname;
  }
  CommConfig config = CommConfig::fromParams(p);
  const bool hasDevice = cfg && cfg->size >= offsetof(sqzConfig_t, device) + sizeof(cfg->device) &&
                         cfg->device != SQZ_CONFIG_UNDEF_INT;
#if SQZ_HAVE_CUDA
  if (hasDevice) {
    if (cfg->device < 0 || cfg->device >= cuda::deviceCount())
      raise(ErrorCode::kInvalidArgument, "sqzConfig_t.device is ", cfg->device, "; this process "
            "sees ", cuda::deviceCount(), " GPU(s)",
            cuda::deviceCount() ? "" : strCat(" (", cuda::unavailableReason(), ")"), ".");
    config.device = cfg->device;
  } else if (cuda::deviceCount() > 0) {
    config.device = cuda::currentDevice();  // as NCCL: the device current at init
  }
#else
  if (hasDevice)
    raise(ErrorCode::kInvalidArgument, "sqzConfig_t.device is set, but this build of Squeeze has "
          "no CUDA support (rebuild with the CUDA toolkit installed).");
#endif
  return config;
}

sqzResult_t initRank(sqzComm_t* out, int nranks, const UniqueIdData* parsedId,
                     const sqzUniqueId* rawId, int rank, const sqzConfig_t* cfg) {
  return apiGuard(nullptr, [&] {
    if (!out) raise(ErrorCode::kInvalidArgument, "sqzCommInitRank: comm pointer is NULL.");
    *out = nullptr;
    if (nranks < 1)
      raise(ErrorCode::kInvalidArgument, "sqzCommInitRank: nranks is ", nranks, "; it must be >= 1.");
    if (rank < 0 || rank >= nranks)
      raise(ErrorCode::kInvalidArgument, "sqzCommInitRank: rank ", rank,
            " is out of range for nranks ", nranks, " (0 .. ", nranks - 1, ").");
    CommConfig config = resolveConfig(cfg);
    UniqueIdData id = parsedId ? *parsedId : UniqueIdData::parse(rawId->internal);
    auto handle = std::make_unique<sqzComm>();
    handle->impl = Communicator::create(id, rank, nranks, config);
    *out = adopt(std::move(handle));
  });
}

}  // namespace

namespace squeeze::api {

bool commIsLive(const sqzComm* comm) {
  std::lock_guard<std::mutex> lock(liveCommsMu);
  return liveComms.count(comm) != 0;
}

}  // namespace squeeze::api

extern "C" {

sqzResult_t sqzGetUniqueId(sqzUniqueId* uniqueId) {
  return apiGuard(nullptr, [&] {
    if (!uniqueId) raise(ErrorCode::kInvalidArgument, "sqzGetUniqueId: uniqueId is NULL.");
    Params p = loadParams();
    CommConfig config = CommConfig::fromParams(p);
    SockAddr addr = chooseInterfaceAddress(config.socketIfname);
    addr.setPort(0);
    UniqueIdData id = RendezvousRoot::start(addr, 1, config.timeoutMs);
    id.serialize(uniqueId->internal);
  });
}

sqzResult_t sqzCommInitRank(sqzComm_t* comm, int nranks, sqzUniqueId commId, int rank) {
  return initRank(comm, nranks, nullptr, &commId, rank, nullptr);
}

sqzResult_t sqzCommInitRankConfig(sqzComm_t* comm, int nranks, sqzUniqueId commId, int rank,
                                  const sqzConfig_t* config) {
  return initRank(comm, nranks, nullptr, &commId, rank, config);
}

sqzResult_t sqzCommInitFromEnv(sqzComm_t* comm, const sqzConfig_t* config) {
  EnvRendezvous env;
  sqzResult_t rc = apiGuard(nullptr, [&] {
    if (!comm) raise(ErrorCode::kInvalidArgument, "sqzCommInitFromEnv: comm pointer is NULL.");
    env = resolveEnvRendezvous(loadParams(), resolveConfig(config).timeoutMs);
    SQZ_INFO(kEnv, "sqzCommInitFromEnv: rank ", env.rank, " of ", env.nranks, " from ",
             env.source);
  });
  if (rc != sqzSuccess) return rc;
  return initRank(comm, env.nranks, &env.id, nullptr, env.rank, config);
}

sqzResult_t sqzCommFinalize(sqzComm_t comm) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommFinalize");
    comm->impl->drainDevice();
    if (auto err = comm->impl->asyncError()) throw *err;
  });
}

sqzResult_t sqzCommDestroy(sqzComm_t comm) {
  if (!comm) return sqzSuccess;
  return apiGuard(nullptr, [&] {
    checkComm(comm, "sqzCommDestroy");
    comm->magic = 0;
    forget(comm);
    delete comm;
  });
}

sqzResult_t sqzCommAbort(sqzComm_t comm) {
  if (!comm) return sqzSuccess;
  sqzResult_t rc = apiGuard(nullptr, [&] {
    checkComm(comm, "sqzCommAbort");
    comm->impl->abort();  // a call in flight on another thread returns promptly
  });
  if (rc != sqzSuccess) return rc;  // not a live communicator: nothing of it is ours to free
  // Free only once no call on another thread still uses the handle (not even to record its
  // error). This guard's own count is gone by now.
  while (comm->inflight.load() > 0) std::this_thread::yield();
  comm->magic = 0;
  forget(comm);
  delete comm;
  return sqzSuccess;
}

sqzResult_t sqzCommGetAsyncError(sqzComm_t comm, sqzResult_t* asyncError) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommGetAsyncError");
    if (!asyncError)
      raise(ErrorCode::kInvalidArgument, "sqzCommGetAsyncError: asyncError is NULL.");
    auto err = comm->impl->asyncError();
    *asyncError = err ? static_cast<sqzResult_t>(err->code()) : sqzSuccess;
    if (err) {  // what it was, for sqzGetLastError(comm)
      std::lock_guard<std::mutex> lock(comm->lastErrorMu);
      comm->lastError = err->what();
    }
  });
}

sqzResult_t sqzCommCount(const sqzComm_t comm, int* count) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommCount");
    if (!count) raise(ErrorCode::kInvalidArgument, "sqzCommCount: count is NULL.");
    *count = comm->impl->size();
  });
}

sqzResult_t sqzCommCuDevice(const sqzComm_t comm, int* device) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommCuDevice");
    if (!device) raise(ErrorCode::kInvalidArgument, "sqzCommCuDevice: device is NULL.");
    *device = comm->impl->config().device;
  });
}

sqzResult_t sqzCommUserRank(const sqzComm_t comm, int* rank) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommUserRank");
    if (!rank) raise(ErrorCode::kInvalidArgument, "sqzCommUserRank: rank is NULL.");
    *rank = comm->impl->rank();
  });
}

sqzResult_t sqzCommSplit(sqzComm_t comm, int color, int key, sqzComm_t* newcomm,
                         const sqzConfig_t* config) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommSplit");
    if (!newcomm) raise(ErrorCode::kInvalidArgument, "sqzCommSplit: newcomm is NULL.");
    *newcomm = nullptr;
    if (color < 0 && color != SQZ_SPLIT_NOCOLOR)
      raise(ErrorCode::kInvalidArgument, "sqzCommSplit: color ", color,
            " is negative; use a color >= 0, or SQZ_SPLIT_NOCOLOR to stay out.");
    CommConfig cfg = config ? resolveConfig(config) : comm->impl->config();
    auto child = comm->impl->split(color, key, cfg);
    if (child) {
      auto handle = std::make_unique<sqzComm>();
      handle->impl = std::move(child);
      *newcomm = adopt(std::move(handle));
    }
  });
}

sqzResult_t sqzCommRevoke(sqzComm_t comm) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommRevoke");
    comm->impl->revoke();
  });
}

sqzResult_t sqzCommShrink(sqzComm_t comm, const int* exclude, int n, sqzComm_t* newcomm,
                          const sqzConfig_t* config) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommShrink");
    if (!newcomm) raise(ErrorCode::kInvalidArgument, "sqzCommShrink: newcomm is NULL.");
    *newcomm = nullptr;
    if (n < 0 || (n > 0 && !exclude))
      raise(ErrorCode::kInvalidArgument, "sqzCommShrink: the exclude list has ", n, " ranks at ",
            static_cast<const void*>(exclude), "; pass the lost ranks (n >= 1, or 0 to keep "
            "every rank).");
    CommConfig cfg = config ? resolveConfig(config) : comm->impl->config();
    auto handle = std::make_unique<sqzComm>();
    handle->impl = comm->impl->shrink(std::vector<int>(exclude, exclude + n), cfg);
    *newcomm = adopt(std::move(handle));
    moveCodecs(comm, *newcomm);
  });
}

sqzResult_t sqzCommGrow(sqzComm_t comm, int newRanks, const sqzUniqueId* id, sqzComm_t* newcomm,
                        const sqzConfig_t* config) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommGrow");
    if (!newcomm) raise(ErrorCode::kInvalidArgument, "sqzCommGrow: newcomm is NULL.");
    *newcomm = nullptr;
    if (!id) raise(ErrorCode::kInvalidArgument, "sqzCommGrow: id is NULL.");
    CommConfig cfg = config ? resolveConfig(config) : comm->impl->config();
    auto handle = std::make_unique<sqzComm>();
    handle->impl = comm->impl->grow(newRanks, UniqueIdData::parse(id->internal), cfg);
    *newcomm = adopt(std::move(handle));
    moveCodecs(comm, *newcomm);
  });
}

sqzResult_t sqzCommGetLastAlgorithm(sqzComm_t comm, const char** name) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommGetLastAlgorithm");
    if (!name) raise(ErrorCode::kInvalidArgument, "sqzCommGetLastAlgorithm: name is NULL.");
    *name = comm->impl->lastAlgorithm();
  });
}

}  // extern "C"
