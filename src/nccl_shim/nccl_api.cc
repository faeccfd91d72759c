// libsqueeze-nccl.so.2 (soname libnccl.so.2): NCCL's C API, as CUDA's nccl.h declares it, over
// Squeeze's, for programs that cannot be changed. Each call checks what only NCCL has (its
// datatypes, PreMulSum operators, configs), translates by the tables of translate.h and forwards
// to the sqz* call of the same shape; groups are group.h's. Calls with no Squeeze meaning return
// ncclInvalidUsage, with the reason in ncclGetLastError. docs/porting.md lists them.
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/strings.h"
#include "device/elementwise.h"
#include "nccl_shim/codec_rules.h"
#include "nccl_shim/env_map.h"
#include "nccl_shim/group.h"
#include "nccl_shim/shim_comm.h"
#include "nccl_shim/translate.h"
#include "squeeze/squeeze.h"
#include "squeeze_config.h"

static_assert(sizeof(ncclUniqueId) == sizeof(sqzUniqueId), "unique ids travel as they are");
static_assert(NCCL_SPLIT_NOCOLOR == SQZ_SPLIT_NOCOLOR);

using namespace squeeze;
using namespace squeeze::nccl_shim;

namespace {

constexpr uint32_t kNcclConfigMagic = 0xcafebeef;  // NCCL_CONFIG_INITIALIZER's

// Records why a call failed, for ncclGetLastError, and returns its code.
template <class... Args>
ncclResult_t fail(ncclResult_t code, const Args&... args) {
  lastError() = strCat("squeeze-nccl: ", args...);
  return code;
}

// A Squeeze call's result as NCCL's; on failure Squeeze's message becomes the last error. The
// message is this thread's copy (Squeeze keeps one per thread too): after ncclCommAbort on another
// thread the communicator's own may be gone.
ncclResult_t forward(sqzResult_t r) {
  if (r == sqzSuccess) return ncclSuccess;
  lastError() = sqzGetLastError(nullptr);
  return toNccl(r);
}

// Every entry point starts here: NCCL_* variables become SQZ_* before Squeeze reads them.
void enter() { applyNcclEnv(); }

ncclComm* liveComm(ncclComm_t comm) {
  return comm && comm->magic == kShimCommMagic ? comm : nullptr;
}

#define SHIM_CHECK_COMM(comm, fn)                                                             \
  do {                                                                                        \
    if (!liveComm(comm))                                                                      \
      return fail(ncclInvalidArgument, fn, ": comm is ", comm ? "not a live communicator "     \
                  "(destroyed, or not from ncclCommInitRank)" : "NULL", ".");                \
  } while (0)

#define SHIM_CHECK_DATA_COMM(comm, fn)                                                        \
  do {                                                                                        \
    SHIM_CHECK_COMM(comm, fn);                                                                \
    if (comm->finalized)                                                                      \
      return fail(ncclInvalidUsage, fn, ": the communicator was finalized (ncclCommFinalize); " \
                  "only ncclCommDestroy may follow.");                                        \
  } while (0)

// ---- datatypes and operators -------------------------------------------------------------------

ncclResult_t toSqzType(ncclDataType_t datatype, const char* fn, sqzDataType_t* out) {
  const DataTypeRow* row = findDataType(datatype);
  if (!row)
    return fail(ncclInvalidArgument, fn, ": datatype ", static_cast<int>(datatype),
                " is not an ncclDataType_t (0 to ", ncclNumTypes - 1, ").");
  if (!row->sqz)
    return fail(ncclInvalidArgument, fn, ": datatype ", row->name, " is not supported by Squeeze "
                "(it has no 8-bit float reductions); convert to ncclHalf or ncclBfloat16 first.");
  *out = *row->sqz;
  return ncclSuccess;
}

// A reducing call's datatype and operator in Squeeze's terms: a built-in operator, or a
// PreMulSum (a sum of scaled inputs).
struct Reduction {
  sqzDataType_t type;
  sqzRedOp_t op;
  std::optional<PreMulSum> preMulSum;
};

ncclResult_t toReduction(ncclComm* comm, ncclDataType_t datatype, ncclRedOp_t op, const char* fn,
                         Reduction* out) {
  if (ncclResult_t r = toSqzType(datatype, fn, &out->type); r != ncclSuccess) return r;
  out->preMulSum.reset();
  if (const RedOpRow* row = findRedOp(op)) {
    out->op = row->sqz;
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> lock(comm->preMulSumMu);
  auto it = comm->preMulSums.find(static_cast<int>(op));
  if (it == comm->preMulSums.end())
    return fail(ncclInvalidArgument, fn, ": op ", static_cast<int>(op), " is neither a built-in "
                "ncclRedOp_t (ncclSum to ncclAvg) nor an operator ncclRedOpCreatePreMulSum made "
                "on this communicator (and not yet destroyed).");
  if (it->second.datatype != out->type)
    return fail(ncclInvalidArgument, fn, ": the PreMulSum operator ", static_cast<int>(op),
                " was made for datatype ", findDataType(it->second.datatype)->name,
                " but the call's datatype is ", findDataType(datatype)->name, ".");
  out->op = sqzSum;
  out->preMulSum = it->second;
  return ncclSuccess;
}

// x * scalar per element, rounded in the datatype as NCCL's PreMulSum does before it sums (16-bit
// floats multiply in float32, exactly, and round once).
template <class Elem>
void scaleAs(const void* in, void* out, size_t count, const void* scalar) {
  using S = typename Elem::Storage;
  S s;
  std::memcpy(&s, scalar, sizeof s);
  const auto factor = Elem::load(s);
  const S* x = static_cast<const S*>(in);
  S* y = static_cast<S*>(out);
  for (size_t i = 0; i < count; ++i)
    y[i] = Elem::store(device::OpProd::apply(Elem::load(x[i]), factor));
}

void scale(sqzDataType_t datatype, const void* in, void* out, size_t count, const void* scalar) {
  using namespace device;
  switch (datatype) {
    case sqzInt8: return scaleAs<PlainElem<int8_t>>(in, out, count, scalar);
    case sqzUint8: return scaleAs<PlainElem<uint8_t>>(in, out, count, scalar);
    case sqzInt32: return scaleAs<PlainElem<int32_t>>(in, out, count, scalar);
    case sqzUint32: return scaleAs<PlainElem<uint32_t>>(in, out, count, scalar);
    case sqzInt64: return scaleAs<PlainElem<int64_t>>(in, out, count, scalar);
    case sqzUint64: return scaleAs<PlainElem<uint64_t>>(in, out, count, scalar);
    case sqzFloat16: return scaleAs<HalfElem>(in, out, count, scalar);
    case sqzFloat32: return scaleAs<PlainElem<float>>(in, out, count, scalar);
    case sqzFloat64: return scaleAs<PlainElem<double>>(in, out, count, scalar);
    case sqzBfloat16: return scaleAs<Bfloat16Elem>(in, out, count, scalar);
    default: break;
  }
}

size_t elementBytes(sqzDataType_t datatype) {
  for (const DataTypeRow& row : kDataTypes)
    if (row.sqz == datatype) return row.bytes;
  return 0;
}

bool isDeviceMemory(const void* ptr) {
#if SQZ_HAVE_CUDA
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();  // host memory CUDA never saw; clear the sticky error
    return false;
  }
  return attr.type == cudaMemoryTypeDevice;
#else
  (void)ptr;
  return false;
#endif
}

// The input a reducing call passes Squeeze: sendbuff, or for a PreMulSum a scaled copy of it
// (held in *scaled), since Squeeze has no PreMulSum. The copy is host memory, so device buffers
// are refused (a device call would need a kernel on the stream).
ncclResult_t reductionInput(const Reduction& red, const void* sendbuff, size_t count,
                            void* stream, const char* fn, std::vector<unsigned char>* scaled,
                            const void** in) {
  *in = sendbuff;
  if (!red.preMulSum) return ncclSuccess;
  if (stream || (sendbuff && isDeviceMemory(sendbuff)))
    return fail(ncclInvalidUsage, fn, ": a PreMulSum operator on device buffers is not "
                "supported by Squeeze; multiply the buffer by the scalar before the call and use "
                "ncclSum, or use ncclAvg.");
  if (count == 0) return ncclSuccess;
  if (!sendbuff) return fail(ncclInvalidArgument, fn, ": sendbuff is NULL with count ", count, ".");
  scaled->resize(count * elementBytes(red.type));
  scale(red.type, sendbuff, scaled->data(), count, red.preMulSum->scalar.data());
  *in = scaled->data();
  return ncclSuccess;
}

// What every reducing collective does around its Squeeze call: check the communicator, translate
// the datatype and operator now (bad arguments fail the call itself, not its group), and when the
// call runs, pass Squeeze the input reductionInput gives for inputCount() elements (a function:
// ncclReduceScatter's input size needs the rank count, known only once the communicator is up).
template <class InputCount, class Call>
ncclResult_t submitReduction(ncclComm* comm, const char* fn, const void* sendbuff,
                             ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream,
                             InputCount inputCount, Call call) {
  SHIM_CHECK_DATA_COMM(comm, fn);
  Reduction red;
  if (ncclResult_t r = toReduction(comm, datatype, op, fn, &red); r != ncclSuccess) return r;
  return submitCall(comm, false, [=]() -> ncclResult_t {
    size_t count = 0;
    if (ncclResult_t r = inputCount(&count); r != ncclSuccess) return r;
    std::vector<unsigned char> scaled;
    const void* in;
    if (ncclResult_t r = reductionInput(red, sendbuff, count, stream, fn, &scaled, &in);
        r != ncclSuccess)
      return r;
    return call(in, red);
  });
}

// ---- SQZ_NCCL_CODEC ------------------------------------------------------------------------------

// The process's rules, parsed once; a bad value fails every communicator init with the reason.
struct CodecEnv {
  std::vector<CodecRule> rules;
  std::string error;
};
const CodecEnv& codecEnv() {
  static const CodecEnv env = [] {
    CodecEnv e;
    const char* text = std::getenv("SQZ_NCCL_CODEC");
    if (!text) return e;
    try {
      e.rules = parseCodecRules(text);
    } catch (const std::invalid_argument& ex) {
      e.error = ex.what();
    }
    return e;
  }();
  return env;
}

// A new communicator takes the rules after checking each spec with Squeeze (a codec made and
// freed), so a misspelt codec fails at init, not at the first large all-reduce.
ncclResult_t attachCodecRules(ncclComm* comm) {
  const CodecEnv& env = codecEnv();
  if (!env.error.empty()) return fail(ncclInvalidArgument, env.error);
  for (const CodecRule& rule : env.rules) {
    if (rule.spec == "dense") continue;
    sqzCodec_t probe = nullptr;
    const sqzResult_t r = sqzCodecCreate(&probe, rule.spec.c_str(), 1024, sqzFloat32, comm->sqz);
    if (r != sqzSuccess)
      return fail(toNccl(r), "SQZ_NCCL_CODEC: '", rule.spec, "': ", sqzGetLastError(nullptr));
    sqzCodecDestroy(probe);
  }
  comm->codecRules = env.rules;
  return ncclSuccess;
}

// The codec of an all-reduce, or null for a plain one: float32 sum or average whose size a rule
// names. One codec per (sendbuff, count): a training loop all-reduces the same gradient buffers
// every step, and each buffer's error-feedback residual must come back to it.
ncclResult_t codecOf(ncclComm* comm, const void* sendbuff, size_t count, sqzDataType_t datatype,
                     sqzRedOp_t op, sqzCodec_t* codec) {
  *codec = nullptr;
  if (comm->codecRules.empty() || datatype != sqzFloat32 || (op != sqzSum && op != sqzAvg))
    return ncclSuccess;
  if (auto it = comm->codecs.find({sendbuff, count}); it != comm->codecs.end()) {
    *codec = it->second;  // every step after the first: the rule was matched then
    return ncclSuccess;
  }
  const std::string spec = codecFor(comm->codecRules, count * sizeof(float));
  if (spec.empty()) return ncclSuccess;
  const sqzResult_t r = sqzCodecCreate(codec, spec.c_str(), count, sqzFloat32, comm->sqz);
  if (r != sqzSuccess) return forward(r);
  comm->codecs[{sendbuff, count}] = *codec;
  return ncclSuccess;
}

// ---- communicators ------------------------------------------------------------------------------

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

// ncclCommInitAll's devices: devlist, or 0..ndev-1; without a GPU, host-memory communicators.
int deviceCount() {
#if SQZ_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
  return 0;
#endif
}

void destroyCodecs(ncclComm* comm) {
  for (auto& [key, codec] : comm->codecs) sqzCodecDestroy(codec);
  comm->codecs.clear();
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
  if (!comm) return fail(ncclInvalidArgument, "ncclCommInitRankConfig: comm is NULL.");
  if (ncclResult_t r = checkNcclConfig(config, "ncclCommInitRankConfig"); r != ncclSuccess)
    return r;
  *comm = nullptr;
  return submitInit([=] { return initRank(comm, nranks, commId, rank, SQZ_CONFIG_UNDEF_INT); });
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  enter();
  if (nId != 1 || !commIds)
    return fail(ncclInvalidUsage, "ncclCommInitRankScalable: Squeeze's rendezvous has one root; "
                "pass nId = 1 (one id from ncclGetUniqueId), or use ncclCommInitRank.");
  return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  enter();
  if (!comms) return fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL.");
  if (ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: ndev is ", ndev, "; pass >= 1.");
  const bool gpus = deviceCount() > 0;
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return r;
  for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
  std::vector<GroupCall> inits;
  for (int i = 0; i < ndev; ++i) {
    const int device = !gpus ? SQZ_CONFIG_UNDEF_INT : devlist ? devlist[i] : i;
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
  SHIM_CHECK_DATA_COMM(comm, "ncclCommSplit");
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

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  enter();
  SHIM_CHECK_COMM(comm, "ncclCommFinalize");
  comm->finalized = true;
  return forward(sqzCommFinalize(comm->sqz));
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  enter();
  if (!comm) return ncclSuccess;
  SHIM_CHECK_COMM(comm, "ncclCommDestroy");
  destroyCodecs(comm);
  const sqzResult_t r = sqzCommDestroy(comm->sqz);
  comm->magic = 0;
  delete comm;
  return forward(r);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  enter();
  if (!comm) return ncclSuccess;
  SHIM_CHECK_COMM(comm, "ncclCommAbort");
  const sqzResult_t r = sqzCommAbort(comm->sqz);  // first: a call in flight returns promptly
  while (comm->inflight.load() > 0) std::this_thread::yield();  // ...and leaves the handle
  destroyCodecs(comm);
  comm->magic = 0;
  delete comm;
  return forward(r);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  enter();
  SHIM_CHECK_COMM(comm, "ncclCommGetAsyncError");
  if (!asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL.");
  sqzResult_t err = sqzSuccess;
  const sqzResult_t r = sqzCommGetAsyncError(comm->sqz, &err);
  if (r != sqzSuccess) return forward(r);
  *asyncError = toNccl(err);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  enter();
  SHIM_CHECK_COMM(comm, "ncclCommCount");
  return forward(sqzCommCount(comm->sqz, count));
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  enter();
  SHIM_CHECK_COMM(comm, "ncclCommCuDevice");
  return forward(sqzCommCuDevice(comm->sqz, device));
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  enter();
  SHIM_CHECK_COMM(comm, "ncclCommUserRank");
  return forward(sqzCommUserRank(comm->sqz, rank));
}

// ---- PreMulSum ------------------------------------------------------------------------------------

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  enter();
  SHIM_CHECK_COMM(comm, "ncclRedOpCreatePreMulSum");
  if (!op || !scalar)
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: ", !op ? "op" : "scalar",
                " is NULL.");
  sqzDataType_t type;
  if (ncclResult_t r = toSqzType(datatype, "ncclRedOpCreatePreMulSum", &type); r != ncclSuccess)
    return r;
  if (residence != ncclScalarHostImmediate)
    return fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: a scalar in device memory "
                "(ncclScalarDevice) is not supported by Squeeze; pass ncclScalarHostImmediate "
                "with the scalar in host memory.");
  PreMulSum made{type, {}};
  std::memcpy(made.scalar.data(), scalar, elementBytes(type));
  std::lock_guard<std::mutex> lock(comm->preMulSumMu);
  if (comm->nextPreMulSum == ncclMaxRedOp)
    return fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: out of operator values; destroy "
                "operators with ncclRedOpDestroy.");
  const int value = comm->nextPreMulSum++;
  comm->preMulSums[value] = made;
  *op = static_cast<ncclRedOp_t>(value);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  enter();
  SHIM_CHECK_COMM(comm, "ncclRedOpDestroy");
  std::lock_guard<std::mutex> lock(comm->preMulSumMu);
  if (comm->preMulSums.erase(static_cast<int>(op)) == 0)
    return fail(ncclInvalidArgument, "ncclRedOpDestroy: op ", static_cast<int>(op), " is not an "
                "operator ncclRedOpCreatePreMulSum made on this communicator (built-in operators "
                "are not destroyed).");
  return ncclSuccess;
}

// ---- collectives ------------------------------------------------------------------------------

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  enter();
  auto inputCount = [count](size_t* n) {
    *n = count;
    return ncclSuccess;
  };
  return submitReduction(
      comm, "ncclAllReduce", sendbuff, datatype, op, stream, inputCount,
      [=](const void* in, const Reduction& red) {
        sqzCodec_t codec = nullptr;
        if (!red.preMulSum)
          if (ncclResult_t r = codecOf(comm, sendbuff, count, red.type, red.op, &codec);
              r != ncclSuccess)
            return r;
        if (codec)
          return forward(sqzAllReduceCompressed(in, recvbuff, count, red.type, red.op, codec,
                                                comm->sqz, stream));
        return forward(sqzAllReduce(in, recvbuff, count, red.type, red.op, comm->sqz, stream));
      });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  enter();
  SHIM_CHECK_DATA_COMM(comm, "ncclBroadcast");
  sqzDataType_t type;
  if (ncclResult_t r = toSqzType(datatype, "ncclBroadcast", &type); r != ncclSuccess) return r;
  return submitCall(comm, false, [=] {
    return forward(sqzBroadcast(sendbuff, recvbuff, count, type, root, comm->sqz, stream));
  });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  enter();
  auto inputCount = [count](size_t* n) {
    *n = count;
    return ncclSuccess;
  };
  return submitReduction(comm, "ncclReduce", sendbuff, datatype, op, stream, inputCount,
                         [=](const void* in, const Reduction& red) {
                           return forward(sqzReduce(in, recvbuff, count, red.type, red.op, root,
                                                    comm->sqz, stream));
                         });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  enter();
  SHIM_CHECK_DATA_COMM(comm, "ncclAllGather");
  sqzDataType_t type;
  if (ncclResult_t r = toSqzType(datatype, "ncclAllGather", &type); r != ncclSuccess) return r;
  return submitCall(comm, false, [=] {
    return forward(sqzAllGather(sendbuff, recvbuff, sendcount, type, comm->sqz, stream));
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  enter();
  auto inputCount = [comm, recvcount](size_t* n) {
    int nranks = 0;
    if (sqzResult_t r = sqzCommCount(comm->sqz, &nranks); r != sqzSuccess) return forward(r);
    *n = recvcount * nranks;
    return ncclSuccess;
  };
  return submitReduction(comm, "ncclReduceScatter", sendbuff, datatype, op, stream, inputCount,
                         [=](const void* in, const Reduction& red) {
                           return forward(sqzReduceScatter(in, recvbuff, recvcount, red.type,
                                                           red.op, comm->sqz, stream));
                         });
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  enter();
  SHIM_CHECK_DATA_COMM(comm, "ncclAlltoAll");
  sqzDataType_t type;
  if (ncclResult_t r = toSqzType(datatype, "ncclAlltoAll", &type); r != ncclSuccess) return r;
  return submitCall(comm, false, [=] {
    return forward(sqzAlltoAll(sendbuff, recvbuff, count, type, comm->sqz, stream));
  });
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  enter();
  SHIM_CHECK_DATA_COMM(comm, "ncclSend");
  sqzDataType_t type;
  if (ncclResult_t r = toSqzType(datatype, "ncclSend", &type); r != ncclSuccess) return r;
  return submitCall(comm, true, [=] {
    return forward(sqzSend(sendbuff, count, type, peer, comm->sqz, stream));
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  enter();
  SHIM_CHECK_DATA_COMM(comm, "ncclRecv");
  sqzDataType_t type;
  if (ncclResult_t r = toSqzType(datatype, "ncclRecv", &type); r != ncclSuccess) return r;
  return submitCall(comm, true, [=] {
    return forward(sqzRecv(recvbuff, count, type, peer, comm->sqz, stream));
  });
}

ncclResult_t ncclGroupStart() {
  enter();
  return groupStart();
}

ncclResult_t ncclGroupEnd() {
  enter();
  return groupEnd();
}

// ---- what Squeeze does not do ------------------------------------------------------------------

ncclResult_t ncclGather(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                        cudaStream_t) {
  return fail(ncclInvalidUsage, "ncclGather is not supported by Squeeze; use ncclAllGather, or "
              "ncclSend to the root and ncclRecv there inside ncclGroupStart/ncclGroupEnd.");
}

ncclResult_t ncclScatter(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                         cudaStream_t) {
  return fail(ncclInvalidUsage, "ncclScatter is not supported by Squeeze; use ncclSend from the "
              "root and ncclRecv on every rank inside ncclGroupStart/ncclGroupEnd.");
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t*) {
  return fail(ncclInvalidUsage, "ncclGroupSimulateEnd is not supported by Squeeze (it has no "
              "NCCL performance model); call ncclGroupEnd.");
}

ncclResult_t ncclCommRegister(const ncclComm_t, void*, size_t, void** handle) {
  if (handle) *handle = nullptr;
  return fail(ncclInvalidUsage, "ncclCommRegister is not supported by Squeeze (it does not "
              "register user buffers); pass buffers to the calls unregistered.");
}

ncclResult_t ncclCommDeregister(const ncclComm_t, void*) {
  return fail(ncclInvalidUsage, "ncclCommDeregister: Squeeze registers no buffers.");
}

ncclResult_t ncclCommWindowRegister(ncclComm_t, void*, size_t, ncclWindow_t* win, int) {
  if (win) *win = nullptr;
  return fail(ncclInvalidUsage, "ncclCommWindowRegister is not supported by Squeeze (no "
              "symmetric memory windows).");
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t) {
  return fail(ncclInvalidUsage, "ncclCommWindowDeregister: Squeeze registers no windows.");
}

ncclResult_t ncclCommRevoke(ncclComm_t, int) {
  return fail(ncclInvalidUsage, "ncclCommRevoke is not supported by Squeeze; use ncclCommAbort.");
}

ncclResult_t ncclCommShrink(ncclComm_t, int*, int, ncclComm_t* newcomm, ncclConfig_t*, int) {
  if (newcomm) *newcomm = nullptr;
  return fail(ncclInvalidUsage, "ncclCommShrink is not supported by Squeeze; when every rank "
              "is alive, ncclCommSplit with NCCL_SPLIT_NOCOLOR on the excluded ranks does the "
              "same; after a failure, abort and make a new communicator.");
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL.");
#if SQZ_HAVE_CUDA
  const cudaError_t e = cudaMalloc(ptr, size);
  if (e != cudaSuccess)
    return fail(ncclUnhandledCudaError, "ncclMemAlloc: cudaMalloc of ", size, " bytes failed: ",
                cudaGetErrorString(e));
  return ncclSuccess;
#else
  (void)size;
  *ptr = nullptr;
  return fail(ncclInvalidUsage, "ncclMemAlloc: this build of Squeeze has no CUDA support.");
#endif
}

ncclResult_t ncclMemFree(void* ptr) {
#if SQZ_HAVE_CUDA
  const cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess)
    return fail(ncclUnhandledCudaError, "ncclMemFree: cudaFree failed: ", cudaGetErrorString(e));
  return ncclSuccess;
#else
  (void)ptr;
  return fail(ncclInvalidUsage, "ncclMemFree: this build of Squeeze has no CUDA support.");
#endif
}
