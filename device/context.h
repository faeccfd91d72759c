// The execution context of a call: where its payload bytes live, how they move, which kernels
// run on them and how completion is told (DESIGN.md, "One execution context per call"; UCC's
// memory and execution components are the model). Two backends, one interface:
//   host   ordinary memory, memcpy and the cpu* kernels; everything is done when it returns;
//   CUDA   one CUDA stream of one GPU: device memory allocated stream-ordered on the stream,
//          copies and the gpu* kernels enqueued on it, completion by events that are polled.
// Codecs, codec handles and the executor call a Context and never ask where a buffer lives or
// whether the build has CUDA; only device/ knows.
//
// The rule a CUDA context keeps (NCCL's): nothing it does during a call waits for the whole
// device (no cudaMalloc, cudaFree, cudaHostAlloc or synchronous copy): a caller's stream may be
// held waiting for the call, and would then wait for itself. Memory grows stream-ordered;
// what is made once (the kernels' pinned slots, cuBLAS) is made by prepareThread() before any
// stream waits.
//
// Thread safety: a context is used by one thread at a time (a communicator's calls are
// serialized); contexts on one GPU may be used from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/types.h"
#include "device/batch.h"
#include "device/cast.h"
#include "device/hd.h"
#include "device/quantize.h"

namespace squeeze::device {

// Where a buffer is: host memory (pageable), or the context's GPU.
enum class Space : uint8_t { kHost, kDevice };

// Memory owned by its holder, in one space, freed without waiting for the device.
class Allocation {
 public:
  virtual ~Allocation() = default;
  virtual char* data() const = 0;
  virtual size_t size() const = 0;
};

// Host memory of `bytes` (pageable), as the host context allocates it.
std::unique_ptr<Allocation> hostAllocation(size_t bytes);

// How often, since the process started, a CUDA context had no pinned slot for what a call
// needed (a header's check, a small copy from pageable memory, a norm's sum: all in flight, or
// the context was never prepared) and fell back to a synchronous read, a pageable copy or a host
// wait. A call that recycles its slots (Context::wait) needs none; the benchmarks print it and
// tests/gpu caps it at 0 a call. countSlotFallback is the CUDA context's.
uint64_t slotFallbacks();
void countSlotFallback();

class Context {
 public:
  // A point in the context's work: everything enqueued before it (see mark()).
  using Mark = uint64_t;

  virtual ~Context();

  // ---- where ---------------------------------------------------------------------------------
  virtual bool onDevice() const = 0;
  // The GPU (-1: host).
  virtual int device() const = 0;
  // The space the context's kernels read and write: kDevice for a CUDA context.
  Space workSpace() const { return onDevice() ? Space::kDevice : Space::kHost; }
  // Makes what the calling thread needs to run this context's kernels without waiting for the
  // device later (CUDA: the kernels' fixed scratch, cuBLAS; host: nothing). A communicator's
  // progress thread calls it when it starts.
  virtual void prepareThread() {}
  // prepareThread's part that is the context's own, not the thread's: its pinned slots (header
  // checks, small copies from the host, norms). Enough for work whose kernels need no thread
  // scratch (the casts' and quantizers' without norms), made on a thread that may exit while
  // streams are held (a thread's scratch is freed with cudaFree, which waits for the device).
  virtual void prepareSlots() {}

  // ---- memory ----------------------------------------------------------------------------------
  // Memory of at least `bytes` in `space` that the caller owns (a codec handle's state).
  // Device memory is usable by work enqueued on this context from now on. Destroyed, it is
  // freed without waiting for the device: its owner has waited for the work that used it.
  virtual std::unique_ptr<Allocation> allocate(size_t bytes, Space space) = 0;
  // Grows `a` (made by allocate in `space`, or null) to at least `bytes`; contents are lost.
  // The old memory is freed after the work enqueued so far (retire).
  void reserve(std::unique_ptr<Allocation>& a, size_t bytes, Space space);
  // Frees `a` once the work enqueued on this context so far has run (CUDA: stream-ordered;
  // host: at once), since that work may still read or write it.
  virtual void retire(std::unique_ptr<Allocation> a) { a.reset(); }

  // Buffers pooled across calls, by index: beginCall frees them all; an index stays valid
  // until released or the next beginCall.
  void beginCall();
  int acquire(size_t bytes, Space space);
  char* data(int index) const;
  Space space(int index) const;
  void release(int index) { free_.push_back(index); }
  // Scratch in workSpace() by slot (the schedule's scratch, a codec's decoded values, ...),
  // grown and kept across calls; valid until the same slot is asked again.
  enum class Slot : int { kSchedule, kDecoded, kIndices, kCount };
  char* scratch(Slot slot, size_t bytes);

  // ---- data movement -------------------------------------------------------------------------
  // dst = src (bytes), between any memory the context reads (host memory, its device's); src
  // may be a host local: it has been taken when the call returns. Nothing for bytes == 0.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // host dst = src (bytes), then waits, so the host may use what it read at once.
  virtual void read(void* dst, const void* src, size_t bytes) = 0;
  // dst[0..bytes) = 0.
  virtual void zero(void* dst, size_t bytes) = 0;
  // host dst[j] = src[j * stride] for j < count, then waits: a sample of a tensor.
  virtual void gatherStrided(float* dst, const float* src, size_t count, size_t stride) = 0;
  // Checks the `words` (at most kCheckWords) 32-bit words at src against `expected` and calls
  // fail(the words found), which throws, where they differ: a payload header from the network.
  // Host: at once. CUDA: the words come back with the stream's work, and are compared when
  // reached() passes them or wait() returns, which then throw fail's error; the kernels enqueued
  // after the check run on whatever the payload held (asynchronous, as a GPU's errors are).
  static constexpr size_t kCheckWords = 4;
  virtual void checkWords(const void* src, const uint32_t* expected, size_t words,
                          std::function<void(const uint32_t* got)> fail);
  // Checks that the m indices at idx ascend strictly and stay below count (a sparse payload's)
  // and calls fail(the first bad position j, idx[j]), which throws, where not: at once on the
  // host; on a CUDA context a kernel finds them and they are compared as checkWords' words are
  // (kernels after it skip indices at or past their count, so a bad list writes nowhere else).
  virtual void checkIndices(const uint32_t* idx, size_t m, size_t count,
                            std::function<void(size_t j, uint32_t index)> fail);

  // ---- batches ---------------------------------------------------------------------------------
  // The pieces of one schedule step, run as one (the executor's): between beginBatch() and
  // endBatch(), nextPiece() starts each piece, and no two pieces touch the same memory. A context
  // may hold the kernels it can launch for many chunks at once (a CUDA context: the quantizers'
  // and the casts', device/batch.h) and launch each once for the pieces: the first held kernels
  // of every piece, then the second, and so on. It launches what it holds at endBatch, mark and
  // wait, and before any other call that enqueues work. Copies from host memory and checkWords
  // run at once, ahead of the kernels held: within a batch they touch nothing those write (a
  // payload's header). The host context runs everything at once.
  virtual void beginBatch() {}
  virtual void nextPiece() {}
  virtual void endBatch() {}

  // ---- completion ------------------------------------------------------------------------------
  // Marks the work enqueued so far; reached(m) says, without blocking, whether it has all run
  // (a failed kernel or copy throws Error(kCuda)). Host: always reached.
  virtual Mark mark() = 0;
  virtual bool reached(Mark m) = 0;
  // Blocks until the work enqueued so far has run; a failure throws naming `what`.
  virtual void wait(const char* what) = 0;
  // Enqueues the work from now on onto `stream` (a cudaStream_t of the context's GPU; null: the
  // legacy default stream), after the work up to the last mark (an event's wait: nothing goes
  // onto the stream it was on, which its caller may have destroyed since): the caller's stream of
  // a device call that runs there alone, whose work ends with a mark. Host: nothing to do.
  virtual void follow(GpuStream stream) { (void)stream; }
  // The last mark made (0: none), and a wait until the work before mark m has run (CUDA: its
  // event, not the stream); a failure throws naming `what`. Host: at once.
  virtual Mark marked() const { return 0; }
  virtual void waitFor(Mark m, const char* what) {
    (void)m;
    (void)what;
  }

  // ---- timing ----------------------------------------------------------------------------------
  // A timed point in the context's work, for figures a later call reads without waiting (the
  // pay-off guard's, of calls on the caller's stream): CUDA, an event that times when the stream
  // reaches it; host, the clock now.
  using Stamp = uint64_t;
  virtual Stamp stamp() = 0;
  // Once the work before every one of stamps[0..n) has run: seconds[i] = the time from stamps[i]
  // to stamps[i + 1] (n - 1 of them), the stamps are released, and true. Before that: false, and
  // nothing changes; nothing waits. A failed kernel throws Error(kCuda), as reached() does.
  virtual bool takeSeconds(const Stamp* stamps, size_t n, double* seconds) = 0;

  // ---- kernels: each runs device::cpu<Name> or its gpu twin (device/*.h) ---------------------
  // reduce.h
  virtual void reduce(DataType dtype, RedOp op, void* out, const void* a, const void* b,
                      size_t n) = 0;
  virtual void divide(void* buf, size_t n, DataType dtype, int divisor) = 0;
  // cast.h
  virtual void narrow(Narrow kind, const float* in, uint16_t* out, size_t n) = 0;
  virtual void widen(Narrow kind, const uint16_t* in, float* out, size_t n) = 0;
  virtual void widenAdd(Narrow kind, float* out, const float* local, const uint16_t* in,
                        size_t n) = 0;
  // The quantizers (device/batch.h's QuantSetting names one and its settings; quantize.h has
  // their kernels; feedback: null, or its residual in the context's space and where its norms go,
  // on the host): every quantizer through these two entries, so a new one adds a QuantKind and
  // its kernels (cpuQuantEncodeJob's and gpuQuantEncodeJob's cases), not context methods.
  // encode: job.x[0..n) into job.scales and job.codes (job.residual is ignored: the feedback's
  // is used). decode: job.out = the values, or with add job.local + the values. Sums a kernel
  // hands to host doubles (an encode's norms, sparseFeedback's inputSq and sentSq) are added
  // there by the time the context next waits (wait, read): on a CUDA context they stay on the
  // device until then, so an encode waits for nothing.
  // sumsOnDevice routes them: from now on the sums for the host doubles (first, second) are
  // added to `device` (two doubles in the context's device memory) on the device, for whoever
  // reads them back, and never reach the host doubles; null ends the route. Host: nothing (its
  // kernels add to the host doubles at once).
  virtual void sumsOnDevice(const double* first, const double* second, double* device) {
    (void)first;
    (void)second;
    (void)device;
  }
  virtual void quantEncode(const QuantSetting& s, const QuantEncodeJob& job,
                           Feedback* feedback) = 0;
  virtual void quantDecode(const QuantSetting& s, const QuantDecodeJob& job, bool add) = 0;
  // sparse.h. selectTopk returns how many indices it wrote: the host's the nonzero top k (fewer
  // than k where the chunk has fewer nonzeros), a GPU's min(k, n), padded with zeros
  // (gpuSelectTopk), so it waits for nothing. selectAtLeast's count comes back to the host (it
  // waits).
  virtual size_t selectTopk(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx) = 0;
  virtual size_t selectAtLeast(const float* x, size_t n, uint32_t minKey, uint32_t* idx,
                               size_t cap) = 0;
  virtual void gather(const float* x, const uint32_t* idx, size_t k, float* out) = 0;
  virtual void densify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n) = 0;
  virtual void scatterAdd(float* out, const float* local, size_t n, const uint32_t* idx,
                          const float* vals, size_t k) = 0;
  virtual void sparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k,
                              float* residual, double* inputSq, double* sentSq) = 0;
  virtual void randomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                            uint32_t* idx) = 0;
  // A sparsifier's encode with its error feedback: selectTopk (selectAtLeast) and then
  // sparseFeedback over the selection (for selectAtLeast only when it fits cap); selectTopk's
  // also gathers the m values right after the m indices, (float*)(idx + m), as a sparse payload
  // holds them (idx: room for 2k words). Here those steps; the host fuses them
  // (cpuSelectTopkFeedback, cpuSelectAtLeastFeedback).
  virtual size_t selectTopkFeedback(const float* x, size_t n, size_t k, bool sampled,
                                    uint32_t* idx, float* residual, double* inputSq,
                                    double* sentSq);
  // gather, then sparseFeedback (randk's encode with its feedback; the host: one pass).
  virtual void gatherFeedback(const float* x, size_t n, const uint32_t* idx, size_t k,
                              float* values, float* residual, double* inputSq, double* sentSq);
  virtual size_t selectAtLeastFeedback(const float* x, size_t n, uint32_t minKey, uint32_t* idx,
                                       size_t cap, float* residual, double* inputSq,
                                       double* sentSq);
  // linalg.h
  virtual void matMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q,
                            size_t r, float* p) = 0;
  virtual void matTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p,
                             size_t r, float* q) = 0;
  virtual void lowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r,
                            size_t count, const float* x, float scale, float* out,
                            float* residual) = 0;
  virtual void orthonormalize(float* p, size_t n, size_t r) = 0;
  virtual double squaredNorm(const float* x, size_t n) = 0;
  // *sum += squaredNorm(x, n), where the context adds its sums (at once on the host; on a GPU
  // when the context next waits, as an encode's norms).
  virtual void addSquaredNorm(const float* x, size_t n, double* sum) { *sum += squaredNorm(x, n); }
  // handle_kernels.h
  virtual void addResidual(const float* g, float* e, float* x, size_t n) = 0;
  // DGC's prepare (cpuDgcPrepare) of g scaled by clipLimit / |g| where clipLimit > 0 and |g| is
  // larger (|g| summed in the context's order, the scale computed where the kernels run: nothing
  // comes back to the host), else by 1.
  virtual void dgcPrepare(const float* g, double clipLimit, float m, float* u, float* v, float* x,
                          uint8_t* nonzero, size_t n) = 0;
  virtual void dgcMask(float* u, const float* v, const uint8_t* nonzero, size_t n) = 0;
  virtual void feedbackPass(const float* x, const float* d, size_t n, float* residual,
                            double* inputSq, double* sentSq) = 0;
  // A cast codec's encodeFeedback: payload = narrow(x), then feedbackPass with d = widen(payload).
  // Here those three steps (d in the kDecoded scratch); the host and a GPU fuse them into one
  // pass over x.
  virtual void castFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n,
                            float* residual, double* inputSq, double* sentSq);
  // The dense codec's encodeFeedback (float32): payload = x, then feedbackPass with d = payload.
  // Here those two steps; the host and a GPU fuse them into one pass over x.
  virtual void copyFeedback(const float* x, float* payload, size_t n, float* residual,
                            double* inputSq, double* sentSq);
  virtual size_t firstBadIndex(const uint32_t* idx, size_t m, size_t count) = 0;

 private:
  struct Pooled {
    Space space;
    std::unique_ptr<Allocation> memory;
  };
  std::vector<Pooled> pool_;
  std::vector<int> free_;
  std::unique_ptr<Allocation> slots_[static_cast<int>(Slot::kCount)];
};

// The calling thread's host context (ChunkInfo's default, for codecs called outside a
// communicator); makeHostContext() makes a communicator's own.
Context& hostContext();
std::unique_ptr<Context> makeHostContext();

// A CUDA context on `stream`, a non-blocking stream of GPU `device` that outlives the context;
// null: the context makes and owns a non-blocking stream of its own. Throws Error(kInvalidUsage)
// in a build without CUDA, saying so.
std::unique_ptr<Context> makeCudaContext(int device, GpuStream stream);
// A CUDA context for work on its callers' streams (Context::follow), made with no stream of its
// own: until its first follow it is on the legacy default stream (prepareSlots' few
// operations, and a wait for them). A stream made here would take a hardware work queue that
// the callers' streams may then share (CUDA_DEVICE_MAX_CONNECTIONS).
std::unique_ptr<Context> makeFollowingCudaContext(int device);
// The context of a communicator's compressed calls on its callers' streams
// (CodecComm::streamContext): a following context on GPU `device`, its slots prepared. Set-up
// time only: it waits for the device, and first frees the parked contexts whose work has run.
std::unique_ptr<Context> makeCodecContext(int device);
// Ends a context makeCodecContext made with no call that may wait for the device (a stream in
// this process may be held by a peer's call): it is kept until the work it enqueued has run, and
// freed by a later makeCodecContext.
void parkCodecContext(std::unique_ptr<Context> ctx);

}  // namespace squeeze::device
