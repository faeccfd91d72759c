// The CUDA execution context (see device/context.h): one stream of one GPU. Memory in the
// device space is allocated stream-ordered on the stream (cudaMallocAsync), copies and the gpu*
// kernels are enqueued on it, and marks are events polled with cudaEventQuery. Every entry
// makes the context's GPU current for its duration, so a context may be used from any thread.
// Compiled for the CUDA build and for the CUDA stand-in (where the gpu* entry points run their
// CPU twins on an emulated stream).
#include "device/context.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "base/error.h"
#include "device/batch.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/handle_kernels.h"
#include "device/linalg.h"
#include "device/reduce.h"
#include "device/sparse.h"

namespace squeeze::device {
namespace {

// Stream-ordered device memory; freed (cudaFreeAsync) with its GPU current, from any thread.
class DeviceAllocation final : public Allocation {
 public:
  DeviceAllocation(int device, size_t bytes, cudaStream_t stream) : device_(device) {
    buffer_.reserve(bytes, stream);
  }
  ~DeviceAllocation() override {
    try {
      cuda::DeviceGuard guard(device_);
      buffer_ = cuda::DeviceBuffer();
    } catch (const Error&) {  // the device is gone: nothing left to free on it
    }
  }
  char* data() const override { return static_cast<char*>(buffer_.data()); }
  size_t size() const override { return buffer_.size(); }
  // Frees after the work enqueued on `stream` so far.
  void releaseAfter(cudaStream_t stream) {
    cuda::DeviceGuard guard(device_);
    buffer_.releaseAfter(stream);
  }

 private:
  int device_;
  cuda::DeviceBuffer buffer_;
};

class CudaContext final : public Context {
 public:
  CudaContext(int device, cudaStream_t stream) : device_(device), stream_(stream) {
    if (!stream_) {
      cuda::DeviceGuard guard(device_);
      own_.emplace();
      stream_ = own_->get();
    }
  }
  ~CudaContext() override {
    try {
      cuda::DeviceGuard guard(device_);
      events_.clear();
      idle_.clear();
      stamps_.clear();
      sumSlots_ = cuda::DeviceBuffer();
      badIndices_ = cuda::DeviceBuffer();
      sparse_.reset();
      linalg_.reset();
      own_.reset();
    } catch (const Error&) {  // the device is gone: nothing left to free on it
    }
  }

  bool onDevice() const override { return true; }
  int device() const override { return device_; }
  void prepareThread() override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuPrepareThread(stream_);
    prepareSlots();
  }
  void prepareSlots() override {
    cuda::DeviceGuard guard(device_);
    if (!prepared()) {  // made once, here, where waiting for the device is allowed
      sumSlots_ = cuda::DeviceBuffer(kSumSlots * 2 * sizeof(double));
      sumsHost_ = cuda::PinnedBuffer(kSumSlots * 2 * sizeof(double));
      checked_ = cuda::PinnedBuffer(kCheckSlots * kCheckWords * sizeof(uint32_t));
      for (size_t i = kCheckSlots; i-- > 0;) freeChecks_.push_back(i);
      staging_ = cuda::PinnedBuffer(kStageSlots * kStageBytes);
      badIndices_ = cuda::DeviceBuffer(kCheckSlots * 2 * sizeof(unsigned long long));
      // The selections' scratch and cuBLAS's handle (else each thread's, made at first use).
      sparse_ = makeSparseScratch();
      linalg_ = makeLinalgScratch();
      // Each slot's found pair starts as none ({~0, ~0}); its batched check leaves it so.
      cuda::check(cudaMemsetAsync(badIndices_.data(), 0xff, badIndices_.size(), stream_),
                  "cudaMemsetAsync(index check slots)");
      stagedAfter_.assign(kStageSlots, kUnused);
      // Calls enqueued back to back (a training step's buckets) take events from the pools.
      while (idle_.size() < kReadyEvents) idle_.push_back(std::make_unique<cuda::Event>());
      stamps_.reserve(kReadyEvents);
    }
  }

  std::unique_ptr<Allocation> allocate(size_t bytes, Space space) override {
    if (space == Space::kHost) return hostAllocation(bytes);
    cuda::DeviceGuard guard(device_);
    return std::make_unique<DeviceAllocation>(device_, bytes, stream_);
  }

  void retire(std::unique_ptr<Allocation> a) override {
    {
      cuda::DeviceGuard guard(device_);
      settle();  // held kernels may use it
    }
    if (auto* d = dynamic_cast<DeviceAllocation*>(a.get())) d->releaseAfter(stream_);
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    cuda::DeviceGuard guard(device_);
    // Where src is matters only to a small copy (staged, or held) and with kernels held: from
    // pageable host memory a copy cannot depend on one (see beginBatch); from memory a kernel
    // reaches it may read what one writes.
    if (held_.empty() && bytes > kStageBytes) {
      cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
      return;
    }
    const cuda::PointerInfo from = cuda::pointerInfo(src);
    if (holding() && bytes <= kSmallCopyBytes && !from.device && !from.pinned && reachable(dst)) {
      SmallCopyJob job{dst, nullptr, bytes, {}};  // a header: held, one kernel for the batch
      std::memcpy(job.bytes, src, bytes);
      hold(Held::kSmallCopy).copies.push_back(job);
      return;
    }
    if (from.device || from.pinned) settle();
    // A few bytes from pageable host memory (a header the host wrote) go through a pinned slot:
    // from pageable memory cudaMemcpyAsync may wait for the stream.
    if (bytes <= kStageBytes && !from.device && !from.pinned) {
      if (void* staged = stage(src, bytes))
        src = staged;
      else
        countSlotFallback();
    }
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
  }
  void read(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    copy(dst, src, bytes);
    wait("reading bytes back from the GPU");
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes == 0) return;
    cuda::DeviceGuard guard(device_);
    settle();
    cuda::check(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync");
  }
  void gatherStrided(float* dst, const float* src, size_t count, size_t stride) override {
    if (count == 0) return;
    cuda::DeviceGuard guard(device_);
    settle();
    cuda::check(cudaMemcpy2DAsync(dst, sizeof(float), src, stride * sizeof(float), sizeof(float),
                                  count, cudaMemcpyDefault, stream_),
                "cudaMemcpy2DAsync (a strided sample)");
    wait("sampling a tensor on the GPU");
  }

  Mark mark() override {
    cuda::DeviceGuard guard(device_);
    settle();
    std::unique_ptr<cuda::Event> e;
    if (idle_.empty()) {
      e = std::make_unique<cuda::Event>();
    } else {
      e = std::move(idle_.back());
      idle_.pop_back();
    }
    e->record(stream_);
    events_.push_back({++marked_, std::move(e)});
    return marked_;
  }
  bool reached(Mark m) override {
    if (m <= reached_) return true;
    cuda::DeviceGuard guard(device_);
    while (!events_.empty() && events_.front().event->query()) {
      reached_ = events_.front().mark;
      idle_.push_back(std::move(events_.front().event));
      events_.pop_front();
    }
    compareChecks(reached_);
    return m <= reached_;
  }
  void wait(const char* what) override {
    cuda::DeviceGuard guard(device_);
    settle();
    // The sums the kernels added on the device come back with the stream's other work.
    std::vector<SumTarget> targets;
    targets.swap(sumTargets_);
    if (!targets.empty())
      cuda::check(
          cudaMemcpyAsync(sumsHost_.data(), sumSlots_.data(), targets.size() * 2 * sizeof(double),
                          cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (sums back from the GPU)");
    cuda::check(cudaStreamSynchronize(stream_), what);
    reached_ = marked_;
    for (auto& e : events_) idle_.push_back(std::move(e.event));
    events_.clear();
    std::fill(stagedAfter_.begin(), stagedAfter_.end(), kUnused);
    const auto* sums = static_cast<const double*>(sumsHost_.data());
    for (size_t i = 0; i < targets.size(); ++i) {
      if (targets[i].first) *targets[i].first += sums[2 * i];
      if (targets[i].second) *targets[i].second += sums[2 * i + 1];
    }
    compareChecks(marked_ + 1);  // all of them: the stream has run everything
  }

  void follow(GpuStream stream) override {
    auto next = static_cast<cudaStream_t>(stream);
    reached(marked_);  // the events and slots of the work that has run come back
    if (next == stream_) return;
    cuda::DeviceGuard guard(device_);
    settle();  // held kernels belong to the old stream's work
    if (!events_.empty())  // the last mark's event, recorded on the old stream
      cuda::check(cudaStreamWaitEvent(next, events_.back().event->get(), 0),
                  "cudaStreamWaitEvent (a context moves to the caller's stream)");
    stream_ = next;
  }
  Mark marked() const override { return marked_; }
  void waitFor(Mark m, const char* what) override {
    if (m <= reached_) return;
    cuda::DeviceGuard guard(device_);
    for (const Marked& e : events_)
      if (e.mark >= m) {
        cuda::check(cudaEventSynchronize(e.event->get()), what);
        break;
      }
    reached(m);
  }

  Stamp stamp() override {
    cuda::DeviceGuard guard(device_);
    settle();
    return stamps_.record(stream_);
  }
  bool takeSeconds(const Stamp* stamps, size_t n, double* seconds) override {
    cuda::DeviceGuard guard(device_);
    return stamps_.take(stamps, n, seconds);
  }

  void checkWords(const void* src, const uint32_t* expected, size_t words,
                  std::function<void(const uint32_t* got)> fail) override {
    SQZ_ENFORCE(words <= kCheckWords, "checkWords of ", words, " words");
    if (freeChecks_.empty()) {  // unprepared, or every slot in flight: read and compare now
      countSlotFallback();
      Context::checkWords(src, expected, words, std::move(fail));
      return;
    }
    cuda::DeviceGuard guard(device_);
    Check c{freeChecks_.back(), {}, words, std::move(fail), marked_};
    std::memcpy(c.expected, expected, words * sizeof(uint32_t));
    if (holding() && reachable(src)) {  // the words come back by one kernel for the batch
      freeChecks_.pop_back();
      Held& h = hold(Held::kSmallCopy);
      h.copies.push_back({checkSlot(c.slot), src, words * sizeof(uint32_t), {}});
      h.pendingChecks.push_back(std::move(c));
      return;
    }
    settle();
    if (reachable(src)) {  // a kernel writes the words into the pinned slot: no copy to the host
      const SmallCopyJob job{checkSlot(c.slot), src, words * sizeof(uint32_t), {}};
      gpuSmallCopyBatch(&job, 1, stream_);
    } else {
      cuda::check(cudaMemcpyAsync(checkSlot(c.slot), src, words * sizeof(uint32_t),
                                  cudaMemcpyDefault, stream_),
                  "cudaMemcpyAsync (a header into a check slot)");
    }
    freeChecks_.pop_back();
    checks_.push_back(std::move(c));
  }

  void beginBatch() override {
    settle();
    batching_ = prepared();
    position_ = 0;
  }
  void nextPiece() override { position_ = 0; }
  void endBatch() override {
    batching_ = false;
    cuda::DeviceGuard guard(device_);
    settle();
  }

  void reduce(DataType dtype, RedOp op, void* out, const void* a, const void* b,
              size_t n) override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuReduce(dtype, op, out, a, b, n, stream_);
  }
  void divide(void* buf, size_t n, DataType dtype, int divisor) override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuDivide(buf, n, dtype, divisor, stream_);
  }
  void narrow(Narrow kind, const float* in, uint16_t* out, size_t n) override {
    cuda::DeviceGuard guard(device_);
    if (n == 0) return;
    if (holding()) return hold(Held::kNarrow, kind, false).casts.push_back({in, out, nullptr, n});
    settle();
    gpuNarrow(kind, in, out, n, stream_);
  }
  void widen(Narrow kind, const uint16_t* in, float* out, size_t n) override {
    cuda::DeviceGuard guard(device_);
    if (n == 0) return;
    if (holding()) return hold(Held::kWiden, kind, false).casts.push_back({in, out, nullptr, n});
    settle();
    gpuWiden(kind, in, out, n, stream_);
  }
  void widenAdd(Narrow kind, float* out, const float* local, const uint16_t* in,
                size_t n) override {
    cuda::DeviceGuard guard(device_);
    if (n == 0) return;
    if (holding()) return hold(Held::kWiden, kind, true).casts.push_back({in, out, local, n});
    settle();
    gpuWidenAdd(kind, out, local, in, n, stream_);
  }
  // Held when batching (with the norms on the device, or none), else launched as one.
  void quantEncode(const QuantSetting& s, const QuantEncodeJob& given,
                   Feedback* feedback) override {
    cuda::DeviceGuard guard(device_);
    if (given.n == 0) return;
    QuantEncodeJob job = given;
    job.residual = feedback ? feedback->residual : nullptr;
    Feedback fb = deferred(feedback);
    if (holding() && (!feedback || fb.deviceNorms)) {
      hold(Held::kQuantEncode, Narrow::kHalf, feedback != nullptr, fb.deviceNorms, s)
          .encodes.push_back(job);
      return;
    }
    settle();
    gpuQuantEncodeJob(s, job, feedback ? &fb : nullptr, stream_);
  }
  // A quantizer's decode or decode-add: held when batching, else launched as a batch of one.
  void quantDecode(const QuantSetting& s, const QuantDecodeJob& job, bool add) override {
    cuda::DeviceGuard guard(device_);
    if (job.n == 0) return;
    if (holding()) {
      hold(Held::kQuantDecode, Narrow::kHalf, add, nullptr, s).decodes.push_back(job);
      return;
    }
    settle();
    gpuQuantDecodeBatch(s, &job, 1, add, stream_);
  }
  size_t selectTopk(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx) override {
    cuda::DeviceGuard guard(device_);
    k = std::min(k, n);
    if (holding() && k > 0 && n <= kOneBlockSelectMax) {  // one block a chunk: batched
      hold(Held::kSelect).selects.push_back({x, n, k, idx});
      return k;
    }
    settle();
    return gpuSelectTopk(x, n, k, sampled, idx, stream_, sparse_.get());
  }
  size_t selectAtLeast(const float* x, size_t n, uint32_t minKey, uint32_t* idx,
                       size_t cap) override {
    cuda::DeviceGuard guard(device_);
    settle();
    return gpuSelectAtLeast(x, n, minKey, idx, cap, stream_, sparse_.get());
  }
  void gather(const float* x, const uint32_t* idx, size_t k, float* out) override {
    cuda::DeviceGuard guard(device_);
    if (k == 0) return;
    if (holding()) return hold(Held::kGather).gathers.push_back({x, idx, k, out});
    settle();
    gpuGather(x, idx, k, out, stream_);
  }
  void densify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n) override {
    cuda::DeviceGuard guard(device_);
    if (n == 0) return;
    if (holding()) return hold(Held::kDensify).scatters.push_back({idx, vals, k, dst, nullptr, n});
    settle();
    gpuDensify(idx, vals, k, dst, n, stream_);
  }
  void scatterAdd(float* out, const float* local, size_t n, const uint32_t* idx, const float* vals,
                  size_t k) override {
    cuda::DeviceGuard guard(device_);
    if (n == 0) return;
    if (holding()) return hold(Held::kScatterAdd).scatters.push_back({idx, vals, k, out, local, n});
    settle();
    gpuScatterAdd(out, local, n, idx, vals, k, stream_);
  }
  void sparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* residual,
                      double* inputSq, double* sentSq) override {
    cuda::DeviceGuard guard(device_);
    if (n == 0 || (!residual && !inputSq && !sentSq)) return;
    double* sums = inputSq || sentSq ? sumSlot(inputSq, sentSq) : nullptr;
    if (holding() && (sums || (!inputSq && !sentSq))) {
      hold(Held::kSparseFeedback, Narrow::kHalf, false, sums)
          .sparseFeedbacks.push_back({x, n, idx, k, residual});
      return;
    }
    settle();
    gpuSparseFeedback(x, n, idx, k, residual, inputSq, sentSq, sums, stream_, sparse_.get());
  }
  void randomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                    uint32_t* idx) override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuRandomStrata(seed, call, offset, n, k, idx, stream_);
  }
  void matMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                    float* p) override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuMatMulPanels(M, count, n, m, q, r, p, stream_, linalg_.get());
  }
  void matTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                     float* q) override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuMatTMulPanels(M, count, n, m, p, r, q, stream_, linalg_.get());
  }
  void lowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r, size_t count,
                    const float* x, float scale, float* out, float* residual) override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuLowRankApply(p, q, n, m, r, count, x, scale, out, residual, stream_);
  }
  void orthonormalize(float* p, size_t n, size_t r) override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuOrthonormalize(p, n, r, stream_);
  }
  double squaredNorm(const float* x, size_t n) override {
    cuda::DeviceGuard guard(device_);
    settle();
    return gpuSquaredNorm(x, n, stream_, linalg_.get());
  }
  void addSquaredNorm(const float* x, size_t n, double* sum) override {
    cuda::DeviceGuard guard(device_);
    settle();
    if (double* slot = sumSlot(sum, nullptr))
      gpuAddSquaredNorm(x, n, slot, stream_, linalg_.get());
    else
      *sum += gpuSquaredNorm(x, n, stream_, linalg_.get());
  }
  void addResidual(const float* g, float* e, float* x, size_t n) override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuAddResidual(g, e, x, n, stream_);
  }
  void dgcPrepare(const float* g, double clipLimit, float m, float* u, float* v, float* x,
                  uint8_t* nonzero, size_t n) override {
    cuda::DeviceGuard guard(device_);
    settle();
    const float* scale = clipLimit > 0 ? gpuClipScale(g, n, clipLimit, stream_, linalg_.get())
                                       : nullptr;
    gpuDgcPrepare(g, 1.0f, m, u, v, x, nonzero, n, stream_, scale);
  }
  void dgcMask(float* u, const float* v, const uint8_t* nonzero, size_t n) override {
    cuda::DeviceGuard guard(device_);
    settle();
    gpuDgcMask(u, v, nonzero, n, stream_);
  }
  void feedbackPass(const float* x, const float* d, size_t n, float* residual, double* inputSq,
                    double* sentSq) override {
    cuda::DeviceGuard guard(device_);
    settle();
    double* sums = inputSq || sentSq ? sumSlot(inputSq, sentSq) : nullptr;
    gpuFeedbackPass(x, d, n, residual, inputSq, sentSq, sums, stream_);
  }
  // One fused kernel (not held: a batch settles before it).
  void copyFeedback(const float* x, float* payload, size_t n, float* residual, double* inputSq,
                    double* sentSq) override {
    cuda::DeviceGuard guard(device_);
    if (n == 0) return;
    settle();
    double* sums = inputSq || sentSq ? sumSlot(inputSq, sentSq) : nullptr;
    gpuCopyFeedback(x, payload, n, residual, inputSq, sentSq, sums, stream_);
  }
  void castFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n, float* residual,
                    double* inputSq, double* sentSq) override {
    cuda::DeviceGuard guard(device_);
    if (n == 0) return;
    double* sums = inputSq || sentSq ? sumSlot(inputSq, sentSq) : nullptr;
    if (holding() && (sums || (!inputSq && !sentSq))) {
      Held& h = hold(Held::kCastFeedback, kind, false, sums);
      h.castFeedbacks.push_back({x, payload, n, residual});
      return;
    }
    settle();
    gpuCastFeedback(kind, x, payload, n, residual, inputSq, sentSq, sums, stream_);
  }
  void checkIndices(const uint32_t* idx, size_t m, size_t count,
                    std::function<void(size_t j, uint32_t index)> fail) override {
    if (m == 0) return;
    if (freeChecks_.empty()) {  // unprepared, or every check slot in flight
      countSlotFallback();
      Context::checkIndices(idx, m, count, std::move(fail));
      return;
    }
    cuda::DeviceGuard guard(device_);
    auto failAt = [fail = std::move(fail)](const uint32_t* got) {
      unsigned long long j, index;
      std::memcpy(&j, got, sizeof j);
      std::memcpy(&index, got + 2, sizeof index);
      fail(static_cast<size_t>(j), static_cast<uint32_t>(index));
    };
    // The check's kernel reports into its check slot (found: the slot's pair, left reset).
    const size_t slot = freeChecks_.back();
    freeChecks_.pop_back();
    auto* found = static_cast<unsigned long long*>(badIndices_.data()) + 2 * slot;
    const IndexCheckJob job{idx, m, count, found,
                            reinterpret_cast<unsigned long long*>(checkSlot(slot))};
    Check c{slot, {~0u, ~0u, ~0u, ~0u}, 4, std::move(failAt), marked_};
    if (holding()) {  // settle enqueues the batch's checks, and sets their marks
      Held& h = hold(Held::kIndexCheck);
      h.checks.push_back(job);
      h.pendingChecks.push_back(std::move(c));
      return;
    }
    settle();
    gpuFindBadIndexBatch(&job, 1, stream_);
    checks_.push_back(std::move(c));
  }
  size_t firstBadIndex(const uint32_t* idx, size_t m, size_t count) override {
    cuda::DeviceGuard guard(device_);
    settle();
    return gpuFirstBadIndex(idx, m, count, stream_);
  }

 private:
  struct Marked {
    Mark mark;
    std::unique_ptr<cuda::Event> event;
  };
  // A checkWords whose words are on their way to checkSlot(slot): done once a mark recorded
  // after it (one past `after`) is reached.
  struct Check {
    size_t slot;
    uint32_t expected[kCheckWords];
    size_t words;
    std::function<void(const uint32_t* got)> fail;
    Mark after;
  };
  static constexpr size_t kCheckSlots = 256;
  static constexpr size_t kStageSlots = 1024, kStageBytes = 64;
  static constexpr size_t kReadyEvents = 64;  // marks and stamps each, made by prepareSlots
  static constexpr Mark kUnused = ~Mark{0};

  // ---- held kernels (beginBatch) ----------------------------------------------------------------

  // Kernels of one kind and setting at one position in their pieces, launched as one batch.
  struct Held {
    enum Kind : uint8_t {
      kQuantEncode,
      kQuantDecode,
      kNarrow,
      kWiden,
      kCastFeedback,
      kSelect,
      kGather,
      kDensify,
      kScatterAdd,
      kSparseFeedback,
      kIndexCheck,
      kSmallCopy
    };
    size_t position;
    Kind kind;
    QuantSetting quant{};
    Narrow narrow = Narrow::kHalf;
    bool flag = false;       // encode: feedback; widen, decode: add
    double* sums = nullptr;  // the feedback norms' sum slot
    std::vector<QuantEncodeJob> encodes;
    std::vector<QuantDecodeJob> decodes;
    std::vector<CastJob> casts;
    std::vector<CastFeedbackJob> castFeedbacks;
    std::vector<SelectJob> selects;
    std::vector<GatherJob> gathers;
    std::vector<ScatterJob> scatters;
    std::vector<SparseFeedbackJob> sparseFeedbacks;
    std::vector<IndexCheckJob> checks;
    std::vector<SmallCopyJob> copies;
    // The checks whose words these bring back, in order: compared from the next mark on.
    std::vector<Check> pendingChecks;
  };

  bool holding() const { return batching_; }
  static bool sameQuant(const QuantSetting& a, const QuantSetting& b) {
    return a.kind == b.kind && a.block == b.block && a.levels == b.levels && a.bits == b.bits &&
           a.key == b.key;
  }
  // The batch a kernel of this kind and setting joins: the one at this position in the piece
  // (position_, counted per piece), made if new.
  Held& hold(Held::Kind kind, Narrow narrow = Narrow::kHalf, bool flag = false,
             double* sums = nullptr, const QuantSetting& quant = {}) {
    const size_t position = position_++;
    for (Held& h : held_)
      if (h.position == position && h.kind == kind && h.narrow == narrow && h.flag == flag &&
          h.sums == sums && sameQuant(h.quant, quant))
        return h;
    Held h;
    h.position = position;
    h.kind = kind;
    h.quant = quant;
    h.narrow = narrow;
    h.flag = flag;
    h.sums = sums;
    held_.push_back(std::move(h));
    return held_.back();
  }
  // Launches what is held: position after position, each position's batches in the order they
  // were made (stable), so each piece's kernels run in its order.
  void settle() {
    if (held_.empty()) return;
    std::vector<Held> held;
    held.swap(held_);
    std::stable_sort(held.begin(), held.end(),
                     [](const Held& a, const Held& b) { return a.position < b.position; });
    for (Held& h : held) switch (h.kind) {
        case Held::kQuantEncode:
          gpuQuantEncodeBatch(h.quant, h.encodes.data(), h.encodes.size(), h.flag, h.sums, stream_);
          break;
        case Held::kQuantDecode:
          gpuQuantDecodeBatch(h.quant, h.decodes.data(), h.decodes.size(), h.flag, stream_);
          break;
        case Held::kNarrow:
          gpuNarrowBatch(h.narrow, h.casts.data(), h.casts.size(), stream_);
          break;
        case Held::kWiden:
          gpuWidenBatch(h.narrow, h.casts.data(), h.casts.size(), h.flag, stream_);
          break;
        case Held::kCastFeedback:
          gpuCastFeedbackBatch(h.narrow, h.castFeedbacks.data(), h.castFeedbacks.size(), h.sums,
                               stream_);
          break;
        case Held::kSelect:
          gpuSelectTopkBatch(h.selects.data(), h.selects.size(), stream_);
          break;
        case Held::kGather:
          gpuGatherBatch(h.gathers.data(), h.gathers.size(), stream_);
          break;
        case Held::kDensify:
          gpuDensifyBatch(h.scatters.data(), h.scatters.size(), stream_);
          break;
        case Held::kScatterAdd:
          gpuScatterAddBatch(h.scatters.data(), h.scatters.size(), stream_);
          break;
        case Held::kSparseFeedback:
          gpuSparseFeedbackBatch(h.sparseFeedbacks.data(), h.sparseFeedbacks.size(), h.sums,
                                 stream_, sparse_.get());
          break;
        case Held::kIndexCheck:
          gpuFindBadIndexBatch(h.checks.data(), h.checks.size(), stream_);  // into the slots
          [[fallthrough]];
        case Held::kSmallCopy:
          gpuSmallCopyBatch(h.copies.data(), h.copies.size(), stream_);
          for (Check& c : h.pendingChecks) {
            c.after = marked_;
            checks_.push_back(std::move(c));
          }
          break;
      }
  }
  // Whether a kernel reaches p (device memory, or pinned host memory).
  static bool reachable(const void* p) {
    const cuda::PointerInfo at = cuda::pointerInfo(p);
    return at.device || at.pinned;
  }
  // prepareThread has made the slots below (sums, checks, staging).
  bool prepared() const { return sumSlots_.data() != nullptr; }
  // The next pinned staging slot with `bytes` of src in it, or null when the copy out of it may
  // not have run yet (no mark after it reached since): the caller copies from src itself.
  void* stage(const void* src, size_t bytes) {
    if (!prepared()) return nullptr;
    const size_t slot = nextStage_;
    if (stagedAfter_[slot] != kUnused && stagedAfter_[slot] >= reached_) return nullptr;
    nextStage_ = (nextStage_ + 1) % kStageSlots;
    stagedAfter_[slot] = marked_;
    char* at = static_cast<char*>(staging_.data()) + slot * kStageBytes;
    std::memcpy(at, src, bytes);
    return at;
  }

  uint32_t* checkSlot(size_t slot) const {
    return static_cast<uint32_t*>(checked_.data()) + slot * kCheckWords;
  }
  // Compares the checks that marks up to `upTo` cover, in order; the first mismatch drops every
  // pending check (its call has failed) and throws its error.
  void compareChecks(Mark upTo) {
    while (!checks_.empty() && checks_.front().after < upTo) {
      Check c = std::move(checks_.front());
      checks_.pop_front();
      freeChecks_.push_back(c.slot);
      const uint32_t* got = checkSlot(c.slot);
      if (std::memcmp(got, c.expected, c.words * sizeof(uint32_t)) == 0) continue;
      uint32_t copy[kCheckWords];
      std::memcpy(copy, got, c.words * sizeof(uint32_t));
      for (Check& rest : checks_) freeChecks_.push_back(rest.slot);
      checks_.clear();
      c.fail(copy);
    }
  }
  // Where a slot's two sums go (host doubles; null: dropped).
  using SumTarget = std::pair<double*, double*>;
  static constexpr size_t kSumSlots = 64;

  // Sums kernels add to on the device (an encode's norms) for host doubles, delivered by the
  // next wait(): a chunk's encode waits for nothing. One slot of two doubles per pair of
  // destinations, zeroed on the stream when first given out. Null when the context was not
  // prepared (its slots are made by prepareThread) or every slot is taken: the kernel's host
  // side then synchronizes and adds them itself.
  double* sumSlot(double* first, double* second) {
    for (const SumRoute& r : routes_)
      if (r.first == first && r.second == second) return r.device;
    if (!prepared()) {
      countSlotFallback();
      return nullptr;
    }
    const SumTarget target{first, second};
    size_t i = 0;
    while (i < sumTargets_.size() && sumTargets_[i] != target) ++i;
    if (i == kSumSlots) {
      countSlotFallback();
      return nullptr;
    }
    auto* slot = static_cast<double*>(sumSlots_.data()) + 2 * i;
    if (i == sumTargets_.size()) {
      cuda::check(cudaMemsetAsync(slot, 0, 2 * sizeof(double), stream_), "cudaMemsetAsync");
      sumTargets_.push_back(target);
    }
    return slot;
  }
  void sumsOnDevice(const double* first, const double* second, double* device) override {
    std::erase_if(routes_,
                  [&](const SumRoute& r) { return r.first == first && r.second == second; });
    if (device) routes_.push_back({first, second, device});
  }
  // A quantizer's feedback with its norms added on the device (sumSlot).
  Feedback deferred(const Feedback* feedback) {
    if (!feedback) return Feedback{};
    Feedback fb = *feedback;
    fb.deviceNorms =
        fb.norms ? sumSlot(&fb.norms->inputSq, &fb.norms->sentSq) : sumSlot(nullptr, nullptr);
    return fb;
  }

  int device_;
  cudaStream_t stream_;
  std::optional<cuda::Stream> own_;  // when the context made its stream
  std::deque<Marked> events_;        // recorded, not yet seen reached, in order
  std::vector<std::unique_ptr<cuda::Event>> idle_;
  Mark marked_ = 0, reached_ = 0;
  cuda::TimedEvents stamps_;  // stamp()'s
  cuda::DeviceBuffer sumSlots_;        // kSumSlots pairs of doubles (prepareThread)
  cuda::PinnedBuffer sumsHost_;        // where wait() copies them
  std::vector<SumTarget> sumTargets_;  // slot i's destinations, until the next wait()
  struct SumRoute {
    const double* first;
    const double* second;
    double* device;
  };
  std::vector<SumRoute> routes_;  // sumsOnDevice's
  cuda::PinnedBuffer checked_;         // kCheckSlots slots of checkWords' words (prepareThread)
  std::vector<size_t> freeChecks_;
  std::deque<Check> checks_;       // in enqueue order
  cuda::PinnedBuffer staging_;     // kStageSlots slots for copy()'s small host sources
  cuda::DeviceBuffer badIndices_;  // in a batch, each check's at its check slot
  SparseScratchPtr sparse_;        // device/sparse.h's scratch of this context's work
  LinalgScratchPtr linalg_;        // device/linalg.h's
  std::vector<Mark> stagedAfter_;  // per slot: the last mark before its copy, or kUnused
  size_t nextStage_ = 0;
  bool batching_ = false;  // between beginBatch and endBatch (on a prepared context)
  size_t position_ = 0;    // the next held kernel's position in its piece
  std::vector<Held> held_;
};

}  // namespace

std::unique_ptr<Context> makeCudaContext(int device, GpuStream stream) {
  return std::make_unique<CudaContext>(device, stream);
}

std::unique_ptr<Context> makeFollowingCudaContext(int device) {
  return std::make_unique<CudaContext>(device, cudaStreamLegacy);
}

}  // namespace squeeze::device
