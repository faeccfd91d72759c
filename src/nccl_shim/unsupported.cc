// The NCCL calls Squeeze has no counterpart for (gather, scatter, window registration): each
// fails with ncclInvalidUsage and says what to call instead. And
// ncclMemAlloc/ncclMemFree, which need nothing of Squeeze: plain cudaMalloc and cudaFree
// (ncclInvalidUsage in a build without CUDA). Buffer registration is registration.cc's, and
// group simulation (ncclGroupSimulateEnd) is with the other group calls in collectives.cc.
#include "nccl_shim/shim_call.h"
#include "squeeze_config.h"

using namespace squeeze;
using namespace squeeze::nccl_shim;

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

ncclResult_t ncclCommWindowRegister(ncclComm_t, void*, size_t, ncclWindow_t* win, int) {
  if (win) *win = nullptr;
  return fail(ncclInvalidUsage, "ncclCommWindowRegister is not supported by Squeeze (no "
              "symmetric memory windows).");
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t) {
  return fail(ncclInvalidUsage, "ncclCommWindowDeregister: Squeeze registers no windows.");
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
