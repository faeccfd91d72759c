// The C API (include/squeeze/squeeze.h): argument checks, then a hand-off to the communicator.
#include <climits>
#include <cstring>

#include "api/api_guard.h"
#include "bootstrap/env_init.h"
#include "bootstrap/rendezvous.h"
#include "common/params.h"

using namespace squeeze;

namespace squeeze {

namespace {
thread_local std::string tlsLastError;
}

void setThreadLastError(const std::string& msg) { tlsLastError = msg; }

}  // namespace squeeze

namespace {

// Counts above this are negative numbers cast to size_t, or more memory than exists.
constexpr size_t kMaxCount = size_t(1) << 56;

sqzComm* checkComm(sqzComm_t comm, const char* fn) {
  if (!comm)
    raise(ErrorCode::kInvalidArgument, fn, ": comm is NULL; create one with sqzCommInitRank.");
  if (comm->magic != kCommMagic || !comm->impl)
    raise(ErrorCode::kInvalidArgument, fn, ": comm is not a live communicator (destroyed, or "
          "not from sqzCommInitRank).");
  return comm;
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
  return CommConfig::fromParams(p);
}

void checkType(sqzDataType_t t, const char* fn) {
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= sqzNumTypes)
    raise(ErrorCode::kInvalidArgument, fn, ": datatype ", static_cast<int>(t),
          " is not a sqzDataType_t (use sqzInt8 .. sqzBfloat16).");
}

void checkOp(sqzRedOp_t op, const char* fn) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= sqzNumOps)
    raise(ErrorCode::kInvalidArgument, fn, ": op ", static_cast<int>(op),
          " is not a sqzRedOp_t (use sqzSum, sqzProd, sqzMax, sqzMin or sqzAvg).");
}

void checkCount(size_t count, const char* fn) {
  if (count > kMaxCount)
    raise(ErrorCode::kInvalidArgument, fn, ": count ", count, " (", static_cast<long long>(count),
          " as a signed number) is not a valid element count; was a negative value passed?");
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
    *out = handle.release();
  });
}

}  // namespace

extern "C" {

sqzResult_t sqzGetVersion(int* version) {
  return apiGuard(nullptr, [&] {
    if (!version) raise(ErrorCode::kInvalidArgument, "sqzGetVersion: version is NULL.");
    *version = SQZ_VERSION_CODE;
  });
}

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

sqzResult_t sqzCommDestroy(sqzComm_t comm) {
  if (!comm) return sqzSuccess;
  return apiGuard(nullptr, [&] {
    checkComm(comm, "sqzCommDestroy");
    comm->magic = 0;
    delete comm;
  });
}

sqzResult_t sqzCommAbort(sqzComm_t comm) {
  if (!comm) return sqzSuccess;
  return apiGuard(nullptr, [&] {
    checkComm(comm, "sqzCommAbort");
    comm->impl->abort();
    comm->magic = 0;
    delete comm;
  });
}

sqzResult_t sqzCommGetAsyncError(sqzComm_t comm, sqzResult_t* asyncError) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommGetAsyncError");
    if (!asyncError)
      raise(ErrorCode::kInvalidArgument, "sqzCommGetAsyncError: asyncError is NULL.");
    auto err = comm->impl->asyncError();
    *asyncError = err ? static_cast<sqzResult_t>(err->code()) : sqzSuccess;
  });
}

sqzResult_t sqzCommCount(const sqzComm_t comm, int* count) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommCount");
    if (!count) raise(ErrorCode::kInvalidArgument, "sqzCommCount: count is NULL.");
    *count = comm->impl->size();
  });
}

sqzResult_t sqzCommUserRank(const sqzComm_t comm, int* rank) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommUserRank");
    if (!rank) raise(ErrorCode::kInvalidArgument, "sqzCommUserRank: rank is NULL.");
    *rank = comm->impl->rank();
  });
}

const char* sqzGetErrorString(sqzResult_t result) {
  switch (result) {
    case sqzSuccess: return "no error";
    case sqzCudaError: return "CUDA error";
    case sqzSystemError: return "system error (socket, shared memory or memory)";
    case sqzInternalError: return "internal error (a bug in Squeeze)";
    case sqzInvalidArgument: return "invalid argument";
    case sqzInvalidUsage: return "invalid usage";
    case sqzRemoteError: return "remote error (a peer failed or closed its connection)";
    case sqzInProgress: return "operation in progress";
    case sqzTimeout: return "timeout";
    default: return "unknown result code";
  }
}

const char* sqzGetLastError(sqzComm_t comm) {
  if (comm && comm->magic == kCommMagic) {
    std::lock_guard<std::mutex> lock(comm->lastErrorMu);
    return comm->lastError.c_str();
  }
  return tlsLastError.c_str();
}

sqzResult_t sqzAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                         sqzDataType_t datatype, sqzRedOp_t op, sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzAllReduce");
    checkCount(count, "sqzAllReduce");
    checkType(datatype, "sqzAllReduce");
    checkOp(op, "sqzAllReduce");
    if (count > 0 && (!sendbuff || !recvbuff))
      raise(ErrorCode::kInvalidArgument, "sqzAllReduce: ", !sendbuff ? "sendbuff" : "recvbuff",
            " is NULL with count ", count, ".");
    if (stream)
      raise(ErrorCode::kInvalidArgument, "sqzAllReduce: stream must be NULL: this build "
            "supports host memory only (CUDA support is not built).");
    CollRequest req;
    req.sendbuf = sendbuff;
    req.recvbuf = recvbuff;
    req.count = count;
    req.dtype = static_cast<DataType>(datatype);
    req.op = static_cast<RedOp>(op);
    req.stream = stream;
    comm->impl->allReduce(req);
  });
}

}  // extern "C"
