// The tables of translate.h. The static_asserts pin each row to its index, so the tables cannot
// drift out of order against nccl.h or squeeze.h.
#include "nccl_shim/translate.h"

namespace squeeze::nccl_shim {

constexpr DataTypeRow kDataTypes[ncclNumTypes] = {
    {ncclInt8, "ncclInt8", sqzInt8, 1},
    {ncclUint8, "ncclUint8", sqzUint8, 1},
    {ncclInt32, "ncclInt32", sqzInt32, 4},
    {ncclUint32, "ncclUint32", sqzUint32, 4},
    {ncclInt64, "ncclInt64", sqzInt64, 8},
    {ncclUint64, "ncclUint64", sqzUint64, 8},
    {ncclFloat16, "ncclFloat16", sqzFloat16, 2},
    {ncclFloat32, "ncclFloat32", sqzFloat32, 4},
    {ncclFloat64, "ncclFloat64", sqzFloat64, 8},
    {ncclBfloat16, "ncclBfloat16", sqzBfloat16, 2},
    {ncclFloat8e4m3, "ncclFloat8e4m3", std::nullopt, 1},
    {ncclFloat8e5m2, "ncclFloat8e5m2", std::nullopt, 1},
};
static_assert(ncclNumTypes == 12, "nccl.h has datatypes this table does not know");

constexpr RedOpRow kRedOps[ncclNumOps] = {
    {ncclSum, "ncclSum", sqzSum},
    {ncclProd, "ncclProd", sqzProd},
    {ncclMax, "ncclMax", sqzMax},
    {ncclMin, "ncclMin", sqzMin},
    {ncclAvg, "ncclAvg", sqzAvg},
};

// Squeeze's timeout has no NCCL code: a peer that stops answering is what NCCL calls a remote
// error, and the message (ncclGetLastError) says it timed out.
constexpr ResultRow kResults[sqzNumResults] = {
    {sqzSuccess, ncclSuccess},
    {sqzCudaError, ncclUnhandledCudaError},
    {sqzSystemError, ncclSystemError},
    {sqzInternalError, ncclInternalError},
    {sqzInvalidArgument, ncclInvalidArgument},
    {sqzInvalidUsage, ncclInvalidUsage},
    {sqzRemoteError, ncclRemoteError},
    {sqzInProgress, ncclInProgress},
    {sqzTimeout, ncclRemoteError},
};

namespace {
template <class Row, size_t N, class Key>
constexpr bool inOrder(const Row (&rows)[N], Key Row::*key) {
  for (size_t i = 0; i < N; ++i)
    if (static_cast<size_t>(rows[i].*key) != i) return false;
  return true;
}
}  // namespace

const DataTypeRow* findDataType(int datatype) {
  static_assert(inOrder(kDataTypes, &DataTypeRow::nccl));
  return datatype >= 0 && datatype < ncclNumTypes ? &kDataTypes[datatype] : nullptr;
}

const RedOpRow* findRedOp(int op) {
  static_assert(inOrder(kRedOps, &RedOpRow::nccl));
  return op >= 0 && op < ncclNumOps ? &kRedOps[op] : nullptr;
}

ncclResult_t toNccl(sqzResult_t result) {
  static_assert(inOrder(kResults, &ResultRow::sqz));
  const int i = static_cast<int>(result);
  return i >= 0 && i < sqzNumResults ? kResults[i].nccl : ncclInternalError;
}

}  // namespace squeeze::nccl_shim
