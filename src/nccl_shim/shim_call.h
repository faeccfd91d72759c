// libsqueeze-nccl.so.2 (soname libnccl.so.2): NCCL's C API, as CUDA's nccl.h declares it, over
// Squeeze's, for programs that cannot be changed. Each call checks what only NCCL has (its
// datatypes, PreMulSum operators, configs), translates by the tables of translate.h and forwards
// to the sqz* call of the same shape; groups are group.h's. Calls with no Squeeze meaning return
// ncclInvalidUsage, with the reason in ncclGetLastError. docs/porting.md lists them.
//
// The entry points, by family: communicators.cc (version, ids, errors, init to destroy),
// collectives.cc (data calls, PreMulSum operators, groups), registration.cc (buffer
// registration, accepted without effect), unsupported.cc, device_api.cc (the host half of
// nccl_device.h); beneath them
// comm_codecs.cc (SQZ_NCCL_CODEC) and group.cc. This header (defined in shim_call.cc) holds what
// every entry point uses: results and the last error, the NCCL_* environment on entry, the
// communicator checks, and the datatype translation.
#pragma once

#include <nccl.h>

#include "base/strings.h"
#include "nccl_shim/env_map.h"
#include "nccl_shim/group.h"
#include "nccl_shim/shim_comm.h"
#include "nccl_shim/translate.h"
#include "squeeze/squeeze.h"

namespace squeeze::nccl_shim {

// Records why a call failed, for ncclGetLastError, and returns its code.
template <class... Args>
ncclResult_t fail(ncclResult_t code, const Args&... args) {
  lastError() = strCat("squeeze-nccl: ", args...);
  return code;
}

// A Squeeze call's result as NCCL's; on failure Squeeze's message becomes the last error.
ncclResult_t forward(sqzResult_t r);

// Every entry point starts here: NCCL_* variables become SQZ_* before Squeeze reads them.
void enter();

// comm if it is a shim communicator not yet destroyed, else null.
ncclComm* liveComm(ncclComm_t comm);

// The datatype in Squeeze's terms; fails for a value outside NCCL's enum and for a type Squeeze
// lacks.
ncclResult_t toSqzType(ncclDataType_t datatype, const char* fn, sqzDataType_t* out);

}  // namespace squeeze::nccl_shim

// Return the failure from the entry point when comm is not a live shim communicator (and, for
// data calls, when it was finalized).
#define SQZ_SHIM_CHECK_COMM(comm, fn)                                                         \
  do {                                                                                        \
    if (!liveComm(comm))                                                                      \
      return fail(ncclInvalidArgument, fn, ": comm is ", comm ? "not a live communicator "    \
                  "(destroyed, or not from ncclCommInitRank)" : "NULL", ".");                 \
  } while (0)

#define SQZ_SHIM_CHECK_DATA_COMM(comm, fn)                                                    \
  do {                                                                                        \
    SQZ_SHIM_CHECK_COMM(comm, fn);                                                            \
    if (comm->finalized)                                                                      \
      return fail(ncclInvalidUsage, fn, ": the communicator was finalized (ncclCommFinalize); " \
                  "only ncclCommDestroy may follow.");                                        \
  } while (0)

