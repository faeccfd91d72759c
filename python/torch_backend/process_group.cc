// ProcessGroupSqueeze: see process_group.h. Each operation checks its tensors in the caller's
// thread (so a bad argument raises at the call, and nothing is queued), then queues a task whose
// lambda holds the tensors (keeping their storage alive) and makes the Squeeze calls.
#include "process_group.h"

#include <c10/core/StreamGuard.h>
#include <c10/util/StringUtil.h>

#include <cstring>
#include <exception>
#include <stdexcept>
#include <utility>

#if defined(SQZ_TORCH_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif

namespace squeeze {
namespace {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// The store key counting group creations; see the constructor.
constexpr const char* kCreationsKey = "squeeze/creations";

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::runtime_error(c10::str("squeeze backend: ", op, ": ", what));
}

[[noreturn]] void notImplemented(const char* op) {
  throw std::runtime_error(c10::str("squeeze backend does not implement ", op));
}

// Throws for a failed Squeeze call, with Squeeze's message (comm's, or this thread's for NULL).
void check(sqzResult_t result, sqzComm_t comm, const char* op) {
  if (result == sqzSuccess) return;
  const char* last = sqzGetLastError(comm);
  throw std::runtime_error(c10::str("squeeze backend: ", op, " failed (", sqzGetErrorString(result),
                                    ")", last && *last ? ": " : "", last ? last : ""));
}

sqzDataType_t toSqz(at::ScalarType type, const char* op) {
  switch (type) {
    case at::kChar:
      return sqzInt8;
    case at::kByte:
      return sqzUint8;
    case at::kInt:
      return sqzInt32;
    case at::kLong:
      return sqzInt64;
    case at::kHalf:
      return sqzFloat16;
    case at::kFloat:
      return sqzFloat32;
    case at::kDouble:
      return sqzFloat64;
    case at::kBFloat16:
      return sqzBfloat16;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
    case at::kUInt32:
      return sqzUint32;
    case at::kUInt64:
      return sqzUint64;
#endif
    default:
      fail(op, c10::str("dtype ", type,
                        " is not supported (int8, uint8, int32, int64, float16, "
                        "float32, float64 and bfloat16 are)"));
  }
}

sqzRedOp_t toSqz(const c10d::ReduceOp& reduceOp, const char* op) {
  std::string name = c10::str("#", int(reduceOp.op_));
  switch (reduceOp.op_) {
    case c10d::ReduceOp::SUM:
      return sqzSum;
    case c10d::ReduceOp::PRODUCT:
      return sqzProd;
    case c10d::ReduceOp::MIN:
      return sqzMin;
    case c10d::ReduceOp::MAX:
      return sqzMax;
    case c10d::ReduceOp::AVG:
      return sqzAvg;
    case c10d::ReduceOp::BAND:
      name = "BAND";
      break;
    case c10d::ReduceOp::BOR:
      name = "BOR";
      break;
    case c10d::ReduceOp::BXOR:
      name = "BXOR";
      break;
    case c10d::ReduceOp::PREMUL_SUM:
      name = "PREMUL_SUM";
      break;
    default:
      break;
  }
  fail(op, c10::str("reduce op ", name, " is not supported (SUM, PRODUCT, MIN, MAX and AVG are)"));
}

// Checks one tensor argument (`what` names it in messages) and returns its Squeeze datatype.
sqzDataType_t checkTensor(const at::Tensor& t, const char* op, const char* what = "the tensor") {
  if (!t.defined()) fail(op, c10::str(what, " is undefined"));
  if (t.layout() != at::kStrided)
    fail(op, c10::str(what, " has layout ", t.layout(), "; only dense tensors are supported"));
  const at::Device device = t.device();
  if (!device.is_cpu() && !device.is_cuda())
    fail(op, c10::str(what, " is on device ", device, "; only CPU and CUDA tensors are supported"));
#if !defined(SQZ_TORCH_CUDA)
  if (device.is_cuda())
    fail(op, c10::str(what, " is on ", device,
                      ", but this squeeze._torch_backend was built "
                      "without CUDA (no CUDA libtorch, c10_cuda, at build time)"));
#endif
  if (!t.is_contiguous()) fail(op, c10::str(what, " is not contiguous (call .contiguous() first)"));
  return toSqz(t.scalar_type(), op);
}

// Checks `other` as checkTensor does, and that it has the dtype and device of `ref`.
void checkLike(const at::Tensor& ref, const at::Tensor& other, const char* op, const char* what) {
  checkTensor(other, op, what);
  if (other.scalar_type() != ref.scalar_type())
    fail(op, c10::str(what, " has dtype ", other.scalar_type(), " but the input has ",
                      ref.scalar_type()));
  if (other.device() != ref.device())
    fail(op, c10::str(what, " is on ", other.device(), " but the input is on ", ref.device()));
}

// c10d passes vectors; Squeeze takes one tensor per process.
at::Tensor& single(std::vector<at::Tensor>& tensors, const char* op) {
  if (tensors.size() != 1)
    fail(op, c10::str("takes exactly one tensor per call, got ", tensors.size()));
  return tensors[0];
}

void checkRank(int64_t r, int size, const char* op, const char* what) {
  if (r < 0 || r >= size)
    fail(op, c10::str(what, " ", r, " is out of range for a group of ", size, " ranks"));
}

// The address of row `row` of t, whose rows are rowElems elements.
void* rowPtr(const at::Tensor& t, int64_t row, int64_t rowElems) {
  return static_cast<char*>(t.data_ptr()) + row * rowElems * t.element_size();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// WorkSqueeze

WorkSqueeze::WorkSqueeze(int rank, OpType opType, std::vector<at::Tensor> outputs,
                         std::vector<c10::Device> devices)
    : c10d::Work(rank, opType),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), std::move(devices))) {}

bool WorkSqueeze::isCompleted() { return future_->completed(); }

bool WorkSqueeze::isSuccess() const { return !future_->hasError(); }

std::exception_ptr WorkSqueeze::exception() const {
  return future_->hasError() ? future_->exception_ptr() : nullptr;
}

std::vector<at::Tensor> WorkSqueeze::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> WorkSqueeze::getFuture() { return future_; }

void WorkSqueeze::complete(std::exception_ptr error) {
  // The future first (its callbacks run here, on the progress thread), then the work, as
  // ProcessGroupGloo does: whoever returns from wait() finds the future completed too.
  try {
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
  } catch (...) {
    // A callback threw; the future holds what it could. The work still completes below.
  }
  finish(error);
}

// ---------------------------------------------------------------------------------------------
// ProcessGroupSqueeze: construction, queue, destruction

ProcessGroupSqueeze::ProcessGroupSqueeze(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                         int size, std::chrono::milliseconds timeout)
    : ProcessGroupBase(rank, size), timeout_(timeout), state_(std::make_shared<State>()) {
  init();  // c10d's usage logging
  if (!store) fail("init", "the store is null");
  // The key of the id: every rank adds 1 to a counter in the group's store before
  // sqzCommInitRank, which returns only after all ranks have joined, so creation number g of
  // this store's group (a group re-created under the same name, say) reads counts g*size+1 ...
  // (g+1)*size on every rank, whatever the order.
  const int64_t count = store->add(kCreationsKey, 1);
  const std::string key = c10::str("squeeze/unique_id/", (count - 1) / size);
  sqzUniqueId id;
  if (rank == 0) {
    check(sqzGetUniqueId(&id), nullptr, "init (sqzGetUniqueId)");
    store->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
  } else {
    const std::vector<uint8_t> bytes = store->get(key);
    if (bytes.size() != sizeof id.internal)
      fail("init", c10::str("the store's ", key, " holds ", bytes.size(), " bytes, not the ",
                            sizeof id.internal, " of a sqzUniqueId"));
    std::memcpy(id.internal, bytes.data(), sizeof id.internal);
  }
  check(sqzCommInitRank(&state_->comm, size, id, rank), nullptr, "init (sqzCommInitRank)");
  thread_ = std::thread([state = state_] { progressLoop(state); });
}

ProcessGroupSqueeze::~ProcessGroupSqueeze() {
  const bool onProgressThread = thread_.get_id() == std::this_thread::get_id();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
    state_->detached = onProgressThread;
  }
  state_->cv.notify_all();
  if (onProgressThread) {
    thread_.detach();  // it drains the queue and closes the communicator when this task returns
    return;
  }
  // The queued tasks' future callbacks may need the GIL (Python comm hooks): never hold it here.
  if (thread_.joinable()) releaseGilWhile([this] { thread_.join(); });
  closeComm(*state_);
}

void ProcessGroupSqueeze::closeComm(State& state) {
  if (!state.comm) return;
  if (state.firstError.empty())
    sqzCommDestroy(state.comm);
  else
    sqzCommAbort(state.comm);
  state.comm = nullptr;
}

WorkPtr ProcessGroupSqueeze::enqueue(OpType opType, const char* opName,
                                     [[maybe_unused]] const at::Device& device,
                                     std::vector<at::Tensor> outputs,
                                     std::function<void(sqzComm_t, void*)> run) {
  Task task;
  task.opName = opName;
  std::vector<c10::Device> devices;
#if defined(SQZ_TORCH_CUDA)
  if (device.is_cuda()) {
    // Squeeze enqueues device calls on a stream: the caller's current one, as NCCL's backend.
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device.index());
    task.stream = stream.unwrap();
    task.rawStream = stream.stream();
    devices.push_back(device);
  }
#endif
  task.work =
      c10::make_intrusive<WorkSqueeze>(rank_, opType, std::move(outputs), std::move(devices));
  task.run = std::move(run);
  c10::intrusive_ptr<WorkSqueeze> work = task.work;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->stop) fail(opName, "the process group is being destroyed");
    state_->tasks.push_back(std::move(task));
  }
  if (opType != OpType::SEND && opType != OpType::RECV) ++seq_;
  state_->cv.notify_one();
  return work;
}

void ProcessGroupSqueeze::progressLoop(const std::shared_ptr<State>& state) {
  State& s = *state;
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      s.cv.wait(lock, [&s] { return s.stop || !s.tasks.empty(); });
      if (s.tasks.empty()) {  // stopped and drained
        if (s.detached) {
          lock.unlock();
          closeComm(s);
        }
        return;
      }
      task = std::move(s.tasks.front());
      s.tasks.pop_front();
    }
    // For CUDA: the caller's stream is current while the call is enqueued and the future
    // records its events. (reset_stream, not the optional constructor: torch 1.x takes a
    // c10::optional there, torch 2.x a std::optional.)
    c10::OptionalStreamGuard guard;
    if (task.stream) guard.reset_stream(*task.stream);
    std::exception_ptr error;
    if (!s.firstError.empty()) {
      error = std::make_exception_ptr(
          std::runtime_error(c10::str("squeeze backend: ", task.opName,
                                      " was not run: an earlier operation of this "
                                      "process group failed: ",
                                      s.firstError)));
    } else {
      try {
        task.run(s.comm, task.rawStream);
      } catch (const std::exception& e) {
        s.firstError = e.what();
        error = std::current_exception();
      } catch (...) {
        s.firstError = c10::str("squeeze backend: ", task.opName, " failed (unknown exception)");
        error = std::current_exception();
      }
    }
    task.work->complete(error);
  }
}

// ---------------------------------------------------------------------------------------------
// Operations

WorkPtr ProcessGroupSqueeze::allreduce(std::vector<at::Tensor>& tensors,
                                       const c10d::AllreduceOptions& opts) {
  constexpr const char* op = "allreduce";
  at::Tensor t = single(tensors, op);
  const sqzDataType_t dtype = checkTensor(t, op);
  const sqzRedOp_t red = toSqz(opts.reduceOp, op);
  return enqueue(OpType::ALLREDUCE, op, t.device(), {t}, [t, dtype, red](sqzComm_t c, void* s) {
    check(sqzAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dtype, red, c, s), c, op);
  });
}

WorkPtr ProcessGroupSqueeze::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                 const c10d::AllreduceCoalescedOptions& opts) {
  constexpr const char* op = "allreduce_coalesced";
  if (tensors.empty()) fail(op, "no tensors");
  std::vector<sqzDataType_t> dtypes;
  for (const at::Tensor& t : tensors) {
    dtypes.push_back(checkTensor(t, op));
    if (t.device() != tensors[0].device())
      fail(op, c10::str("the tensors are on different devices (", tensors[0].device(), " and ",
                        t.device(), ")"));
  }
  const sqzRedOp_t red = toSqz(opts.reduceOp, op);
  // One task, one Squeeze call per tensor: no flattening copies.
  return enqueue(
      OpType::ALLREDUCE_COALESCED, op, tensors[0].device(), tensors,
      [tensors, dtypes, red](sqzComm_t c, void* s) {
        for (size_t i = 0; i < tensors.size(); ++i) {
          const at::Tensor& t = tensors[i];
          check(sqzAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dtypes[i], red, c, s), c, op);
        }
      });
}

WorkPtr ProcessGroupSqueeze::broadcast(std::vector<at::Tensor>& tensors,
                                       const c10d::BroadcastOptions& opts) {
  constexpr const char* op = "broadcast";
  at::Tensor t = single(tensors, op);
  const sqzDataType_t dtype = checkTensor(t, op);
  checkRank(opts.rootRank, size_, op, "root rank");
  if (opts.rootTensor != 0) fail(op, c10::str("root tensor ", opts.rootTensor, " is not 0"));
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(OpType::BROADCAST, op, t.device(), {t}, [t, dtype, root](sqzComm_t c, void* s) {
    check(sqzBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), dtype, root, c, s), c, op);
  });
}

WorkPtr ProcessGroupSqueeze::reduce(std::vector<at::Tensor>& tensors,
                                    const c10d::ReduceOptions& opts) {
  constexpr const char* op = "reduce";
  at::Tensor t = single(tensors, op);
  const sqzDataType_t dtype = checkTensor(t, op);
  const sqzRedOp_t red = toSqz(opts.reduceOp, op);
  checkRank(opts.rootRank, size_, op, "root rank");
  if (opts.rootTensor != 0) fail(op, c10::str("root tensor ", opts.rootTensor, " is not 0"));
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == rank_;
  return enqueue(OpType::REDUCE, op, t.device(), {t},
                 [t, dtype, red, root, isRoot](sqzComm_t c, void* s) {
                   // Only the root's tensor receives the result; the others' stay as they were.
                   check(sqzReduce(t.data_ptr(), isRoot ? t.data_ptr() : nullptr, t.numel(), dtype,
                                   red, root, c, s),
                         c, op);
                 });
}

WorkPtr ProcessGroupSqueeze::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                       std::vector<at::Tensor>& inputs,
                                       const c10d::AllgatherOptions&) {
  constexpr const char* op = "allgather";
  at::Tensor in = single(inputs, op);
  const sqzDataType_t dtype = checkTensor(in, op, "the input");
  if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(size_))
    fail(op, c10::str("needs one list of ", size_, " output tensors (one per rank)"));
  std::vector<at::Tensor> outs = outputs[0];
  for (const at::Tensor& o : outs) {
    checkLike(in, o, op, "an output tensor");
    if (o.numel() != in.numel())
      fail(op, c10::str("an output tensor has ", o.numel(), " elements but the input has ",
                        in.numel()));
  }
  const int size = size_;
  return enqueue(OpType::ALLGATHER, op, in.device(), outs,
                 [in, outs, dtype, size](sqzComm_t c, void* s) {
                   const int64_t n = in.numel();
                   at::Tensor flat = at::empty({size * n}, in.options());
                   check(sqzAllGather(in.data_ptr(), flat.data_ptr(), n, dtype, c, s), c, op);
                   for (int r = 0; r < size; ++r) outs[r].view(-1).copy_(flat.narrow(0, r * n, n));
                 });
}

WorkPtr ProcessGroupSqueeze::_allgather_base(at::Tensor& output, at::Tensor& input,
                                             const c10d::AllgatherOptions&) {
  constexpr const char* op = "_allgather_base";
  const sqzDataType_t dtype = checkTensor(input, op, "the input");
  checkLike(input, output, op, "the output");
  if (output.numel() != size_ * input.numel())
    fail(op, c10::str("the output has ", output.numel(), " elements; it needs ", size_, " x ",
                      input.numel()));
  at::Tensor in = input, out = output;
  return enqueue(
      OpType::_ALLGATHER_BASE, op, in.device(), {out}, [in, out, dtype](sqzComm_t c, void* s) {
        check(sqzAllGather(in.data_ptr(), out.data_ptr(), in.numel(), dtype, c, s), c, op);
      });
}

WorkPtr ProcessGroupSqueeze::reduce_scatter(std::vector<at::Tensor>& outputs,
                                            std::vector<std::vector<at::Tensor>>& inputs,
                                            const c10d::ReduceScatterOptions& opts) {
  constexpr const char* op = "reduce_scatter";
  at::Tensor out = single(outputs, op);
  const sqzDataType_t dtype = checkTensor(out, op, "the output");
  const sqzRedOp_t red = toSqz(opts.reduceOp, op);
  if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(size_))
    fail(op, c10::str("needs one list of ", size_, " input tensors (one per rank)"));
  std::vector<at::Tensor> ins = inputs[0];
  for (const at::Tensor& i : ins) {
    checkLike(out, i, op, "an input tensor");
    if (i.numel() != out.numel())
      fail(op, c10::str("an input tensor has ", i.numel(), " elements but the output has ",
                        out.numel()));
  }
  const int size = size_;
  return enqueue(OpType::REDUCE_SCATTER, op, out.device(), {out},
                 [out, ins, dtype, red, size](sqzComm_t c, void* s) {
                   const int64_t n = out.numel();
                   at::Tensor flat = at::empty({size * n}, out.options());
                   for (int r = 0; r < size; ++r) flat.narrow(0, r * n, n).copy_(ins[r].view(-1));
                   check(sqzReduceScatter(flat.data_ptr(), out.data_ptr(), n, dtype, red, c, s), c,
                         op);
                 });
}

WorkPtr ProcessGroupSqueeze::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                  const c10d::ReduceScatterOptions& opts) {
  constexpr const char* op = "_reduce_scatter_base";
  const sqzDataType_t dtype = checkTensor(input, op, "the input");
  checkLike(input, output, op, "the output");
  const sqzRedOp_t red = toSqz(opts.reduceOp, op);
  if (input.numel() != size_ * output.numel())
    fail(op, c10::str("the input has ", input.numel(), " elements; it needs ", size_, " x ",
                      output.numel()));
  at::Tensor in = input, out = output;
  return enqueue(
      OpType::_REDUCE_SCATTER_BASE, op, out.device(), {out},
      [in, out, dtype, red](sqzComm_t c, void* s) {
        check(sqzReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), dtype, red, c, s), c,
              op);
      });
}

WorkPtr ProcessGroupSqueeze::alltoall_base(at::Tensor& output, at::Tensor& input,
                                           std::vector<int64_t>& outputSplitSizes,
                                           std::vector<int64_t>& inputSplitSizes,
                                           const c10d::AllToAllOptions&) {
  constexpr const char* op = "alltoall_base";
  const sqzDataType_t dtype = checkTensor(input, op, "the input");
  checkLike(input, output, op, "the output");
  if (input.dim() == 0 || output.dim() == 0) fail(op, "the tensors need at least one dimension");
  // Splits count rows (dimension 0); empty means equal splits.
  const auto splits = [&](const std::vector<int64_t>& given, const at::Tensor& t,
                          const char* what) {
    if (given.empty()) {
      if (t.size(0) % size_ != 0)
        fail(op, c10::str(what, " has ", t.size(0), " rows, not divisible into ", size_,
                          " equal splits"));
      return std::vector<int64_t>(size_, t.size(0) / size_);
    }
    if (given.size() != static_cast<size_t>(size_))
      fail(op, c10::str(given.size(), " ", what, " split sizes for ", size_, " ranks"));
    int64_t sum = 0;
    for (int64_t v : given) {
      if (v < 0) fail(op, c10::str("a negative ", what, " split size ", v));
      sum += v;
    }
    if (sum != t.size(0))
      fail(op,
           c10::str("the ", what, " split sizes add up to ", sum, " rows, but it has ", t.size(0)));
    return given;
  };
  const std::vector<int64_t> inSplits = splits(inputSplitSizes, input, "input");
  const std::vector<int64_t> outSplits = splits(outputSplitSizes, output, "output");
  const int64_t inRow = input.size(0) ? input.numel() / input.size(0) : 0;
  const int64_t outRow = output.size(0) ? output.numel() / output.size(0) : 0;
  if (input.size(0) && output.size(0) && inRow != outRow)
    fail(op, c10::str("input rows have ", inRow, " elements but output rows have ", outRow));
  const int64_t row = inRow ? inRow : outRow;
  at::Tensor in = input, out = output;
  bool equal = true;
  for (int r = 0; r < size_; ++r)
    equal = equal && inSplits[r] == inSplits[0] && outSplits[r] == inSplits[0];
  if (equal) {
    const int64_t count = inSplits[0] * row;
    return enqueue(OpType::ALLTOALL_BASE, op, out.device(), {out},
                   [in, out, count, dtype](sqzComm_t c, void* s) {
                     check(sqzAlltoAll(in.data_ptr(), out.data_ptr(), count, dtype, c, s), c, op);
                   });
  }
  // Unequal splits: one group of sends and receives (rank r's output split p must be rank p's
  // input split r, as c10d requires); this rank's own block is a local copy.
  const int self = rank_;
  return enqueue(
      OpType::ALLTOALL_BASE, op, out.device(), {out},
      [in, out, inSplits, outSplits, row, dtype, self](sqzComm_t c, void* s) {
        sqzResult_t first = sqzSuccess;
        check(sqzGroupStart(), nullptr, op);
        int64_t inOff = 0, outOff = 0;
        for (size_t p = 0; p < inSplits.size(); ++p) {
          const int peer = static_cast<int>(p);
          if (peer != self && inSplits[p] > 0 && first == sqzSuccess)
            first = sqzSend(rowPtr(in, inOff, row), inSplits[p] * row, dtype, peer, c, s);
          if (peer != self && outSplits[p] > 0 && first == sqzSuccess)
            first = sqzRecv(rowPtr(out, outOff, row), outSplits[p] * row, dtype, peer, c, s);
          if (peer == self && inSplits[p] > 0)
            out.narrow(0, outOff, outSplits[p]).copy_(in.narrow(0, inOff, inSplits[p]));
          inOff += inSplits[p];
          outOff += outSplits[p];
        }
        const sqzResult_t end = sqzGroupEnd();  // always: it balances sqzGroupStart
        check(first != sqzSuccess ? first : end, c, op);
      });
}

WorkPtr ProcessGroupSqueeze::send(std::vector<at::Tensor>& tensors, int dstRank, int) {
  constexpr const char* op = "send";
  at::Tensor t = single(tensors, op);
  const sqzDataType_t dtype = checkTensor(t, op);
  checkRank(dstRank, size_, op, "destination rank");
  if (dstRank == rank_) fail(op, "a rank cannot send to itself");
  return enqueue(OpType::SEND, op, t.device(), {t}, [t, dtype, dstRank](sqzComm_t c, void* s) {
    check(sqzSend(t.data_ptr(), t.numel(), dtype, dstRank, c, s), c, op);
  });
}

WorkPtr ProcessGroupSqueeze::recv(std::vector<at::Tensor>& tensors, int srcRank, int) {
  constexpr const char* op = "recv";
  at::Tensor t = single(tensors, op);
  const sqzDataType_t dtype = checkTensor(t, op);
  checkRank(srcRank, size_, op, "source rank");
  if (srcRank == rank_) fail(op, "a rank cannot receive from itself");
  return enqueue(OpType::RECV, op, t.device(), {t}, [t, dtype, srcRank](sqzComm_t c, void* s) {
    check(sqzRecv(t.data_ptr(), t.numel(), dtype, srcRank, c, s), c, op);
  });
}

WorkPtr ProcessGroupSqueeze::barrier(const c10d::BarrierOptions&) {
  constexpr const char* op = "barrier";
  // Queued behind every earlier operation of the group, so it also waits for them.
  return enqueue(OpType::BARRIER, op, at::Device(at::kCPU), {},
                 [](sqzComm_t c, void*) { check(sqzBarrier(c), c, op); });
}

WorkPtr ProcessGroupSqueeze::allgather_coalesced(std::vector<std::vector<at::Tensor>>&,
                                                 std::vector<at::Tensor>&,
                                                 const c10d::AllgatherOptions&) {
  notImplemented("allgather_coalesced");
}

WorkPtr ProcessGroupSqueeze::gather(std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
                                    const c10d::GatherOptions&) {
  notImplemented("gather");
}

WorkPtr ProcessGroupSqueeze::scatter(std::vector<at::Tensor>&,
                                     std::vector<std::vector<at::Tensor>>&,
                                     const c10d::ScatterOptions&) {
  notImplemented("scatter");
}

WorkPtr ProcessGroupSqueeze::alltoall(std::vector<at::Tensor>&, std::vector<at::Tensor>&,
                                      const c10d::AllToAllOptions&) {
  notImplemented("alltoall (the list form; all_to_all_single works)");
}

WorkPtr ProcessGroupSqueeze::recvAnysource(std::vector<at::Tensor>&, int) {
  notImplemented("recvAnysource");
}

void ProcessGroupSqueeze::monitoredBarrier(const c10d::BarrierOptions&, bool) {
  notImplemented("monitoredBarrier");
}

}  // namespace squeeze
