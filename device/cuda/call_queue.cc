// CallQueue (see device/call_queue.h) over the CUDA runtime: compiled for the CUDA build and
// the CUDA stand-in (device/no_cuda.cc says why a build without CUDA has none).
#include "device/call_queue.h"

#include <chrono>

#include "base/logging.h"
#include "device/cuda/runtime.h"

namespace squeeze::device {

namespace {

// Completion counters live in pinned pages that are never freed: a stream may still be polling
// its counter when the communicator goes away, and freeing the page under it is undefined (and
// waiting for every stream of the device could wait on other ranks' calls). One 64-byte slot
// per communicator ever created.
volatile uint32_t* newCounter() {
  static std::mutex mu;
  static char* page = nullptr;
  static size_t used = 0;
  constexpr size_t kPage = 4096, kSlot = 64;
  std::lock_guard<std::mutex> lock(mu);
  if (!page || used == kPage) {
    void* p = nullptr;
    cuda::check(cudaHostAlloc(&p, kPage, cudaHostAllocPortable | cudaHostAllocMapped),
                "cudaHostAlloc of completion counters");
    page = static_cast<char*>(p);
    used = 0;
  }
  auto* counter = reinterpret_cast<volatile uint32_t*>(page + used);
  used += kSlot;
  *counter = 0;
  return counter;
}

}  // namespace

struct CallQueue::Cuda {
  cuda::Stream stream;
  volatile uint32_t* const counter = newCounter();
  // The host-function fallback waits here for its ticket.
  std::mutex mu;
  std::condition_variable released;
};

namespace {

struct HostWait {
  volatile uint32_t* counter;
  std::mutex* mu;
  std::condition_variable* released;
  uint32_t ticket;
};

// The queue whose progress thread this is (null on every other thread).
thread_local const CallQueue* tlsProgressOf = nullptr;

bool reached(const volatile uint32_t* counter, uint32_t ticket) {
  return static_cast<int32_t>(__atomic_load_n(counter, __ATOMIC_ACQUIRE) - ticket) >= 0;
}

void CUDART_CB waitForTicket(void* data) {
  std::unique_ptr<HostWait> w(static_cast<HostWait*>(data));
  std::unique_lock<std::mutex> lock(*w->mu);
  w->released->wait(lock, [&] { return reached(w->counter, w->ticket); });
}

}  // namespace

CallQueue::CallQueue(int device, int rank, std::function<void(const Error&)> fail,
                     std::function<void(GpuStream)> onStart)
    : device_(device), rank_(rank), fail_(std::move(fail)) {
  {
    cuda::DeviceGuard guard(device_);
    cuda_ = std::make_unique<Cuda>();
  }
  thread_ = std::thread([this, onStart = std::move(onStart)] { loop(onStart); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return started_; });
  if (startError_) {
    stop_ = true;
    lock.unlock();
    cv_.notify_all();
    thread_.join();
    std::rethrow_exception(startError_);
  }
}

CallQueue::~CallQueue() {
  drain();  // calls already enqueued complete (or fail within the timeout), as the user expects
  stopThread();
}

void CallQueue::stopThread() {
  uint32_t last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // enqueue refuses from now on: issued_ stays
    tasks_.clear();
    last = issued_;
  }
  cv_.notify_all();
  if (thread_.joinable() && !onProgressThread()) thread_.join();
  release(last);
}

bool CallQueue::onProgressThread() const { return tlsProgressOf == this; }

GpuStream CallQueue::stream() const { return cuda_->stream.get(); }

void CallQueue::enqueue(GpuStream stream, std::function<void()> task, std::string what) {
  cuda::DeviceGuard guard(device_);
  auto start = std::make_shared<cuda::Event>();
  std::lock_guard<std::mutex> lock(mu_);
  SQZ_ENFORCE(!stop_, "enqueue on a destroyed communicator");
  cuda::check(cudaEventRecord(start->get(), stream),
              strCat(what, ": recording on the caller's stream").c_str());
  const uint32_t ticket = issued_ + 1;
  if (!cuda::streamWaitValue(stream, cuda_->counter, ticket)) {
    auto* w = new HostWait{cuda_->counter, &cuda_->mu, &cuda_->released, ticket};
    cudaError_t rc = cudaLaunchHostFunc(stream, waitForTicket, w);
    if (rc != cudaSuccess) delete w;
    cuda::check(rc, strCat(what, ": making the caller's stream wait").c_str());
  }
  issued_ = ticket;
  tasks_.push_back(Task{ticket, std::move(task), std::move(what), std::move(start)});
  cv_.notify_all();
}

void CallQueue::copyOnStream(GpuStream stream, void* dst, const void* src, size_t bytes,
                             const std::string& what) {
  if (bytes == 0 || dst == src) return;
  cuda::DeviceGuard guard(device_);
  cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
              strCat(what, ": copying on the caller's stream").c_str());
}

void CallQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return (tasks_.empty() && !running_) || stop_; });
}

void CallQueue::abort() {
  aborted_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.clear();
    // With a call running, the loop releases every ticket when it returns (it sees aborted_).
    if (!running_) release(issued_);
  }
  cv_.notify_all();
}

void CallQueue::release(uint32_t ticket) {
  {
    std::lock_guard<std::mutex> lock(cuda_->mu);
    __atomic_store_n(cuda_->counter, ticket, __ATOMIC_RELEASE);
  }
  cuda_->released.notify_all();
}

void CallQueue::loop(const std::function<void(GpuStream)>& onStart) {
  setLogRank(rank_);
  tlsProgressOf = this;
  std::exception_ptr error;
  try {
    cuda::check(cudaSetDevice(device_), "cudaSetDevice on the progress thread");
    onStart(cuda_->stream.get());
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
    startError_ = error;
  }
  cv_.notify_all();
  if (error) return;
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      running_ = true;
    }
    try {
      // Wait for the caller's stream to reach the call, polling so an abort is noticed.
      auto pause = std::chrono::microseconds(5);
      for (;;) {
        cudaError_t rc = cudaEventQuery(task.startEvent->get());
        if (rc == cudaSuccess) break;
        if (rc != cudaErrorNotReady)
          cuda::check(rc,
                      strCat(task.what, ": the caller's stream failed before the call").c_str());
        if (aborted_)
          raise(ErrorCode::kRemote, task.what, " was dropped: the communicator was aborted");
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
      task.run();
    } catch (const Error& e) {
      SQZ_WARN(kDevice, "rank ", rank_, ": ", e.what());
      fail_(e);
    } catch (const std::exception& e) {
      fail_(Error(ErrorCode::kInternal, strCat("internal error in ", task.what, ": ", e.what())));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
      // After an abort every ticket is released; otherwise this one.
      release(aborted_ ? issued_ : task.ticket);
    }
    cv_.notify_all();
  }
}

}  // namespace squeeze::device
