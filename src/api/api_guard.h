// The one exception barrier between C++ and C: every extern "C" body is
// `return apiGuard(comm, [&] { ... });`, which maps exceptions to sqzResult_t and records the
// message for sqzGetLastError (per communicator, and per thread).
#pragma once

#include <atomic>
#include <mutex>
#include <thread>
#include <new>
#include <string>

#include "base/error.h"
#include "base/logging.h"
#include "core/communicator.h"
#include "squeeze/squeeze.h"

constexpr uint32_t kCommMagic = 0x4d4d4f43;  // "COMM"

struct sqzComm {
  uint32_t magic = kCommMagic;
  std::unique_ptr<squeeze::Communicator> impl;
  std::mutex lastErrorMu;  // protects lastError
  std::string lastError;
  // API calls inside apiGuard on this handle; sqzCommAbort frees it only when none is left.
  std::atomic<int> inflight{0};
};

namespace squeeze {

void setThreadLastError(const std::string& msg);

template <class F>
sqzResult_t apiGuard(sqzComm* comm, F&& body) {
  struct Inflight {
    sqzComm* c;
    explicit Inflight(sqzComm* comm) : c(comm && comm->magic == kCommMagic ? comm : nullptr) {
      if (c) c->inflight.fetch_add(1);
    }
    ~Inflight() {
      if (c) c->inflight.fetch_sub(1);
    }
  } inflight(comm);
  std::string msg;
  sqzResult_t code;
  try {
    body();
    return sqzSuccess;
  } catch (const Error& e) {
    code = static_cast<sqzResult_t>(e.code());
    msg = e.what();
  } catch (const std::bad_alloc&) {
    code = sqzSystemError;
    msg = "out of memory";
  } catch (const std::exception& e) {
    code = sqzInternalError;
    msg = strCat("internal error: ", e.what());
  }
  // The caller has the result and the sentence (sqzGetLastError; a Python exception): logging
  // it as a warning too would print errors the program handles. Squeeze's own bugs still warn.
  if (code == sqzInternalError)
    SQZ_WARN(kInit, msg);
  else
    SQZ_INFO(kInit, "a call returned ", sqzGetErrorString(code), ": ", msg);
  setThreadLastError(msg);
  if (comm && comm->magic == kCommMagic) {
    std::lock_guard<std::mutex> lock(comm->lastErrorMu);
    comm->lastError = msg;
  }
  return code;
}

}  // namespace squeeze
