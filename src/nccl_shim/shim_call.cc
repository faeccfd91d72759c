// The helpers of shim_call.h that every entry point of the shim uses.
#include "nccl_shim/shim_call.h"

namespace squeeze::nccl_shim {

// The message is this thread's copy (Squeeze keeps one per thread too): after ncclCommAbort on
// another thread the communicator's own may be gone.
ncclResult_t forward(sqzResult_t r) {
  if (r == sqzSuccess) return ncclSuccess;
  lastError() = sqzGetLastError(nullptr);
  return toNccl(r);
}

void enter() { applyNcclEnv(); }

ncclComm* liveComm(ncclComm_t comm) {
  return comm && comm->magic == kShimCommMagic ? comm : nullptr;
}

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

}  // namespace squeeze::nccl_shim
