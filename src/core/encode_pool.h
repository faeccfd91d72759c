// EncodePool: the threads that encode the independent pieces of one step of a compressed call in
// parallel on host memory (SQZ_ENCODE_THREADS; the executor's preEncode). The calling thread is
// worker 0 and works too; threads - 1 helpers wait on a condition variable between steps. Each
// worker has its own host execution context, where a codec keeps its scratch (codec.h), so two
// pieces never share one; their inputs, payloads and residual ranges are disjoint.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "device/context.h"

namespace squeeze {

class EncodePool {
 public:
  using Work = std::function<void(size_t item, device::Context& ctx)>;

  explicit EncodePool(int threads);  // >= 1; 1: no helpers, run() works inline
  ~EncodePool();
  EncodePool(const EncodePool&) = delete;
  EncodePool& operator=(const EncodePool&) = delete;

  int threads() const { return static_cast<int>(contexts_.size()); }
  // work(item, the worker's context) for every item < n, each once, on the calling thread and the
  // helpers; returns when all are done. Rethrows the error of the lowest item that failed.
  void run(size_t n, const Work& work);

 private:
  void drain(int worker);
  void helperLoop(int worker);

  std::vector<std::unique_ptr<device::Context>> contexts_;  // by worker; 0: the caller's
  std::mutex mu_;
  std::condition_variable start_, done_;
  uint64_t generation_ = 0;  // one per run(): a helper joins each once
  bool stop_ = false;
  size_t helpersBusy_ = 0;
  const Work* work_ = nullptr;
  size_t items_ = 0;
  std::atomic<size_t> next_{0};
  std::vector<std::exception_ptr> errors_;  // by item
  std::vector<std::thread> helpers_;
};

}  // namespace squeeze
