// ProcessGroupSqueeze: a torch.distributed (c10d) process group on Squeeze's public C API.
//
// One Squeeze communicator per group, made at construction: rank 0 calls sqzGetUniqueId and puts
// the id in the group's store, the others read it, then all call sqzCommInitRank. A Squeeze
// communicator is used by one thread at a time, so every operation is a task in a FIFO queue
// served by the group's one progress thread: the call checks its arguments, enqueues, and returns
// an asynchronous WorkSqueeze at once; the thread runs the Squeeze call (never holding the GIL),
// then completes the work's future with the output tensors, or with the error. After a failed
// task every later task of the group fails at once, naming the first error (the communicator may
// be out of step with its peers), and the destructor aborts the communicator instead of
// destroying it. Squeeze's own timeout (SQZ_TIMEOUT_MS) bounds every blocking wait, so no task
// can hang the queue; the timeout given to the constructor is kept for torch's information only.
//
// Host tensors: the task returns when the result is in the tensors. CUDA tensors (only when
// built against a CUDA libtorch, SQZ_TORCH_CUDA): the task enqueues the Squeeze call on the
// caller's current stream, as ProcessGroupNCCL does, and completes once it is enqueued.
//
// torch 1.x: c10d::ProcessGroup is the class a backend implements. torch 2.x: it is c10d::Backend
// (a ProcessGroup then dispatches to it per device); ProcessGroupBase below picks one.
#ifndef SQUEEZE_PYTHON_TORCH_BACKEND_PROCESS_GROUP_H_
#define SQUEEZE_PYTHON_TORCH_BACKEND_PROCESS_GROUP_H_

#include <c10/core/Stream.h>
#include <squeeze/squeeze.h>
#include <torch/version.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace squeeze {

#if TORCH_VERSION_MAJOR >= 2
using ProcessGroupBase = c10d::Backend;
#else
using ProcessGroupBase = c10d::ProcessGroup;
#endif

/// The asynchronous result of one ProcessGroupSqueeze operation: the outputs and a future
/// completed with them (what DDP's allreduce path and comm hooks wait on). The future completes
/// first, then the work (c10d::Work::wait); the status calls read the future, so that the work
/// is completed as soon as its future is. Thread-safe.
class WorkSqueeze : public c10d::Work {
 public:
  /// @param outputs the tensors the operation writes; result() and the future's value.
  /// @param devices the outputs' devices when they are CUDA devices (the future records events
  ///        on their current streams), else empty.
  WorkSqueeze(int rank, c10d::OpType opType, std::vector<at::Tensor> outputs,
              std::vector<c10::Device> devices);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  /// Completes the future (value: the outputs; or error) and then the work. Called once, by the
  /// progress thread.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/// A c10d process group of Squeeze collectives; getBackendName() is "squeeze". Operations take one
/// dense contiguous tensor per call (CPU, or CUDA where built for it) of int8, uint8, int32,
/// int64, float16, float32, float64 or bfloat16; others raise std::runtime_error with the
/// operation's name before anything is queued. Thread-safe: operations may be called from any
/// thread; they run in the order they were called.
class ProcessGroupSqueeze : public ProcessGroupBase {
 public:
  /// Rendezvous and communicator creation; collective over the group's ranks and blocking (up to
  /// Squeeze's SQZ_TIMEOUT_MS, or the store's timeout while waiting for rank 0's id).
  /// @param store the group's store (torch passes a PrefixStore per group).
  /// @param timeout torch's timeout for the group; Squeeze's SQZ_TIMEOUT_MS bounds the waits.
  /// @throws std::runtime_error when the rendezvous or sqzCommInitRank fails.
  ProcessGroupSqueeze(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout);

  /// Runs the queued operations (each bounded by Squeeze's timeout; after a failure they fail at
  /// once), joins the progress thread, then destroys the communicator, or aborts it after an
  /// error. Releases the GIL while it waits, if the caller holds it (see releaseGilWhile).
  /// Called from one of the group's own future callbacks (on its progress thread), it cannot wait
  /// for itself: that thread then finishes the queue and closes the communicator alone.
  ~ProcessGroupSqueeze() override;

  ProcessGroupSqueeze(const ProcessGroupSqueeze&) = delete;
  ProcessGroupSqueeze& operator=(const ProcessGroupSqueeze&) = delete;

  const std::string getBackendName() const override { return "squeeze"; }

  /// The communicator, as an integer, for debugging.
  uintptr_t commHandle() const { return reinterpret_cast<uintptr_t>(state_->comm); }
  std::chrono::milliseconds timeout() const { return timeout_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  /// Equal splits run as sqzAlltoAll; unequal ones as a group of sends and receives.
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  /// tag is ignored: messages between two ranks match in call order.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  /// The number of collectives (every operation but send and recv) called so far; the same on
  /// every rank while they call the same collectives. c10d's ProcessGroupWrapper (which torch 2.x
  /// puts around plugin backends under TORCH_DISTRIBUTED_DEBUG=DETAIL) sets it at creation and
  /// compares it across ranks before each collective; the base class's versions throw.
  void setSequenceNumberForGroup() override { seq_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return seq_; }

  // Not implemented: each raises "squeeze backend does not implement <op>".
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

 private:
  // One queued operation: run(comm, rawStream) makes the Squeeze calls and throws on failure.
  struct Task {
    const char* opName;
    c10::intrusive_ptr<WorkSqueeze> work;
    // std::optional, not c10::optional: the latter is only a deprecated alias in torch 2.x.
    std::optional<c10::Stream> stream;  // the caller's CUDA stream, made current for run()
    void* rawStream = nullptr;          // the same as a cudaStream_t; NULL for host tensors
    std::function<void(sqzComm_t, void*)> run;
  };

  // What the progress thread uses, shared with it: the group may be destroyed by one of its own
  // future callbacks, on that thread, which then finishes the queue and closes comm alone.
  struct State {
    sqzComm_t comm = nullptr;
    std::mutex mu;               // protects tasks, stop and detached
    std::condition_variable cv;  // signals tasks or stop changed
    std::deque<Task> tasks;
    bool stop = false;       // the group is being destroyed: drain, then exit
    bool detached = false;   // ... from the progress thread: it closes comm itself
    std::string firstError;  // progress thread only (then the destructor, after the join)
  };

  // Queues run as opName's task writing outputs (all on `device`) and returns its work.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType opType, const char* opName,
                                         const at::Device& device, std::vector<at::Tensor> outputs,
                                         std::function<void(sqzComm_t, void* stream)> run);
  static void progressLoop(const std::shared_ptr<State>& state);
  // Destroys the communicator, or aborts it after an error.
  static void closeComm(State& state);

  std::chrono::milliseconds timeout_;
  std::atomic<uint64_t> seq_{0};  // see getSequenceNumberForGroup; counted by enqueue
  std::shared_ptr<State> state_;
  std::thread thread_;
};

/// Runs fn with the Python GIL released if the calling thread holds it, else just runs it.
/// Defined by the extension module (module.cc), which owns the Python side.
void releaseGilWhile(const std::function<void()>& fn);

}  // namespace squeeze

#endif  // SQUEEZE_PYTHON_TORCH_BACKEND_PROCESS_GROUP_H_
