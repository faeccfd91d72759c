// squeeze.Comm: one sqzComm_t, its lifetime (close, abort, garbage collection), the lock that
// keeps Python threads from using it at once (the C API allows one thread at a time), and the
// codecs made on it (which a shrink or grow moves to the new Comm).
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "errors.h"
#include "squeeze/squeeze.h"

namespace squeeze::python {

namespace py = pybind11;

class Comm {
 public:
  explicit Comm(sqzComm_t handle);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // Runs fn(handle), which returns a sqzResult_t, with the GIL released and the call lock held;
  // raises InvalidUsage naming fnName when the communicator is closed or aborted, and the
  // matching squeeze.Error when fn fails.
  template <class F>
  void call(const char* fnName, F&& fn) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    sqzComm_t h = handle_.load();
    if (!h) raiseInvalidUsage(fnName, ": ", closedReason());
    check(fn(h));
  }

  // Runs fn(handle or NULL when closed) as call does, but lets fn decide what a closed
  // communicator means (a codec can still be freed, and its state read, after it).
  template <class F>
  auto locked(F&& fn) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    return fn(handle_.load());
  }

  // As locked, keeping the GIL: for destructors, which may run while the interpreter finalizes.
  // Safe because no thread waits for the GIL while it holds the lock.
  template <class F>
  auto lockedHoldingGil(F&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    return fn(handle_.load());
  }

  int rank(const char* fnName) const;
  int size(const char* fnName) const;
  bool closed() const { return handle_.load() == nullptr; }
  bool aborted() const { return aborted_; }
  const char* closedReason() const;

  void close();
  void abort();
  // sqzCommRevoke, without the call lock (it ends a call in flight on another thread).
  void revoke();

  // The codecs made on this Comm (or moved to it), which shrink() and grow() move to the new
  // one. Changed only with the GIL held, as codecs are made and freed.
  void addCodec(class Codec* c) { codecs_.push_back(c); }
  void removeCodec(class Codec* c) { std::erase(codecs_, c); }
  const std::vector<class Codec*>& codecs() const { return codecs_; }

 private:
  std::mutex mu_;  // held through each call: the C API takes one thread at a time
  // NULL once closed or aborted. Atomic because abort() runs without mu_: it must reach a call
  // in flight on another thread, which holds mu_.
  std::atomic<sqzComm_t> handle_;
  std::atomic<bool> aborted_{false};
  int rank_ = -1;
  int size_ = 0;
  std::vector<class Codec*> codecs_;
};

void bindComm(py::module_& m);

}  // namespace squeeze::python
