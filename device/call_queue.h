// CallQueue: NCCL's stream semantics for one communicator's calls on device buffers, as stream
// programs (DESIGN.md, "Memory, streams, threads"). A call is enqueued on the caller's stream
// and returns at once; all of its GPU work goes onto that stream there and then, on the
// caller's thread; the communicator's progress thread does the rest on the host and makes no
// CUDA call at all.
//
//   the stream   copies the call's input from its device buffers into pinned staging (two
//                halves, used in turn, a piece of at most one half at a time), writes a word
//                after each piece (cuStreamWriteValue32), waits on a word the host writes
//                (cuStreamWaitValue32) before it copies each piece of the result back.
//   the host     (the progress thread) polls the stream's word, copies each piece from staging
//                into host buffers, runs the call there with the host engine (its algorithms,
//                transports and codecs, whose cpu* kernels give the bits the gpu* ones do), then
//                copies the result into staging piece by piece, writing its word after each.
//
// Why the arithmetic runs on the host: a progress thread that needs CUDA while a caller's stream
// is held can wait forever (for a hardware work queue it shares with that stream, for the
// driver lock another thread holds in cudaFree, for a module or library load); here the GPU only
// ever waits for the host, and the host never for the GPU's driver. The cost is two copies over
// PCIe per call and the host's speed for the reduction. Ranks on one host skip it for dense
// calls and for compressed calls with a fixed-size payload (device/stream_collectives.h,
// CodecHandle::enqueueOnStream).
//
// The two words count pieces across calls (32-bit, compared cyclically as CUDA's GEQ does):
//   streamDone  pieces the stream has finished (an input piece copied into staging, a result
//               piece copied out of it); written by the stream only;
//   hostDone    pieces the host has finished (an input piece taken from staging, a result piece
//               put there); written by the progress thread only.
// Piece p uses half p % 2, so before the stream fills it for an input it waits for
// hostDone >= p - 1 (the host took piece p - 2), and the host waits for streamDone >= p - 1 before
// it fills it with a result; a call's first input piece also waits for streamDone >= p, so calls
// on different streams take their turns. A failed call stores its last piece into hostDone, and
// abort or stopThread every piece handed out, so every stream drains; the error stays on the
// communicator (sqzCommGetAsyncError, and every later call fails with it), as in NCCL.
//
// Where the driver has no stream memory operations, host functions on the stream write and
// wait for the words instead (they hold CUDA's callback thread while they wait: a fallback).
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
#include <vector>

#include "base/error.h"
#include "device/hd.h"

namespace squeeze::device {

// A device buffer of a call: what the stream copies to the host before the call's host side
// runs (read), and back after it (write). Spans may overlap (an in-place call).
struct DeviceSpan {
  const void* data = nullptr;
  size_t bytes = 0;
  bool read = false;
  bool write = false;
};

// The host copies of a staged call's device buffers, as its host side sees them.
class HostCopies {
 public:
  // The host copy of device address p, which lies in one of the call's spans (or one past its
  // end); null for null or an address outside every span.
  void* at(const void* p) const;

 private:
  friend class CallQueue;
  struct Region {
    const char* device;
    size_t bytes;
    char* host;
  };
  std::vector<Region> regions_;
};

class CallQueue {
 public:
  // `device`: the GPU the communicator's calls run on; `group`: the same for every rank of the
  // communicator (its unique id's hash). Allocates the pinned staging (stagingBytes, two
  // halves) and the flag words, and starts the progress thread: all that may wait for the
  // device happens here. `fail` records an enqueued call's error on the communicator (called on
  // the progress thread). `timeoutMs` bounds the wait for the streams at destruction (a stream
  // that has not copied its last result out by then keeps its staging: it is leaked, not
  // reused). Throws Error(kInvalidUsage) in a build without CUDA, or where this process would
  // hold more ranks of one communicator on the GPU than it has hardware work queues.
  CallQueue(int device, uint64_t group, int rank, size_t stagingBytes, int timeoutMs,
            std::function<void(const Error&)> fail);
  // Lets the calls already enqueued run (after abort() none is left), releases every stream
  // and joins the thread.
  ~CallQueue();

  // Enqueues a call on `stream` (a cudaStream_t of this device; null: the legacy default
  // stream): its stream program goes onto the stream now, and task(copies) runs on the progress
  // thread with host copies of `spans` once the stream has copied their input. `what` names the
  // call in logs. Throws Error(kCuda) when CUDA refuses an operation (the communicator is then
  // failed: fail() has been called and every stream released).
  void enqueue(GpuStream stream, const std::vector<DeviceSpan>& spans,
               std::function<void(const HostCopies&)> task, std::string what);
  // A call that needs neither peers nor the progress thread (a one-rank collective without a
  // codec, whose result is its input): dst = src (bytes, on this device) as one
  // cudaMemcpyAsync straight on `stream`, after whatever the stream was given before (the
  // calls enqueued on it included); nothing for bytes == 0. Throws Error(kCuda) naming `what`.
  void copyOnStream(GpuStream stream, void* dst, const void* src, size_t bytes,
                    const std::string& what);
  // True on the progress thread (inside a task).
  bool onProgressThread() const;
  // Waits until every enqueued call's host side has run (a host call on the same communicator
  // must come after them: every rank numbers calls in issue order).
  void drain();
  // Drops calls not yet started and releases every stream; the one running is interrupted by
  // the communicator's own abort and by this.
  void abort();
  // Joins the progress thread once the call it runs (if any) returns; calls not yet started are
  // dropped, and every stream waiting on this queue goes on. Makes no CUDA call, so it may run
  // in an exit handler (a communicator the program did not destroy). Idempotent.
  void stopThread();

 private:
  struct Piece {
    uint32_t seq;      // the piece's number: half seq % 2
    bool in;           // an input piece (device -> host) or a result piece
    int region;        // into the task's HostCopies
    size_t offset;     // within the region
    size_t bytes;
  };
  struct Task {
    std::vector<Piece> pieces;  // input pieces, then result pieces, in number order
    uint32_t end = 0;           // one past the last piece's number
    std::vector<HostCopies::Region> regions;  // host == null until the progress thread runs it
    std::function<void(const HostCopies&)> run;
    std::string what;
  };
  void loop();
  void runTask(Task& task);
  // Polls until streamDone >= value (cyclic); raises when the queue is aborted or stopped.
  void awaitStream(uint32_t value, const Task& task, const Piece& piece);
  void storeHostDone(uint32_t value);
  char* half(uint32_t seq) const;

  int device_;
  int rank_;
  int timeoutMs_;
  size_t stagingBytes_;
  std::function<void(const Error&)> fail_;
  struct Cuda;  // the staging, the words (CUDA types stay in the .cc)
  std::unique_ptr<Cuda> cuda_;
  std::vector<std::vector<char>> hostBuffers_;  // the progress thread's, by region, kept
  std::mutex mu_;  // protects tasks_, issued_, stop_, running_
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  uint32_t issued_ = 0;   // pieces handed out so far
  bool running_ = false;  // a task is being run
  bool stop_ = false;
  std::atomic<bool> halt_{false};  // abort() or stopThread(): a running task stops waiting
  std::thread thread_;
};

}  // namespace squeeze::device
