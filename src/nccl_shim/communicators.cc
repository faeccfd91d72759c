// The shim's communicator calls: version, unique id, error strings, and every communicator's
// life (init in its four forms, split, revoke and shrink, finalize, destroy, abort) and
// queries. Each init wraps the sqzComm_t it makes in an ncclComm with the SQZ_NCCL_CODEC rules
// attached.
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nccl_shim/shim_call.h"
#include "squeeze_config.h"

static_assert(sizeof(ncclUniqueId) == sizeof(sqzUniqueId), "unique ids travel as they are");
static_assert(NCCL_SPLIT_NOCOLOR == SQZ_SPLIT_NOCOLOR);

using namespace squeeze;
using namespace squeeze::nccl_shim;

namespace {

constexpr uint32_t kNcclConfigMagic = 0xcafebeef;  // NCCL_CONFIG_INITIALIZER's

ncclResult_t checkNcclConfig(const ncclConfig_t* config, const char* fn) {
  if (!config) return ncclSuccess;
  if (config->magic != kNcclConfigMagic)
    return fail(ncclInvalidArgument, fn, ": ncclConfig_t was not initialized; start from "
                "'ncclConfig_t config = NCCL_CONFIG_INITIALIZER;'.");
  return ncclSuccess;
}

// Wraps a new Squeeze communicator (taking ownership; freed on failure).
ncclResult_t adopt(sqzComm_t sqz, ncclComm_t* out) {
  auto comm = std::make_unique<ncclComm>();
  comm->sqz = sqz;
  if (ncclResult_t r = attachCodecRules(comm.get()); r != ncclSuccess) {
    sqzCommDestroy(sqz);
    return r;
  }
  *out = comm.release();
  return ncclSuccess;
}

// Every init: a Squeeze communicator of `device` (SQZ_CONFIG_UNDEF_INT: the current device).
ncclResult_t initRank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, int device) {
  sqzConfig_t config = SQZ_CONFIG_INITIALIZER;
  config.device = device;
  sqzUniqueId sqzId;
  std::memcpy(&sqzId, &id, sizeof sqzId);
  sqzComm_t sqz = nullptr;
  const sqzResult_t r = sqzCommInitRankConfig(&sqz, nranks, sqzId, rank, &config);
  if (r != sqzSuccess) return forward(r);
  return adopt(sqz, out);
}

// ncclCommInitRankConfig, for `fn`: its messages name the call the program made.
ncclResult_t initRankConfig(const char* fn, ncclComm_t* comm, int nranks, ncclUniqueId commId,
                            int rank, ncclConfig_t* config) {
  if (!comm) return fail(ncclInvalidArgument, fn, ": comm is NULL.");
  if (ncclResult_t r = checkNcclConfig(config, fn); r != ncclSuccess) return r;
  *comm = nullptr;
  return submitInit([=] { return initRank(comm, nranks, commId, rank, SQZ_CONFIG_UNDEF_INT); });
}

// The GPUs this process sees (0 without CUDA): ncclCommInitAll's devices are devlist, or
// 0..ndev-1 modulo them (several ranks may share a GPU, as in Squeeze); none: host memory.
int deviceCount() {
#if SQZ_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
  return 0;
#endif
}

}  // namespace

// ---- versions, ids, errors ----------------------------------------------------------------------

ncclResult_t ncclGetVersion(int* version) {
  enter();
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL.");
  *version = NCCL_VERSION_CODE;  // the API this shim implements: the nccl.h it was built with
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  enter();
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL.");
  sqzUniqueId id;
  const sqzResult_t r = sqzGetUniqueId(&id);
  if (r != sqzSuccess) return forward(r);
  std::memcpy(uniqueId, &id, sizeof id);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the Squeeze developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return lastError().c_str(); }

void ncclResetDebugInit() {}  // deprecated in NCCL; Squeeze reads its log settings once

// ---- communicators ------------------------------------------------------------------------------

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  enter();
  return initRankConfig("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

// NCCL spreads this init's bootstrap over nId roots: each id comes from ncclGetUniqueId on a
// different rank (torch: one per TORCH_NCCL_RANKS_PER_ROOT ranks, the first on rank 0), and every
// rank passes the same nId ids. A Squeeze id holds its rendezvous root's address and the job's
// secret, and one root (started by the ncclGetUniqueId that made the id) gathers all of a
// communicator's ranks (up to 65536), so every rank joins the first id's root and the other ids
// go unused. An unused root waits for ranks that never come: one idle thread and one listening
// socket in the process whose ncclGetUniqueId made it, until that process exits.
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  enter();
  constexpr const char* fn = "ncclCommInitRankScalable";
  if (!newcomm) return fail(ncclInvalidArgument, fn, ": newcomm is NULL.");
  *newcomm = nullptr;
  if (nId < 1 || nId > nranks)
    return fail(ncclInvalidArgument, fn, ": nId is ", nId, " with nranks ", nranks,
                "; pass 1 to nranks ids (one from ncclGetUniqueId on each root rank), the same "
                "list on every rank.");
  if (!commIds)
    return fail(ncclInvalidArgument, fn, ": commIds is NULL; pass the ", nId,
                " ids from ncclGetUniqueId, the same list on every rank.");
  return initRankConfig(fn, newcomm, nranks, commIds[0], myrank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  enter();
  if (!comms) return fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL.");
  if (ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: ndev is ", ndev, "; pass >= 1.");
  const int gpus = deviceCount();
  // Checked before any rank starts: one that could not would leave the others waiting at the
  // rendezvous until SQZ_TIMEOUT_MS, and the error would be theirs.
  for (int i = 0; devlist && gpus > 0 && i < ndev; ++i)
    if (devlist[i] < 0 || devlist[i] >= gpus)
      return fail(ncclInvalidArgument, "ncclCommInitAll: devlist[", i, "] is ", devlist[i],
                  "; this process sees ", gpus, " GPU(s), 0 to ", gpus - 1, ".");
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return r;
  for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
  std::vector<GroupCall> inits;
  for (int i = 0; i < ndev; ++i) {
    const int device = gpus == 0 ? SQZ_CONFIG_UNDEF_INT : devlist ? devlist[i] : i % gpus;
    inits.push_back([=] { return initRank(&comms[i], ndev, id, i, device); });
  }
  const ncclResult_t r = runConcurrently(inits);
  if (r != ncclSuccess) {
    const std::string message = lastError();
    for (int i = 0; i < ndev; ++i) {
      ncclCommDestroy(comms[i]);
      comms[i] = nullptr;
    }
    lastError() = message;
  }
  return r;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  enter();
  SQZ_SHIM_CHECK_DATA_COMM(comm, "ncclCommSplit");
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL.");
  if (ncclResult_t r = checkNcclConfig(config, "ncclCommSplit"); r != ncclSuccess) return r;
  *newcomm = nullptr;
  return submitInit([=] {
    sqzComm_t child = nullptr;
    const sqzResult_t r = sqzCommSplit(comm->sqz, color, key, &child, nullptr);
    if (r != sqzSuccess) return forward(r);
    return child ? adopt(child, newcomm) : ncclSuccess;
  });
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommRevoke");
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return fail(ncclInvalidArgument, "ncclCommRevoke: revokeFlags is ", revokeFlags, "; it must "
                "be NCCL_REVOKE_DEFAULT (0).");
  return forward(sqzCommRevoke(comm->sqz));
}

// NCCL_SHRINK_ABORT revokes comm first, so that calls still in flight end; NCCL_SHRINK_DEFAULT
// expects none (sqzCommShrink refuses a call in flight on a communicator neither failed nor
// revoked). The parent's codecs (SQZ_NCCL_CODEC) move to the new communicator.
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommShrink");
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommShrink: newcomm is NULL.");
  *newcomm = nullptr;
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return fail(ncclInvalidArgument, "ncclCommShrink: shrinkFlags is ", shrinkFlags, "; use "
                "NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT.");
  if (ncclResult_t r = checkNcclConfig(config, "ncclCommShrink"); r != ncclSuccess) return r;
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList))
    return fail(ncclInvalidArgument, "ncclCommShrink: excludeRanksList has ", excludeRanksCount,
                " ranks at ", static_cast<const void*>(excludeRanksList), ".");
  if (shrinkFlags == NCCL_SHRINK_ABORT)
    if (const sqzResult_t r = sqzCommRevoke(comm->sqz); r != sqzSuccess) return forward(r);
  const std::vector<int> exclude(excludeRanksList, excludeRanksList + excludeRanksCount);
  return submitInit([=] {
    sqzComm_t child = nullptr;
    const sqzResult_t r = sqzCommShrink(comm->sqz, exclude.data(), static_cast<int>(exclude.size()),
                                        &child, nullptr);
    if (r != sqzSuccess) return forward(r);
    if (ncclResult_t a = adopt(child, newcomm); a != ncclSuccess) return a;
    // SQZ_NCCL_CODEC's codecs go on with the survivors' communicator, each with its residual.
    (*newcomm)->codecs = std::move(comm->codecs);
    comm->codecs.clear();
    return ncclSuccess;
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommFinalize");
  comm->finalized = true;
  return forward(sqzCommFinalize(comm->sqz));
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  enter();
  if (!comm) return ncclSuccess;
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommDestroy");
  destroyCodecs(comm);
  const sqzResult_t r = sqzCommDestroy(comm->sqz);
  comm->magic = 0;
  delete comm;
  return forward(r);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  enter();
  if (!comm) return ncclSuccess;
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommAbort");
  const sqzResult_t r = sqzCommAbort(comm->sqz);  // first: a call in flight returns promptly
  while (comm->inflight.load() > 0) std::this_thread::yield();  // ...and leaves the handle
  destroyCodecs(comm);
  comm->magic = 0;
  delete comm;
  return forward(r);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommGetAsyncError");
  if (!asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL.");
  sqzResult_t err = sqzSuccess;
  const sqzResult_t r = sqzCommGetAsyncError(comm->sqz, &err);
  if (r != sqzSuccess) return forward(r);
  // What went wrong, for ncclGetLastError on this thread (torch's watchdog asks here, on a
  // thread of its own, then prints "Last error:"): Squeeze's sentence naming the rank, the peer
  // and the call, which sqzCommGetAsyncError has just made the communicator's last error.
  if (err != sqzSuccess) lastError() = sqzGetLastError(comm->sqz);
  *asyncError = toNccl(err);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommCount");
  return forward(sqzCommCount(comm->sqz, count));
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommCuDevice");
  return forward(sqzCommCuDevice(comm->sqz, device));
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclCommUserRank");
  return forward(sqzCommUserRank(comm->sqz, rank));
}

