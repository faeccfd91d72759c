// The C API's collectives (all-reduce, broadcast, reduce, all-gather, reduce-scatter,
// all-to-all, barrier): each checks its arguments and buffers, then hands one CollRequest to the
// communicator, to run now (host buffers) or on the stream (device buffers).
#include "api/api_checks.h"

using namespace squeeze;
using namespace squeeze::api;

namespace {

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

}  // namespace

extern "C" {

sqzResult_t sqzAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                         sqzDataType_t datatype, sqzRedOp_t op, sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    const char* fn = "sqzAllReduce";
    checkCommon(comm, count, count, datatype, fn);
    checkOp(op, fn);
    checkBuffers(sendbuff, recvbuff, count, fn);
    const size_t bytes = count * dataTypeSize(static_cast<DataType>(datatype));
    checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}, 0,
                 "sendbuff == recvbuff", fn);
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
    // On every rank that passes both (not only the root), so that a program making this mistake
    // learns it on every rank.
    checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}, 0,
                 "sendbuff == recvbuff", fn);
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
    checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}, 0,
                 "sendbuff == recvbuff", fn);
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
    checkOverlap({"sendbuff", sendbuff, sendcount * esz}, {"recvbuff", recvbuff, total * esz},
                 static_cast<std::ptrdiff_t>(comm->impl->rank() * sendcount * esz),
                 "sendbuff == recvbuff + rank*sendcount", fn);
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
    checkOverlap({"sendbuff", sendbuff, total * esz}, {"recvbuff", recvbuff, recvcount * esz},
                 -static_cast<std::ptrdiff_t>(comm->impl->rank() * recvcount * esz),
                 "recvbuff == sendbuff + rank*recvcount", fn);
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
    checkOverlap({"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}, 0, nullptr, fn);
    const bool device = onDevice(comm, {{"sendbuff", sendbuff, bytes}, {"recvbuff", recvbuff, bytes}},
                                 stream, fn);
    dispatch(comm, makeRequest(CollKind::kAlltoAll, sendbuff, recvbuff, count, datatype, sqzSum,
                               0), device, stream);
  });
}

sqzResult_t sqzBarrier(sqzComm_t comm) {
  return apiGuard(comm, [&] {
    checkComm(comm, "sqzBarrier");
    comm->impl->barrier();
  });
}

}  // extern "C"
