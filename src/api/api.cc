// The C API (include/squeeze/squeeze.h): argument checks, then a hand-off to the communicator.
#include <climits>
#include <cstring>
#include <mutex>
#include <set>

#include "api/api_guard.h"
#include "base/params.h"
#include "bootstrap/env_init.h"
#include "bootstrap/rendezvous.h"
#include "compress/handle.h"
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include "device/cuda/runtime.h"
#endif

using namespace squeeze;

namespace squeeze {

namespace {
thread_local std::string tlsLastError;
}

void setThreadLastError(const std::string& msg) { tlsLastError = msg; }

}  // namespace squeeze

namespace {

// The communicators alive now, so a codec can tell whether the one it was made on still is
// (sqzCodecDestroy after sqzCommDestroy must not touch the freed handle).
std::mutex liveCommsMu;  // protects liveComms
std::set<const sqzComm*> liveComms;

sqzComm* adopt(std::unique_ptr<sqzComm> handle) {
  std::lock_guard<std::mutex> lock(liveCommsMu);
  liveComms.insert(handle.get());
  return handle.release();
}

void forget(sqzComm* comm) {
  std::lock_guard<std::mutex> lock(liveCommsMu);
  liveComms.erase(comm);
}

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

// The checks every data call makes: a live comm, a sane count (and total, for calls that move
// nranks blocks), a datatype.
void checkCommon(sqzComm_t comm, size_t count, size_t total, sqzDataType_t datatype,
                 const char* fn) {
  checkComm(comm, fn);
  checkCount(count, fn);
  checkCount(total, fn);
  checkType(datatype, fn);
}

// One buffer of a data call: what it is called in the API and the bytes the call touches.
struct BufferArg {
  const char* name;
  const void* ptr;
  size_t bytes;
};

// Whether a call's buffers are device memory (the call is enqueued on `stream`) or host memory
// (it runs now; stream must be NULL). Buffers the call does not touch (null, or 0 bytes) do not
// count. Refuses, before anything is enqueued, every mix the call cannot run with.
bool onDevice(sqzComm_t comm, std::initializer_list<BufferArg> buffers, void* stream,
              const char* fn) {
#if SQZ_HAVE_CUDA
  const BufferArg* first = nullptr;  // the first buffer the call touches
  const BufferArg* checked = nullptr;  // the last one asked about
  bool device = false;
  for (const BufferArg& b : buffers) {
    if (!b.ptr || b.bytes == 0) continue;
    // In place: the driver was just asked about this pointer, for as many bytes or more.
    if (checked && b.ptr == checked->ptr && b.bytes <= checked->bytes) continue;
    checked = &b;
    const cuda::PointerInfo info = cuda::pointerInfo(b.ptr);
    if (first && info.device != device)
      raise(ErrorCode::kInvalidArgument, fn, ": ", first->name, " is ",
            device ? "device" : "host", " memory but ", b.name, " is ",
            info.device ? "device" : "host", " memory; a call's buffers must all be on the "
            "communicator's GPU, or all in host memory.");
    if (!first) first = &b;
    device = info.device;
    if (!info.device) continue;
    const int commDevice = comm->impl->config().device;
    if (info.ordinal != commDevice)
      raise(ErrorCode::kInvalidArgument, fn, ": ", b.name, " is memory of GPU ", info.ordinal,
            " but the communicator runs on GPU ", commDevice, " (the device current at "
            "sqzCommInitRank, or sqzConfig_t.device); pass buffers of that GPU.");
    const size_t room = cuda::bytesToAllocationEnd(b.ptr);
    if (room < b.bytes)
      raise(ErrorCode::kInvalidArgument, fn, ": ", b.name, " has ", room, " bytes from the "
            "pointer to the end of its allocation; the call needs ", b.bytes, ".");
  }
  // A call that touches no memory (count 0) with a stream is a device call that moves nothing:
  // it is enqueued to keep its place in the order of calls, as NCCL does.
  if (!first && stream && comm->impl->config().device >= 0) device = true;
  if (!device) {
    if (stream)
      raise(ErrorCode::kInvalidArgument, fn, ": stream is set but the buffers are host memory; "
            "pass stream NULL for host buffers (the call then returns when it is done), or "
            "device buffers.");
    return false;
  }
  const int streamDevice = cuda::streamDevice(static_cast<cudaStream_t>(stream));
  if (streamDevice != comm->impl->config().device)
    raise(ErrorCode::kInvalidArgument, fn, ": the stream belongs to GPU ", streamDevice,
          " but the communicator and its buffers are on GPU ", comm->impl->config().device,
          "; pass a stream of that GPU.");
  return true;
#else
  (void)comm;
  (void)buffers;
  if (stream)
    raise(ErrorCode::kInvalidArgument, fn, ": stream must be NULL: this build of Squeeze has no "
          "CUDA support (host memory only; rebuild with the CUDA toolkit for device buffers).");
  return false;
#endif
}

// Runs a checked call now (host buffers) or enqueues it on the stream (device buffers).
void dispatch(sqzComm_t comm, const CollRequest& req, bool device, void* stream) {
  if (device)
    comm->impl->enqueueCollective(req, stream);
  else
    comm->impl->collective(req);
}
void dispatch(sqzComm_t comm, const std::vector<P2pCall>& calls, bool device, void* stream) {
  if (device)
    comm->impl->enqueueSendRecv(calls, stream);
  else
    comm->impl->sendRecv(calls);
}

void checkBuffers(const void* sendbuff, const void* recvbuff, size_t count, const char* fn) {
  if (count > 0 && (!sendbuff || !recvbuff))
    raise(ErrorCode::kInvalidArgument, fn, ": ", !sendbuff ? "sendbuff" : "recvbuff",
          " is NULL with count ", count, ".");
}

void checkRoot(sqzComm_t comm, int root, const char* fn) {
  if (root < 0 || root >= comm->impl->size())
    raise(ErrorCode::kInvalidArgument, fn, ": root ", root, " is out of range for ",
          comm->impl->size(), " ranks.");
}

// count * nranks, refusing overflow.
size_t totalCount(sqzComm_t comm, size_t count, const char* fn) {
  checkCount(count, fn);
  const size_t n = static_cast<size_t>(comm->impl->size());
  if (count > kMaxCount / n)
    raise(ErrorCode::kInvalidArgument, fn, ": count ", count, " times ", n,
          " ranks is more elements than any buffer can hold.");
  return count * n;
}

CollRequest makeRequest(CollKind kind, const void* sendbuff, void* recvbuff, size_t count,
                        sqzDataType_t datatype, sqzRedOp_t op, int root) {
  CollRequest req;
  req.kind = kind;
  req.sendbuf = sendbuff;
  req.recvbuf = recvbuff;
  req.count = count;
  req.dtype = static_cast<DataType>(datatype);
  req.op = static_cast<RedOp>(op);
  req.root = root;
  return req;
}

// This thread's open groups: queued send/recv calls per communicator, in first-use order, with
// where their buffers are (a group runs at once on host buffers, or is enqueued as one unit on
// its stream for device buffers).
struct GroupCalls {
  sqzComm* comm;
  std::vector<P2pCall> calls;
  bool device;
  void* stream;
};
thread_local int tlsGroupDepth = 0;
thread_local std::vector<GroupCalls> tlsGroup;

void queueP2p(sqzComm_t comm, bool isSend, void* buf, size_t count, sqzDataType_t datatype,
              int peer, void* stream, const char* fn) {
  checkCommon(comm, count, count, datatype, fn);
  if (count > 0 && !buf) raise(ErrorCode::kInvalidArgument, fn, ": buffer is NULL with count ", count, ".");
  if (peer < 0 || peer >= comm->impl->size())
    raise(ErrorCode::kInvalidArgument, fn, ": peer ", peer, " is out of range for ",
          comm->impl->size(), " ranks.");
  P2pCall call{isSend, peer, buf, count * dataTypeSize(static_cast<DataType>(datatype))};
  const bool device = onDevice(comm, {{isSend ? "sendbuff" : "recvbuff", buf, call.bytes}},
                               stream, fn);
  if (tlsGroupDepth == 0) return dispatch(comm, std::vector<P2pCall>{call}, device, stream);
  for (GroupCalls& g : tlsGroup)
    if (g.comm == comm) {
      if (device != g.device || (device && stream != g.stream))
        raise(ErrorCode::kInvalidArgument, fn, ": this group already holds ",
              g.device ? "device" : "host", " sends or receives on this communicator",
              g.device ? " on another stream" : "", "; a group's calls on one communicator "
              "must all be host memory, or all device memory on one stream.");
      g.calls.push_back(call);
      return;
    }
  tlsGroup.push_back({comm, {call}, device, stream});
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
    const char* fn = "sqzAllReduce";
    checkCommon(comm, count, count, datatype, fn);
    checkOp(op, fn);
    checkBuffers(sendbuff, recvbuff, count, fn);
    const size_t bytes = count * dataTypeSize(static_cast<DataType>(datatype));
    const bool device = onDevice(comm, {{"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}},
                                 stream, fn);
    dispatch(comm, makeRequest(CollKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0),
             device, stream);
  });
}

sqzResult_t sqzBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                         sqzDataType_t datatype, int root, sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    const char* fn = "sqzBroadcast";
    checkCommon(comm, count, count, datatype, fn);
    checkRoot(comm, root, fn);
    int rank = comm->impl->rank();
    if (count > 0 && (!recvbuff || (rank == root && !sendbuff)))
      raise(ErrorCode::kInvalidArgument, fn, ": ", !recvbuff ? "recvbuff" : "sendbuff (on root)",
            " is NULL with count ", count, ".");
    const size_t bytes = count * dataTypeSize(static_cast<DataType>(datatype));
    const bool device = onDevice(
        comm, {{"sendbuff", rank == root ? sendbuff : nullptr, bytes}, {"recvbuff", recvbuff, bytes}},
        stream, fn);
    dispatch(comm, makeRequest(CollKind::kBroadcast, sendbuff, recvbuff, count, datatype, sqzSum,
                               root), device, stream);
  });
}

sqzResult_t sqzReduce(const void* sendbuff, void* recvbuff, size_t count, sqzDataType_t datatype,
                      sqzRedOp_t op, int root, sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    const char* fn = "sqzReduce";
    checkCommon(comm, count, count, datatype, fn);
    checkOp(op, fn);
    checkRoot(comm, root, fn);
    int rank = comm->impl->rank();
    if (count > 0 && (!sendbuff || (rank == root && !recvbuff)))
      raise(ErrorCode::kInvalidArgument, fn, ": ", !sendbuff ? "sendbuff" : "recvbuff (on root)",
            " is NULL with count ", count, ".");
    const size_t bytes = count * dataTypeSize(static_cast<DataType>(datatype));
    const bool device = onDevice(
        comm, {{"sendbuff", sendbuff, bytes}, {"recvbuff", rank == root ? recvbuff : nullptr, bytes}},
        stream, fn);
    dispatch(comm, makeRequest(CollKind::kReduce, sendbuff, recvbuff, count, datatype, op, root),
             device, stream);
  });
}

sqzResult_t sqzAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                         sqzDataType_t datatype, sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    const char* fn = "sqzAllGather";
    checkComm(comm, fn);
    const size_t total = totalCount(comm, sendcount, fn);
    checkCommon(comm, sendcount, total, datatype, fn);
    checkBuffers(sendbuff, recvbuff, sendcount, fn);
    const size_t esz = dataTypeSize(static_cast<DataType>(datatype));
    const bool device = onDevice(
        comm, {{"sendbuff", sendbuff, sendcount * esz}, {"recvbuff", recvbuff, total * esz}},
        stream, fn);
    dispatch(comm, makeRequest(CollKind::kAllGather, sendbuff, recvbuff, sendcount, datatype,
                               sqzSum, 0), device, stream);
  });
}

sqzResult_t sqzReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                             sqzDataType_t datatype, sqzRedOp_t op, sqzComm_t comm,
                             void* stream) {
  return apiGuard(comm, [&] {
    const char* fn = "sqzReduceScatter";
    checkComm(comm, fn);
    const size_t total = totalCount(comm, recvcount, fn);
    checkCommon(comm, recvcount, total, datatype, fn);
    checkOp(op, fn);
    checkBuffers(sendbuff, recvbuff, recvcount, fn);
    const size_t esz = dataTypeSize(static_cast<DataType>(datatype));
    const bool device = onDevice(
        comm, {{"sendbuff", sendbuff, total * esz}, {"recvbuff", recvbuff, recvcount * esz}},
        stream, fn);
    dispatch(comm, makeRequest(CollKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype,
                               op, 0), device, stream);
  });
}

sqzResult_t sqzAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                        sqzDataType_t datatype, sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    const char* fn = "sqzAlltoAll";
    checkComm(comm, fn);
    size_t total = totalCount(comm, count, fn);
    checkCommon(comm, count, total, datatype, fn);
    checkBuffers(sendbuff, recvbuff, count, fn);
    size_t bytes = total * dataTypeSize(static_cast<DataType>(datatype));
    const bool device = onDevice(comm, {{"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}},
                                 stream, fn);
    auto* s = static_cast<const char*>(sendbuff);
    auto* r = static_cast<const char*>(recvbuff);
    if (count > 0 && s < r + bytes && r < s + bytes)
      raise(ErrorCode::kInvalidArgument, fn, ": sendbuff and recvbuff overlap; all-to-all "
            "cannot run in place.");
    dispatch(comm, makeRequest(CollKind::kAlltoAll, sendbuff, recvbuff, count, datatype, sqzSum,
                               0), device, stream);
  });
}

sqzResult_t sqzSend(const void* sendbuff, size_t count, sqzDataType_t datatype, int peer,
                    sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    queueP2p(comm, true, const_cast<void*>(sendbuff), count, datatype, peer, stream, "sqzSend");
  });
}

sqzResult_t sqzRecv(void* recvbuff, size_t count, sqzDataType_t datatype, int peer,
                    sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    queueP2p(comm, false, recvbuff, count, datatype, peer, stream, "sqzRecv");
  });
}

sqzResult_t sqzGroupStart(void) {
  return apiGuard(nullptr, [&] { ++tlsGroupDepth; });
}

sqzResult_t sqzGroupEnd(void) {
  if (tlsGroupDepth == 0)
    return apiGuard(nullptr, [&] {
      raise(ErrorCode::kInvalidUsage, "sqzGroupEnd without a matching sqzGroupStart.");
    });
  if (--tlsGroupDepth > 0) return sqzSuccess;
  auto group = std::move(tlsGroup);
  tlsGroup.clear();
  sqzResult_t first = sqzSuccess;
  for (GroupCalls& g : group) {
    sqzResult_t rc = apiGuard(g.comm, [&] {
      checkComm(g.comm, "sqzGroupEnd");
      dispatch(g.comm, g.calls, g.device, g.stream);
    });
    if (first == sqzSuccess) first = rc;
  }
  return first;
}

sqzResult_t sqzBarrier(sqzComm_t comm) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzBarrier");
    comm->impl->barrier();
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

sqzResult_t sqzCommGetLastAlgorithm(sqzComm_t comm, const char** name) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzCommGetLastAlgorithm");
    if (!name) raise(ErrorCode::kInvalidArgument, "sqzCommGetLastAlgorithm: name is NULL.");
    *name = comm->impl->lastAlgorithm();
  });
}

}  // extern "C"

// ---- Compression -------------------------------------------------------------------------------

constexpr uint32_t kCodecMagic = 0x43444f43;  // "CODC"

struct sqzCodec {
  uint32_t magic = kCodecMagic;
  sqzComm* comm = nullptr;
  std::unique_ptr<CodecHandle> impl;
};

namespace {

sqzCodec* checkCodec(sqzCodec_t codec, const char* fn) {
  if (!codec)
    raise(ErrorCode::kInvalidArgument, fn, ": codec is NULL; create one with sqzCodecCreate.");
  if (codec->magic != kCodecMagic || !codec->impl)
    raise(ErrorCode::kInvalidArgument, fn, ": codec is not a live codec (destroyed, or not from "
          "sqzCodecCreate).");
  return codec;
}

// Waits for the codec's enqueued device calls (its state is theirs until they have run).
void settle(sqzCodec* c) {
  {
    std::lock_guard<std::mutex> lock(liveCommsMu);
    if (!liveComms.count(c->comm)) return;  // destroyed: it drained its calls then
  }
  c->comm->impl->drainDevice();
}

sqzResult_t createCodec(sqzCodec_t* out, const CodecSpec& spec, size_t count,
                        sqzDataType_t datatype, sqzComm_t comm, const char* fn) {
  return apiGuard(comm, [&] {
    if (!out) raise(ErrorCode::kInvalidArgument, fn, ": codec (the output pointer) is NULL.");
    *out = nullptr;
    checkComm(comm, fn);
    checkCount(count, fn);
    checkType(datatype, fn);
    auto codec = std::make_unique<sqzCodec>();
    codec->comm = comm;
    codec->impl = createCodecHandle(spec, count, static_cast<DataType>(datatype));
    SQZ_INFO(kCompress, "rank ", comm->impl->rank(), ": codec ", spec.str(), " for ", count,
             " elements of ", dataTypeName(static_cast<DataType>(datatype)));
    *out = codec.release();
  });
}

}  // namespace

sqzResult_t sqzCodecCreate(sqzCodec_t* codec, const char* spec, size_t count,
                           sqzDataType_t datatype, sqzComm_t comm) {
  CodecSpec parsed;
  sqzResult_t r = apiGuard(comm, [&] {
    if (!spec) raise(ErrorCode::kInvalidArgument, "sqzCodecCreate: spec is NULL; pass e.g. "
                     "\"topk:ratio=0.001\".");
    parsed = CodecSpec::parse(spec);
  });
  if (r != sqzSuccess) {
    if (codec) *codec = nullptr;
    return r;
  }
  return createCodec(codec, parsed, count, datatype, comm, "sqzCodecCreate");
}

sqzResult_t sqzCodecCreateConfig(sqzCodec_t* codec, const sqzCodecConfig_t* config, size_t count,
                                 sqzDataType_t datatype, sqzComm_t comm) {
  CodecSpec spec;
  sqzResult_t r = apiGuard(comm, [&] {
    if (!config) raise(ErrorCode::kInvalidArgument, "sqzCodecCreateConfig: config is NULL.");
    if (config->magic != SQZ_CODEC_CONFIG_MAGIC)
      raise(ErrorCode::kInvalidArgument, "sqzCodecConfig_t was not initialized; start from "
            "'sqzCodecConfig_t config = SQZ_CODEC_CONFIG_INITIALIZER;'.");
    if (config->size < offsetof(sqzCodecConfig_t, seed) + sizeof(config->seed))
      raise(ErrorCode::kInvalidArgument, "sqzCodecConfig_t.size is ", config->size,
            ", smaller than this library's; rebuild against this squeeze.h.");
    if (!config->method)
      raise(ErrorCode::kInvalidArgument, "sqzCodecConfig_t.method is NULL; set it, e.g. \"topk\".");
    spec.method = config->method;
    auto set = [](std::optional<double>& slot, double v) {
      if (v != SQZ_CODEC_UNDEF) slot = v;
    };
    set(spec.ratio, config->ratio);
    set(spec.levels, config->levels);
    set(spec.block, config->block);
    set(spec.threshold, config->threshold);
    set(spec.sample, config->sample);
    set(spec.momentum, config->momentum);
    set(spec.clip, config->clip);
    set(spec.warmup, config->warmup);
    set(spec.rank, config->rank);
    set(spec.cols, config->cols);
    set(spec.ef, config->errorFeedback);
    set(spec.minBytes, config->minBytes);
    set(spec.seed, config->seed);
    if (config->size >= offsetof(sqzCodecConfig_t, autoDense) + sizeof(config->autoDense)) {
      if (config->base) spec.base = config->base;
      set(spec.cfMin, config->cfMin);
      set(spec.cfMax, config->cfMax);
      set(spec.step, config->step);
      set(spec.window, config->window);
      set(spec.eps, config->eps);
      set(spec.omega, config->omega);
      set(spec.cfLow, config->cfLow);
      set(spec.cfHigh, config->cfHigh);
      set(spec.interval, config->interval);
      set(spec.eta, config->eta);
      set(spec.autoDense, config->autoDense);
    }
  });
  if (r != sqzSuccess) {
    if (codec) *codec = nullptr;
    return r;
  }
  return createCodec(codec, spec, count, datatype, comm, "sqzCodecCreateConfig");
}

sqzResult_t sqzAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count,
                                   sqzDataType_t datatype, sqzRedOp_t op, sqzCodec_t codec,
                                   sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    const char* fn = "sqzAllReduceCompressed";
    checkCommon(comm, count, count, datatype, fn);
    checkOp(op, fn);
    checkBuffers(sendbuff, recvbuff, count, fn);
    const size_t total = count * dataTypeSize(static_cast<DataType>(datatype));
    const bool device =
        onDevice(comm, {{"sendbuff", sendbuff, total}, {"recvbuff", recvbuff, total}}, stream, fn);
    sqzCodec* c = checkCodec(codec, fn);
    CodecHandle& h = *c->impl;
    if (c->comm != comm)
      raise(ErrorCode::kInvalidArgument, fn, ": the codec was created for another communicator; "
            "create one codec per tensor and communicator.");
    if (count != h.count() || static_cast<DataType>(datatype) != h.dtype())
      raise(ErrorCode::kInvalidArgument, fn, ": the codec is for ", h.count(), " elements of ",
            dataTypeName(h.dtype()), ", the call passes ", count, " of ",
            dataTypeName(static_cast<DataType>(datatype)), ". A codec belongs to one tensor.");
    if (h.spec().method != "dense" && op != sqzSum && op != sqzAvg)
      raise(ErrorCode::kInvalidArgument, fn, ": codec ", h.spec().method, " reduces with sqzSum "
            "or sqzAvg only, not ", redOpName(static_cast<RedOp>(op)), ".");
    const char* s = static_cast<const char*>(sendbuff);
    const char* d = static_cast<const char*>(recvbuff);
    const size_t bytes = count * dataTypeSize(h.dtype());
    if (s != d && s < d + bytes && d < s + bytes)
      raise(ErrorCode::kInvalidArgument, fn, ": sendbuff and recvbuff overlap without being "
            "equal; pass the same pointer for in place, or separate buffers.");
    if (count == 0) return;
    Communicator& impl = *comm->impl;
    if (!device) {
      impl.drainDevice();  // after the device calls enqueued before it
      h.allReduce(impl, sendbuff, recvbuff, static_cast<RedOp>(op));
      return;
    }
    // The handle's passes and its collectives run on the progress thread, in stream order; the
    // codec must stay alive until the stream has passed the call (as the buffers must).
    impl.enqueueTask(stream,
                     [&h, &impl, sendbuff, recvbuff, op](device::GpuStream internal) {
                       h.allReduce(impl, sendbuff, recvbuff, static_cast<RedOp>(op), internal);
                     },
                     strCat("compressed all-reduce (", h.spec().method, ") of ", count, " ",
                            dataTypeName(h.dtype())));
  });
}

sqzResult_t sqzCodecGetStats(sqzCodec_t codec, sqzCodecStats_t* stats) {
  return apiGuard(nullptr, [&] {
    sqzCodec* c = checkCodec(codec, "sqzCodecGetStats");
    settle(c);
    const CodecStats s = c->impl->stats();
    if (!stats) raise(ErrorCode::kInvalidArgument, "sqzCodecGetStats: stats is NULL.");
    stats->calls = s.calls;
    stats->wireBytes = s.wireBytes;
    stats->denseBytes = s.denseBytes;
    stats->ratio = s.wireBytes ? double(s.denseBytes) / double(s.wireBytes) : 1.0;
    stats->gain = s.gain;
    stats->residualNorm = s.residualNorm;
    stats->encodeSeconds = s.encodeSeconds;
    stats->combineSeconds = s.combineSeconds;
    stats->decodeSeconds = s.decodeSeconds;
    stats->lastRatio = s.lastRatio;
    stats->cf = s.cf;
    stats->phase = static_cast<int>(s.phase);
    stats->cfMin = s.cfMin;
    stats->denseCalls = s.denseCalls;
    stats->guardDenseCalls = s.guardDenseCalls;
    stats->linkDensePerByte = s.linkDensePerByte;
    stats->linkCompressedPerByte = s.linkCompressedPerByte;
    stats->codecPerByte = s.codecPerByte;
  });
}

sqzResult_t sqzCodecSaveState(sqzCodec_t codec, void* buf, size_t* bytes) {
  return apiGuard(nullptr, [&] {
    sqzCodec* c = checkCodec(codec, "sqzCodecSaveState");
    settle(c);
    if (!bytes) raise(ErrorCode::kInvalidArgument, "sqzCodecSaveState: bytes is NULL.");
    std::vector<char> state = c->impl->saveState();
    if (!buf) {
      *bytes = state.size();
      return;
    }
    if (*bytes < state.size())
      raise(ErrorCode::kInvalidArgument, "sqzCodecSaveState: the buffer holds ", *bytes,
            " bytes; the state needs ", state.size(), ". Ask for the size with buf NULL first.");
    std::memcpy(buf, state.data(), state.size());
    *bytes = state.size();
  });
}

sqzResult_t sqzCodecLoadState(sqzCodec_t codec, const void* buf, size_t bytes) {
  return apiGuard(nullptr, [&] {
    sqzCodec* c = checkCodec(codec, "sqzCodecLoadState");
    settle(c);
    if (!buf) raise(ErrorCode::kInvalidArgument, "sqzCodecLoadState: buf is NULL.");
    c->impl->loadState(buf, bytes);
  });
}

sqzResult_t sqzCodecDestroy(sqzCodec_t codec) {
  return apiGuard(nullptr, [&] {
    if (!codec) return;
    settle(checkCodec(codec, "sqzCodecDestroy"));  // its enqueued calls still use it
    if (logEnabled(LogLevel::kInfo, LogSubsys::kCompress)) {  // stats() is a pass over the state
      const CodecStats st = codec->impl->stats();
      SQZ_INFO(kCompress, "codec ", codec->impl->spec().str(), " destroyed after ", st.calls,
               " calls; sent ", st.wireBytes, " payload bytes for ", st.denseBytes, " dense");
    }
    codec->magic = 0;
    delete codec;
  });
}
