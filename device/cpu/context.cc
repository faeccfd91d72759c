// The host execution context (see device/context.h): ordinary memory, memcpy and the cpu*
// kernels, each done when it returns, so every mark is reached and nothing is waited for.
#include "device/context.h"

#include <chrono>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "device/handle_kernels.h"
#include "device/linalg.h"
#include "device/reduce.h"
#include "device/sparse.h"

namespace squeeze::device {
namespace {

class HostAllocation : public Allocation {
 public:
  explicit HostAllocation(size_t bytes) : bytes_(bytes) {}
  char* data() const override { return const_cast<char*>(bytes_.data()); }
  size_t size() const override { return bytes_.size(); }

 private:
  std::vector<char> bytes_;
};

class HostContext final : public Context {
 public:
  bool onDevice() const override { return false; }
  int device() const override { return -1; }

  std::unique_ptr<Allocation> allocate(size_t bytes, Space space) override {
    SQZ_ENFORCE(space == Space::kHost, "device memory asked of the host context");
    return hostAllocation(bytes);
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void read(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
  }
  void gatherStrided(float* dst, const float* src, size_t count, size_t stride) override {
    for (size_t j = 0; j < count; ++j) dst[j] = src[j * stride];
  }

  Mark mark() override { return 0; }
  bool reached(Mark) override { return true; }
  void wait(const char*) override {}

  // The clock now: the host's work is done when its calls return.
  Stamp stamp() override {
    clock_[++lastStamp_] =
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    return lastStamp_;
  }
  bool takeSeconds(const Stamp* stamps, size_t n, double* seconds) override {
    for (size_t i = 0; i < n; ++i)
      SQZ_ENFORCE(clock_.count(stamps[i]), "takeSeconds: stamp ", stamps[i], " is not held");
    for (size_t i = 0; i + 1 < n; ++i) seconds[i] = clock_[stamps[i + 1]] - clock_[stamps[i]];
    for (size_t i = 0; i < n; ++i) clock_.erase(stamps[i]);
    return true;
  }

  void reduce(DataType dtype, RedOp op, void* out, const void* a, const void* b,
              size_t n) override {
    if (n) cpuReduceFn(dtype, op)(out, a, b, n);
  }
  void divide(void* buf, size_t n, DataType dtype, int divisor) override {
    cpuDivide(buf, n, dtype, divisor);
  }
  void narrow(Narrow kind, const float* in, uint16_t* out, size_t n) override {
    cpuNarrow(kind, in, out, n);
  }
  void widen(Narrow kind, const uint16_t* in, float* out, size_t n) override {
    cpuWiden(kind, in, out, n);
  }
  void widenAdd(Narrow kind, float* out, const float* local, const uint16_t* in,
                size_t n) override {
    cpuWidenAdd(kind, out, local, in, n);
  }
  void quantEncode(const QuantSetting& s, const QuantEncodeJob& job, Feedback* feedback) override {
    cpuQuantEncodeJob(s, job, feedback);
  }
  void quantDecode(const QuantSetting& s, const QuantDecodeJob& job, bool add) override {
    cpuQuantDecodeJob(s, job, add);
  }
  size_t selectTopk(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx) override {
    return cpuSelectTopk(x, n, k, sampled, idx);
  }
  size_t selectAtLeast(const float* x, size_t n, uint32_t minKey, uint32_t* idx,
                       size_t cap) override {
    return cpuSelectAtLeast(x, n, minKey, idx, cap);
  }
  void gather(const float* x, const uint32_t* idx, size_t k, float* out) override {
    cpuGather(x, idx, k, out);
  }
  void densify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n) override {
    cpuDensify(idx, vals, k, dst, n);
  }
  void scatterAdd(float* out, const float* local, size_t n, const uint32_t* idx, const float* vals,
                  size_t k) override {
    cpuScatterAdd(out, local, n, idx, vals, k);
  }
  void sparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* residual,
                      double* inputSq, double* sentSq) override {
    cpuSparseFeedback(x, n, idx, k, residual, inputSq, sentSq);
  }
  void randomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                    uint32_t* idx) override {
    cpuRandomStrata(seed, call, offset, n, k, idx);
  }
  size_t selectTopkFeedback(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx,
                            float* residual, double* inputSq, double* sentSq) override {
    return cpuSelectTopkFeedback(x, n, k, sampled, idx, residual, inputSq, sentSq);
  }
  void gatherFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* values,
                      float* residual, double* inputSq, double* sentSq) override {
    cpuGatherFeedback(x, n, idx, k, values, residual, inputSq, sentSq);
  }
  size_t selectAtLeastFeedback(const float* x, size_t n, uint32_t minKey, uint32_t* idx,
                               size_t cap, float* residual, double* inputSq,
                               double* sentSq) override {
    return cpuSelectAtLeastFeedback(x, n, minKey, idx, cap, residual, inputSq, sentSq);
  }
  void matMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                    float* p) override {
    cpuMatMulPanels(M, count, n, m, q, r, p);
  }
  void matTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                     float* q) override {
    cpuMatTMulPanels(M, count, n, m, p, r, q);
  }
  void lowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r, size_t count,
                    const float* x, float scale, float* out, float* residual) override {
    cpuLowRankApply(p, q, n, m, r, count, x, scale, out, residual);
  }
  void orthonormalize(float* p, size_t n, size_t r) override { cpuOrthonormalize(p, n, r); }
  double squaredNorm(const float* x, size_t n) override { return cpuSquaredNorm(x, n); }
  void addResidual(const float* g, float* e, float* x, size_t n) override {
    cpuAddResidual(g, e, x, n);
  }
  void dgcPrepare(const float* g, double clipLimit, float m, float* u, float* v, float* x,
                  uint8_t* nonzero, size_t n) override {
    cpuDgcPrepare(g, clipLimit > 0 ? cpuClipScale(g, n, clipLimit) : 1.0f, m, u, v, x, nonzero,
                  n);
  }
  void dgcMask(float* u, const float* v, const uint8_t* nonzero, size_t n) override {
    cpuDgcMask(u, v, nonzero, n);
  }
  void feedbackPass(const float* x, const float* d, size_t n, float* residual, double* inputSq,
                    double* sentSq) override {
    cpuFeedbackPass(x, d, n, residual, inputSq, sentSq);
  }
  void castFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n, float* residual,
                    double* inputSq, double* sentSq) override {
    cpuCastFeedback(kind, x, payload, n, residual, inputSq, sentSq);
  }
  void copyFeedback(const float* x, float* payload, size_t n, float* residual, double* inputSq,
                    double* sentSq) override {
    cpuCopyFeedback(x, payload, n, residual, inputSq, sentSq);
  }
  size_t firstBadIndex(const uint32_t* idx, size_t m, size_t count) override {
    return cpuFirstBadIndex(idx, m, count);
  }

 private:
  std::unordered_map<Stamp, double> clock_;  // stamp()'s readings, until taken
  Stamp lastStamp_ = 0;
};

}  // namespace

std::unique_ptr<Allocation> hostAllocation(size_t bytes) {
  return std::make_unique<HostAllocation>(bytes);
}

Context& hostContext() {
  thread_local HostContext ctx;
  return ctx;
}

std::unique_ptr<Context> makeHostContext() { return std::make_unique<HostContext>(); }

}  // namespace squeeze::device
