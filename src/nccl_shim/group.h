// NCCL's group semantics for the shim. Between ncclGroupStart and ncclGroupEnd (per thread,
// nesting) every communicator init and every data call is recorded, not run; the outermost
// ncclGroupEnd runs them: first the inits, then per communicator its sends and receives as one
// Squeeze group followed by its collectives in call order. Inits, and calls on different
// communicators, run on a thread each, as NCCL's one thread driving several GPUs needs (each of
// those calls waits for its peers).
#pragma once

#include <nccl.h>

#include <functional>
#include <string>
#include <vector>

struct ncclComm;

namespace squeeze::nccl_shim {

// A recorded call: runs it and returns its result (with this thread's last error set).
using GroupCall = std::function<ncclResult_t()>;

bool inGroup();
ncclResult_t groupStart();
ncclResult_t groupEnd();
// ncclGroupSimulateEnd, as NCCL's: without simInfo it is groupEnd. Else it ends one level, and
// an inner level returns ncclSuccess with its calls left to the enclosing ncclGroupEnd (NCCL
// simulates only at the outermost level, and fills no estimate at an inner one). The outermost
// level closes the group: the recorded inits run (NCCL runs them when it simulates), the
// recorded calls are dropped unrun, and it returns ncclInvalidUsage with the reason (Squeeze has
// no NCCL performance model to estimate them with; simInfo is left as it was), or
// ncclInvalidArgument for a simInfo not from NCCL_SIM_INFO_INITIALIZER (nothing runs).
ncclResult_t groupSimulateEnd(const ncclSimInfo_t* simInfo);
// Runs the calls now, on a thread each when there are several (each may wait for the others'
// peers), and returns the first failure with its message as this thread's last error.
ncclResult_t runConcurrently(const std::vector<GroupCall>& calls);
// Inside a group: records; outside: runs now.
ncclResult_t submitInit(GroupCall init);
ncclResult_t submitCall(ncclComm* comm, bool p2p, GroupCall call);

// This thread's last error message, as ncclGetLastError returns it; set by every failed call.
std::string& lastError();

}  // namespace squeeze::nccl_shim
