// CallQueue: NCCL's stream semantics for one communicator's calls on device buffers. A call is
// enqueued on the caller's stream and returns at once; the communicator's progress thread runs
// it when the stream reaches it, and the stream goes on only once it has finished.
//
//   create    (at communicator init, before any rank of the job can have a call in flight)
//             makes the internal stream and the pinned completion counter, starts the progress
//             thread and runs `onStart` there (the execution context's prepareThread): all that
//             may wait for the whole device is done here, never while a caller's stream waits.
//
//   enqueue   records a start event on the caller's stream, then makes the stream wait for the
//             call's ticket: cuStreamWaitValue32 on a 32-bit completion counter in pinned host
//             memory (the GPU polls the word; no CUDA callback thread is held). Where the driver
//             has no stream memory operations, a host function on the stream waits for the
//             ticket instead: it holds the CUDA callback thread while the call runs, so it is
//             the fallback only.
//   progress  the thread takes calls in order, polls each one's start event (so it never blocks
//             inside CUDA where an abort could not reach it), runs the call, and then stores
//             the ticket into the counter, success or not: a failed call releases the stream
//             too, and its error stays on the communicator (sqzCommGetAsyncError, and every
//             later call fails with it), as in NCCL.
//
// Thread safety: enqueue, drain and abort may be called from any thread; tasks run on the
// progress thread only, one at a time, in enqueue order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/error.h"
#include "device/hd.h"

namespace squeeze::cuda {
class Event;  // device/cuda/runtime.h
}  // namespace squeeze::cuda

namespace squeeze::device {

class CallQueue {
 public:
  // `device`: the GPU the communicator's device calls run on. Creates the internal stream and
  // the completion counter, starts the progress thread and waits until it has run
  // onStart(internal stream) (whose exception it rethrows). `fail` records an error of an
  // enqueued call on the communicator (called on the progress thread; the call's own errors
  // reach it through the communicator as well). Throws Error(kInvalidUsage) in a build without
  // CUDA.
  CallQueue(int device, int rank, std::function<void(const Error&)> fail,
            std::function<void(GpuStream)> onStart);
  // Lets the calls already enqueued run (each bounded by the timeout; after abort() none is
  // left), releases every stream and joins the thread.
  ~CallQueue();

  // The internal stream the executor's copies and kernels run on.
  GpuStream stream() const;

  // Enqueues `task` on `stream` (a cudaStream_t of this device; null: the legacy default
  // stream). `what` names the call in logs. Throws Error(kCuda) when CUDA refuses the stream.
  void enqueue(GpuStream stream, std::function<void()> task, std::string what);
  // A call that needs neither peers nor the progress thread (a one-rank collective without a
  // codec, whose result is its input): dst = src (bytes, on this device) as one
  // cudaMemcpyAsync straight on `stream`, after whatever the stream was given before (the
  // calls enqueued on it included); nothing for bytes == 0. Throws Error(kCuda) naming `what`.
  void copyOnStream(GpuStream stream, void* dst, const void* src, size_t bytes,
                    const std::string& what);
  // True on the progress thread (inside a task).
  bool onProgressThread() const;
  // Waits until every enqueued call has run (a host call on the same communicator must come
  // after them: every rank numbers calls in issue order).
  void drain();
  // Drops calls not yet started and releases their streams; the one running is interrupted by
  // the communicator's own abort.
  void abort();
  // Joins the progress thread once the call it runs (if any) returns; calls not yet started are
  // dropped, and every stream waiting on this queue goes on. Makes no CUDA call, so it may run
  // in an exit handler (a communicator the program did not destroy). Idempotent.
  void stopThread();

 private:
  struct Task {
    uint32_t ticket;
    std::function<void()> run;
    std::string what;
    std::shared_ptr<cuda::Event> startEvent;  // recorded on the caller's stream
  };
  void loop(const std::function<void(GpuStream)>& onStart);
  void release(uint32_t ticket);

  int device_;
  int rank_;
  std::function<void(const Error&)> fail_;
  struct Cuda;  // the stream, the pinned counter (CUDA types stay in the .cc)
  std::unique_ptr<Cuda> cuda_;
  std::mutex mu_;  // protects tasks_, issued_, stop_, running_
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  uint32_t issued_ = 0;   // the last ticket handed out
  bool running_ = false;  // a task is being run
  bool started_ = false;  // the thread has run onStart
  std::exception_ptr startError_;
  bool stop_ = false;
  std::atomic<bool> aborted_{false};
  std::thread thread_;
};

}  // namespace squeeze::device
