// The shim's data calls: the collectives, send and receive, and the group calls around them,
// each recorded or run through group.h; and the PreMulSum operators the reducing collectives
// accept, which Squeeze lacks: the shim scales the input on the host and sums, so only host
// buffers take them (device buffers fail, saying so). A scalar in host memory
// (ncclScalarHostImmediate) is read when the operator is made; one in device memory
// (ncclScalarDevice) when each call using it is issued, in the order of the call's stream: a
// 1-8 byte cudaMemcpyAsync and a synchronize of that stream (the legacy default stream for host
// buffers), so each such call first waits on the host for the work queued before it. When
// ncclRedOpCreatePreMulSum fails it leaves an operator value every call refuses, naming the
// failure: torch ignores its result, and would otherwise sum unscaled (its op starts as ncclSum).
#include <array>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "device/elementwise.h"
#include "nccl_shim/shim_call.h"
#include "squeeze_config.h"

using namespace squeeze;
using namespace squeeze::nccl_shim;

namespace {

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
  if (static_cast<int>(op) == kFailedPreMulSum)
    return fail(ncclInvalidArgument, fn, ": op ", static_cast<int>(op),
                " is what a failed ncclRedOpCreatePreMulSum leaves: no operator was made (",
                comm->preMulSumFailure.empty() ? "that call was not on this communicator"
                                               : comm->preMulSumFailure,
                "); check that call's result.");
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

// A ncclScalarDevice scalar's bytes, read in `stream`'s order (see the top of the file).
ncclResult_t readDeviceScalar(const PreMulSum& op, cudaStream_t stream, const char* fn,
                              unsigned char* out) {
#if SQZ_HAVE_CUDA
  cudaError_t e =
      cudaMemcpyAsync(out, op.deviceScalar, elementBytes(op.datatype), cudaMemcpyDefault, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) return ncclSuccess;
  cudaGetLastError();  // the program's next CUDA call should not see this one's error
  return fail(ncclUnhandledCudaError, fn, ": reading the PreMulSum operator's scalar at ",
              op.deviceScalar, " (ncclScalarDevice) failed: ", cudaGetErrorString(e), ".");
#else
  (void)op, (void)stream, (void)out;  // ncclRedOpCreatePreMulSum refuses ncclScalarDevice
  return fail(ncclInternalError, fn, ": a device scalar in a build without CUDA.");
#endif
}

// The input a reducing call passes Squeeze: sendbuff, or for a PreMulSum a scaled copy of it
// (held in *scaled), since Squeeze has no PreMulSum. The copy is host memory, so device buffers
// are refused (a device call would need a kernel on the stream).
ncclResult_t reductionInput(const Reduction& red, const void* sendbuff, size_t count,
                            cudaStream_t stream, const char* fn, std::vector<unsigned char>* scaled,
                            const void** in) {
  *in = sendbuff;
  if (!red.preMulSum) return ncclSuccess;
  if (stream || (sendbuff && isDeviceMemory(sendbuff)))
    return fail(ncclInvalidUsage, fn, ": a PreMulSum operator on device buffers is not "
                "supported by Squeeze; multiply the buffer by the scalar before the call and use "
                "ncclSum, or use ncclAvg.");
  if (count == 0) return ncclSuccess;
  if (!sendbuff) return fail(ncclInvalidArgument, fn, ": sendbuff is NULL with count ", count, ".");
  std::array<unsigned char, 8> scalar = red.preMulSum->scalar;
  if (red.preMulSum->deviceScalar)
    if (ncclResult_t r = readDeviceScalar(*red.preMulSum, stream, fn, scalar.data());
        r != ncclSuccess)
      return r;
  scaled->resize(count * elementBytes(red.type));
  scale(red.type, sendbuff, scaled->data(), count, scalar.data());
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
  SQZ_SHIM_CHECK_DATA_COMM(comm, fn);
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

}  // namespace

// ---- PreMulSum ------------------------------------------------------------------------------------

namespace {

ncclResult_t createPreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                             ncclScalarResidence_t residence, ncclComm_t comm) {
  SQZ_SHIM_CHECK_COMM(comm, "ncclRedOpCreatePreMulSum");
  if (!op || !scalar)
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: ", !op ? "op" : "scalar",
                " is NULL.");
  sqzDataType_t type;
  if (ncclResult_t r = toSqzType(datatype, "ncclRedOpCreatePreMulSum", &type); r != ncclSuccess)
    return r;
  PreMulSum made{type, {}, nullptr};
  if (residence == ncclScalarHostImmediate) {
    std::memcpy(made.scalar.data(), scalar, elementBytes(type));
  } else if (residence == ncclScalarDevice) {
    if (!SQZ_HAVE_CUDA)
      return fail(ncclInvalidUsage,
                  "ncclRedOpCreatePreMulSum: a scalar in device memory (ncclScalarDevice) needs a "
                  "build of Squeeze with CUDA; pass ncclScalarHostImmediate with the scalar in "
                  "host memory.");
    made.deviceScalar = scalar;
  } else {
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: residence ",
                static_cast<int>(residence),
                " is neither ncclScalarDevice nor ncclScalarHostImmediate.");
  }
  std::lock_guard<std::mutex> lock(comm->preMulSumMu);
  if (comm->nextPreMulSum == kFailedPreMulSum)
    return fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: out of operator values; destroy "
                "operators with ncclRedOpDestroy.");
  const int value = comm->nextPreMulSum++;
  comm->preMulSums[value] = made;
  *op = static_cast<ncclRedOp_t>(value);
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  enter();
  const ncclResult_t r = createPreMulSum(op, scalar, datatype, residence, comm);
  if (r != ncclSuccess && op) {
    *op = static_cast<ncclRedOp_t>(kFailedPreMulSum);
    if (liveComm(comm)) {
      std::lock_guard<std::mutex> lock(comm->preMulSumMu);
      comm->preMulSumFailure = lastError();
    }
  }
  return r;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  enter();
  SQZ_SHIM_CHECK_COMM(comm, "ncclRedOpDestroy");
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
  SQZ_SHIM_CHECK_DATA_COMM(comm, "ncclBroadcast");
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
  SQZ_SHIM_CHECK_DATA_COMM(comm, "ncclAllGather");
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
  SQZ_SHIM_CHECK_DATA_COMM(comm, "ncclAlltoAll");
  sqzDataType_t type;
  if (ncclResult_t r = toSqzType(datatype, "ncclAlltoAll", &type); r != ncclSuccess) return r;
  return submitCall(comm, false, [=] {
    return forward(sqzAlltoAll(sendbuff, recvbuff, count, type, comm->sqz, stream));
  });
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  enter();
  SQZ_SHIM_CHECK_DATA_COMM(comm, "ncclSend");
  sqzDataType_t type;
  if (ncclResult_t r = toSqzType(datatype, "ncclSend", &type); r != ncclSuccess) return r;
  return submitCall(comm, true, [=] {
    return forward(sqzSend(sendbuff, count, type, peer, comm->sqz, stream));
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  enter();
  SQZ_SHIM_CHECK_DATA_COMM(comm, "ncclRecv");
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

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  enter();
  return groupSimulateEnd(simInfo);
}
