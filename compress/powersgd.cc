// PowerSGD (Vogels et al.; seed 000, "Algorithm 1 Rank-r POWERSGD compression"): a composite
// method, not a chunk codec. The tensor is viewed as a matrix M (n x m, row-major) and each call
// runs one step of power iteration with a warm-started Q (m x r):
//   M = g + e                        error feedback (e: this rank's residual; ef=0 keeps e = 0)
//   P = M Q;      P <- ALL_REDUCE_MEAN(P)
//   P^ = ORTHOGONALIZE(P)            Gram-Schmidt, orthonormal columns (device/linalg.h)
//   Q = M^T P^;   Q <- ALL_REDUCE_MEAN(Q)
//   result = P^ Q^T (times the rank count for sum; as is for avg)
//   e <- M - P^ Q^T                  the local M minus the aggregated approximation
// Q is kept across calls (the warm start) and saved with the state ("q"). Q starts i.i.d.
// standard normal from a counter-based hash of (seed, element index), the same on every rank.
// Every rank computes P^ and the result from the same all-reduced P and Q with the same
// deterministic code (device/cpu/linalg.cc), so results agree bit for bit.
//
// Matrix view: m = cols when given, else ceil(sqrt(count)) (near-square); n = ceil(count / m).
// When count is not a multiple of m, the last row is padded with zeros: the padding takes part
// in the products as zeros and is never written. "Vector-shaped parameters (biases) are
// aggregated uncompressed": when the view is degenerate (m or n <= rank, which covers cols = 1,
// or a low-rank payload (n + m) r not smaller than n m) or the tensor is under min_bytes, the
// call is one plain dense all-reduce of M, and e becomes 0.
//
// On the wire: two dense float32 all-reduces, of P (n r values) and then Q (m r values), with
// the communicator's algorithm; the ratio is about n m / ((n + m) r) (128 for 1024 x 1024 at
// rank 4). Statistics: wire bytes are what the two all-reduces sent; dense bytes are what the
// same schedules send per value, times count; gain is |M^T P^|^2 / |M|^2 (the local M's
// projection on the shared subspace); encode time covers g + e, the two products and the
// orthogonalization, decode time the final P^ Q^T with the residual update.
//
// Round-trip bound: the result is P^ P^^T mean(M), an orthogonal projection of the columns of
// mean(M) on span(P^), so |mean(M) - result/scale|_F <= |mean(M)|_F; it is exact (to float
// rounding) when mean(M) has rank <= r and span(P^) holds its column space. What it drops stays
// in e and is sent on later calls.
//
// Device calls (a CUDA execution context) run the same steps on the GPU: M, P (scratch), Q and e
// (the state's device mirror, handle.h) in device memory, the gpu* twins of device/linalg.h, and the
// two inner all-reduces on device spans. cuBLAS's products round differently from the CPU's, so
// a device call agrees with a host call to float tolerance (and with other GPUs of the same kind
// bit for bit); the dense fallback is exact either way.
//
// Keys: rank (default 4, 1..65536), cols (0: near-square), seed (0), ef, min_bytes.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "compress/codecs.h"
#include "device/linalg.h"

namespace squeeze {
namespace {

// powersgd's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kPowerSgdId = 11;

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A standard normal value from (seed, index) by Box-Muller over two hashed uniforms in (0, 1).
// log/cos come from libm: hosts with different libms may start from Q differing in the last
// bit, which only perturbs the first call's P (results still agree: they use all-reduced P, Q).
float normalAt(uint64_t seed, uint64_t index) {
  const uint64_t s = splitmix64(seed ^ 0x506f776572534744ull);  // "PowerSGD"
  const double u1 = (double(splitmix64(s ^ (2 * index)) >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = (double(splitmix64(s ^ (2 * index + 1)) >> 11) + 0.5) * 0x1.0p-53;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}


using Clock = SteadyClock;

class PowerSgdHandle final : public CodecHandle {
 public:
  PowerSgdHandle(const CodecSpec& spec, size_t count, DataType dtype)
      : CodecHandle(spec, count, dtype, makeChunkCodec(CodecSpec::parse("dense"))) {
    // The base class turns error feedback off for a raw-wire chunk codec; this method is lossy.
    errorFeedback_ = spec_.get("ef", 1, 0, 1) != 0;
    if (errorFeedback_)
      residual_.assign(count_, 0.0f);
    else
      residual_.clear();
    rank_ = static_cast<size_t>(spec_.getWhole("rank", 4, 1, 65536));
    const size_t cols = static_cast<size_t>(spec_.getWhole("cols", 0, 0, 0x1p40));
    const uint64_t seed = static_cast<size_t>(spec_.getWhole("seed", 0, 0, 0x1p53));
    if (count_ == 0) return;
    m_ = cols ? cols : static_cast<size_t>(std::ceil(std::sqrt(double(count_))));
    while (!cols && m_ * m_ < count_) ++m_;  // exact ceil(sqrt) despite rounding
    while (!cols && m_ > 1 && (m_ - 1) * (m_ - 1) >= count_) --m_;
    n_ = (count_ + m_ - 1) / m_;
    lowRank_ = n_ > rank_ && m_ > rank_ && double(n_ + m_) * rank_ < double(n_) * m_;
    if (!lowRank_) return;
    q_.resize(m_ * rank_);
    for (size_t t = 0; t < q_.size(); ++t) q_[t] = normalAt(seed, t);
    pCount_ = n_ * rank_;
  }

  void allReduce(CodecComm& comm, const void* in, void* out, RedOp op,
                 device::Context& ctx) override {
    CodecCall call;
    call.call = calls_;
    placeState(ctx);
    float* x = static_cast<float*>(out);
    // Too small or a degenerate view: dense, with no adapt step; else the pay-off guard decides,
    // before prepare: a dense call with an empty residual runs from in to out, as sqzAllReduce.
    const bool eligible = lowRank_ && !tooSmall(comm);
    const bool compress = eligible && adapt(comm, nullptr, ctx, call);
    auto t0 = Clock::now();
    double seconds = 0;  // for the guard: as CodecHandle::allReduce counts it
    const bool direct = runsDirect(compress);  // before endRun, which changes what it reads
    if (direct) {
      runChunked(comm, in, out, count_, op, *chunk_, call);  // chunk_ is the dense codec
    } else {
      prepare(static_cast<const float*>(in), x, comm.size(), ctx);  // x = M = g + e; e = 0
      ctx.addSquaredNorm(x, count_, &call.norms.inputSq);           // here by the wait below
      call.encodeSeconds += secondsSince(t0);
      if (compress) seconds += secondsSince(t0);
      t0 = Clock::now();
      if (!compress) {
        dense(comm, x, count_, op, call);  // exact: e stays 0; sentSq = inputSq, below
      } else {
        lowRank(comm, x, op, call, t0, ctx);
      }
    }
    endRun(eligible, compress, seconds + secondsSince(t0), call);
    ctx.wait("PowerSGD's last pass on the GPU");  // the norms have arrived
    if (!direct && !compress) call.norms.sentSq = call.norms.inputSq;
    account(call);
    ++calls_;
  }

 protected:
  std::vector<std::pair<std::string, std::vector<float>*>> extraState() override {
    return {{"q", &q_}};
  }

  // On the caller's stream (CodecHandle::enqueueOnStream): Algorithm 1 with its two all-reduces
  // as stream collectives (avg: folded in rank order, then divided), the products in the
  // context (its own cuBLAS handle). The gain is not measured there (its norms would come back
  // to the host).
  bool runsOnStream(const device::Context& ctx) const override { return ctx.onDevice(); }
  bool compressible(const CodecComm& comm) const override { return lowRank_ && !tooSmall(comm); }
  void streamCompressed(CodecComm& comm, const float* g, float* x, RedOp op, device::Context& ctx,
                        void* stream, const std::function<void()>& stamp,
                        CodecCall& call) override {
    const int ranks = comm.size();
    prepare(g, x, ranks, ctx);
    const size_t r = rank_;
    float* p = static_cast<float*>(callScratch(ctx, kPSlot, pCount_ * sizeof(float)));
    float* q = stateData(q_, ctx);
    auto meanOnStream = [&](float* buf, size_t n) {
      stamp();
      if (ranks > 1)
        comm.enqueueOnStream(
            codecRequest(CollKind::kAllReduce, buf, buf, n, DataType::kFloat32, RedOp::kAvg),
            stream);
      stamp();
    };
    ctx.matMulPanels(x, count_, n_, m_, q, r, p);  // P = M Q
    meanOnStream(p, pCount_);
    ctx.orthonormalize(p, n_, r);
    ctx.matTMulPanels(x, count_, n_, m_, p, r, q);  // Q = M^T P^
    meanOnStream(q, q_.size());
    const float scale = op == RedOp::kSum ? float(ranks) : 1.0f;
    ctx.lowRankApply(p, q, n_, m_, r, count_, x, scale, x,
                     errorFeedback_ ? stateData(residual_, ctx) : nullptr);
    call.wireBytes = (pCount_ + q_.size()) * sizeof(float) * (ranks - 1);
    call.denseBytes = count_ * sizeof(float) * (ranks - 1);
  }

 private:
  static constexpr int kPSlot = 0;  // callScratch: P

  // One dense all-reduce of buf (count floats) in place, counted in call. On a device call buf
  // is device memory and the collective runs in the same context, after the kernels before it.
  void dense(CodecComm& comm, float* buf, size_t count, RedOp op, CodecCall& call) {
    runChunked(comm, buf, buf, count, op, *chunk_, call);  // chunk_ is the dense codec
  }

  // Algorithm 1 in the call's context (P in the handle's scratch, Q the state where the call
  // runs; device/linalg.h's kernels).
  void lowRank(CodecComm& comm, float* x, RedOp op, CodecCall& call, Clock::time_point t0,
               device::Context& ctx) {
    const size_t r = rank_;
    float* p = static_cast<float*>(callScratch(ctx, kPSlot, pCount_ * sizeof(float)));
    float* q = stateData(q_, ctx);
    ctx.matMulPanels(x, count_, n_, m_, q, r, p);  // P = M Q
    call.encodeSeconds += secondsSince(t0);
    CodecCall inner;  // the two all-reduces' own figures
    inner.call = calls_;
    dense(comm, p, pCount_, RedOp::kAvg, inner);
    t0 = Clock::now();
    ctx.orthonormalize(p, n_, r);
    ctx.matTMulPanels(x, count_, n_, m_, p, r, q);  // Q = M^T P^
    ctx.addSquaredNorm(q, q_.size(), &call.norms.sentSq);
    call.encodeSeconds += secondsSince(t0);
    dense(comm, q, q_.size(), RedOp::kAvg, inner);
    t0 = Clock::now();
    const float scale = op == RedOp::kSum ? float(comm.size()) : 1.0f;
    ctx.lowRankApply(p, q, n_, m_, r, count_, x, scale, x,
               errorFeedback_ ? stateData(residual_, ctx) : nullptr);
    ctx.wait("PowerSGD's P Q^T on the GPU");
    call.decodeSeconds += secondsSince(t0);
    call.wireBytes = inner.wireBytes;
    call.denseBytes = static_cast<uint64_t>(
        std::llround(double(inner.denseBytes) * double(count_) / double(pCount_ + q_.size())));
    call.combineSeconds = inner.combineSeconds;
  }

  size_t rank_ = 0, n_ = 0, m_ = 0;
  bool lowRank_ = false;
  std::vector<float> q_;  // m x r, column panels: the warm start, agreed on every rank
  size_t pCount_ = 0;     // P: n x r, column panels, in callScratch
};


std::unique_ptr<CodecHandle> makePowerSgd(const CodecSpec& spec, size_t count, DataType dtype) {
  return std::make_unique<PowerSgdHandle>(spec, count, dtype);
}

}  // namespace

SQZ_CODEC_METHODS(powersgd) {
  addCodecMethod({"powersgd", kPowerSgdId, "rank,cols,seed",
      "low-rank P Q^T by power iteration", true, makePowerSgd});
}

}  // namespace squeeze
