// The C API's calls about results rather than communication: sqzGetErrorString, sqzGetLastError
// (the communicator's last message, or this thread's when there is no communicator), and
// sqzGetVersion.
#include <mutex>
#include <string>

#include "api/api_guard.h"

using namespace squeeze;

namespace squeeze {

namespace {
thread_local std::string tlsLastError;
}

void setThreadLastError(const std::string& msg) { tlsLastError = msg; }

}  // namespace squeeze

extern "C" {

sqzResult_t sqzGetVersion(int* version) {
  return apiGuard(nullptr, [&] {
    if (!version) raise(ErrorCode::kInvalidArgument, "sqzGetVersion: version is NULL.");
    *version = SQZ_VERSION_CODE;
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

}  // extern "C"
