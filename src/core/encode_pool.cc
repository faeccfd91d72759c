// EncodePool (see encode_pool.h).
#include "core/encode_pool.h"

#include <algorithm>

namespace squeeze {

EncodePool::EncodePool(int threads) {
  for (int w = 0; w < std::max(threads, 1); ++w) contexts_.push_back(device::makeHostContext());
  for (int w = 1; w < threads; ++w) helpers_.emplace_back([this, w] { helperLoop(w); });
}

EncodePool::~EncodePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void EncodePool::drain(int worker) {
  for (size_t i = next_.fetch_add(1); i < items_; i = next_.fetch_add(1)) {
    try {
      (*work_)(i, *contexts_[worker]);
    } catch (...) {
      errors_[i] = std::current_exception();
    }
  }
}

void EncodePool::helperLoop(int worker) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    drain(worker);
    lock.lock();
    if (--helpersBusy_ == 0) done_.notify_one();
  }
}

void EncodePool::run(size_t n, const Work& work) {
  if (helpers_.empty() || n < 2) {
    for (size_t i = 0; i < n; ++i) work(i, *contexts_[0]);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_ = &work;
    items_ = n;
    next_.store(0);
    errors_.assign(n, nullptr);
    helpersBusy_ = helpers_.size();
    ++generation_;
  }
  start_.notify_all();
  drain(0);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return helpersBusy_ == 0; });
    work_ = nullptr;
  }
  for (const std::exception_ptr& e : errors_)
    if (e) std::rethrow_exception(e);
}

}  // namespace squeeze
