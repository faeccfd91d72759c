// Deep Gradient Compression (Lin et al.; seed 000): top-k sparsification with the four rules
// that keep its accuracy, as a CodecHandle around the top-k chunk codec (compress/topk.h):
//   momentum correction  "For momentum, accumulate real update, not the gradients itself":
//                        u <- m u + g, v <- v + u, send the top k of v. The velocity v is this
//                        handle's error-feedback residual, so prepare computes x = v + u and
//                        clears v, and the generic error feedback (Codec::encodeFeedback) puts
//                        back into v whatever a hop of this rank did not send.
//   local clipping       "For gradient clipping, apply it before adding it to the residual":
//                        with clip > 0, g is scaled so that |g|_2 <= clip / sqrt(nranks) (DGC's
//                        N^(-1/2) rescaling of the global threshold) before it enters u.
//   momentum masking     after a call, u[i] = 0 wherever this rank sent element i in full. Exact
//                        rule: x[i] != 0 before the call and v[i] == 0 after it (every element of
//                        a rank's x goes through exactly one of its encodes, and an encode that
//                        sends i adds nothing to v[i]; one that drops i adds the partial sum,
//                        which is 0 only if the ranks' values there cancel exactly). v is already
//                        0 at those elements, so both are cleared, as in the paper.
//   sparsity warm-up     "Warm up both learning rate and sparsity": during the first `warmup`
//                        calls the density is 25%, 6.25%, 1.5625%, 0.390625% in four equal
//                        stages (stage = floor(4 call / warmup)), never below ratio; then ratio.
// Selection: topk's, sampled (DGC's threshold from a ~1% sample, then the exact top k among
// those above it; the whole chunk where they are fewer than k) by default. Payload and bound:
// topk's sparse format under id 10, min(8k, 4 count) + 8 bytes per chunk per hop, with k from
// the current call's density. The momentum u is saved and loaded with the state (the call
// counter, hence the warm-up stage, and v are saved by CodecHandle), so a reload resumes bit for
// bit.
// Device calls: u, v and the mask run on the GPU (the state's device mirror, handle.h), with the
// per-element math of the CPU loops (device/handle_kernels.h): the same bits, except that the
// clipping norm is summed in another order (so clipped calls agree to rounding only).
// Keys: ratio (default 0.001, in (0, 1]), momentum (0.9, in [0, 1]), clip (0: off), warmup (0:
// off, whole calls), sample (1; 0: a radix select: the same entries), ef (1; 0: v is cleared after
// every call, so what was not sent is dropped: momentum correction and masking without error
// feedback).
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "compress/codecs.h"
#include "compress/topk.h"
#include "device/handle_kernels.h"
#include "device/linalg.h"
#include "squeeze_config.h"

namespace squeeze {
namespace {

// dgc's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kDgcId = 10;

struct DgcParams {
  double ratio, momentum, clip;
  uint64_t warmup;
};

class DgcHandle final : public CodecHandle {
 public:
  DgcHandle(const CodecSpec& spec, size_t count, DataType dtype, std::unique_ptr<TopkCodec> topk,
            const DgcParams& p)
      : CodecHandle(spec, count, dtype, nullptr), p_(p), u_(count, 0.0f) {
    topk_ = topk.get();
    chunk_ = std::move(topk);
    // ef=0: the velocity still collects what each encode drops during the call (masking needs
    // to know what was sent), but it is cleared after every call: the unsent part is lost.
    accumulate_ = errorFeedback_;
    if (!errorFeedback_) {
      errorFeedback_ = true;
      residual_.assign(count_, 0.0f);
    }
  }

  // The density of call c: the warm-up schedule, then ratio.
  double densityAt(uint64_t c) const {
    if (c >= p_.warmup) return p_.ratio;
    const int stage = static_cast<int>(c * 4 / p_.warmup);  // 0..3
    return std::max(p_.ratio, std::pow(0.25, stage + 1));
  }

  // An adaptive method's CF: the density after warm-up; the call that has just been prepared
  // runs at it too.
  bool setDensity(double ratio) override {
    p_.ratio = ratio;
    topk_->setRatio(densityAt(calls_));
    return true;
  }

 protected:
  bool plainPrepare() const override { return false; }  // u = m u + g even on a dense call

  void prepare(const float* g, float* x, int nranks, device::Context& ctx) override {
    topk_->setRatio(densityAt(calls_));
    // The clipping factor is the context's, from |g|^2 summed where its kernels run (on a GPU a
    // fixed tree: equal to rounding, not bit for bit, so a clipped call's results differ from
    // the host's in the last bits), and it stays there.
    const double limit = p_.clip > 0 ? p_.clip / std::sqrt(double(nranks)) : 0.0;
    const float m = static_cast<float>(p_.momentum);
    ctx.dgcPrepare(g, limit, m, stateData(u_, ctx), stateData(residual_, ctx), x, nonzero(ctx),
                   count_);
  }

  void finish(float*, device::Context& ctx) override {
    // A call that ran dense (too small, or the pay-off guard's) sent v + u in full: v is 0 and
    // the momentum stays, which makes it exactly a momentum-SGD step (masking every element would
    // throw the momentum away, as DGC at density 1 would).
    if (compressedCall_)  // sent in full: masked
      ctx.dgcMask(stateData(u_, ctx), stateData(residual_, ctx), nonzero(ctx), count_);
    if (!accumulate_) clearState(residual_, ctx);
  }

  std::vector<std::pair<std::string, std::vector<float>*>> extraState() override {
    return {{"momentum", &u_}};
  }

 private:
  static constexpr int kNonzeroSlot = 0;  // callScratch: nonzero[i] = x[i] != 0 during a call

  // During a call: which elements were not 0 going in, the candidates for masking.
  uint8_t* nonzero(device::Context& ctx) {
    return static_cast<uint8_t*>(callScratch(ctx, kNonzeroSlot, count_));
  }

  DgcParams p_;
  bool accumulate_ = true;  // ef: keep the unsent velocity for the next call
  TopkCodec* topk_ = nullptr;  // chunk_, with the ratio set per call
  std::vector<float> u_;       // momentum
};

std::unique_ptr<CodecHandle> makeDgcHandle(const CodecSpec& spec, size_t count, DataType dtype) {
  DgcParams p;
  p.ratio = spec.getRatio(0.001);
  p.momentum = spec.get("momentum", 0.9, 0, 1);
  p.clip = spec.get("clip", 0, 0, 1e300);
  const double warmup = spec.getWhole("warmup", 0, 0, 1e15);
  p.warmup = static_cast<uint64_t>(warmup);
  const double sample = spec.get("sample", 1, 0, 1);
  if (sample != 0 && sample != 1)
    raise(ErrorCode::kInvalidArgument, "codec dgc: sample = ", sample,
          " must be 1 (DGC's sampled threshold first) or 0 (radix select).");
  auto topk = std::make_unique<TopkCodec>(kDgcId, p.ratio, sample == 1);
  return std::make_unique<DgcHandle>(spec, count, dtype, std::move(topk), p);
}

}  // namespace

SQZ_CODEC_METHODS(dgc) {
  addCodecMethod({"dgc", kDgcId, "ratio,momentum,clip,warmup,sample",
      "Deep Gradient Compression: top-k with momentum correction, clipping, masking, warm-up",
      true, makeDgcHandle});
}

}  // namespace squeeze
