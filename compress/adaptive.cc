// The adaptive methods: `gravac` (GraVAC, gravac.h) and `accordion` (Accordion, accordion.h)
// around a base sparsifier whose strength has a knob (topk, randk, dgc: the fraction of values
// sent, 1/CF). The base method's handle does the compression, error feedback and state as it
// always does; the policy turns its CF between calls (CodecHandle's adapt step, handle.h).
//
//   gravac:base=topk,cf_min=10,cf_max=1000,step=2,window=10,eps=0.7,omega=0.01
//   accordion:base=topk,cf_low=10,cf_high=1000,interval=100,eta=0.5
// (the defaults), plus any key of the base ("sample=1" for topk, "momentum=0.9" for dgc); ratio
// is the policy's to set and is refused.
//
// GraVAC's probe (its figures): the compression gains of this call's x = g + e at the pair of CFs
// (lower, upper = lower * c_s), multi-level as the seed's "MTL": g_min = C(x, lower) and then
// g_c = C(g_min, c_s), the second selection over the k values of the first, not over x again.
// C is the base's rule: the largest magnitudes for topk and dgc; for randk, the elements whose
// hash of (seed, call, index) falls below 1/CF (g_c's set is then inside g_min's, as MTL's is).
// The probe reads at most kProbeValues (2^17) values: a tensor larger than that is probed on
// every stride-th value, the same elements on every rank, as DGC estimates its threshold from a
// sample; summed over the ranks, even CF 1000 keeps hundreds of sampled values in its estimate,
// and the probe costs about a millisecond whatever the tensor (a probe of every value of a 1M
// tensor cost 12 ms a call). The handle takes the sample where the tensor is (one strided copy
// from the GPU on a device call), so a device call moves 2^17 floats to the host, not the tensor.
// Accordion's norm is the handle's SquaredNorm kernel, on the GPU for device calls.
// Figures: GraVAC's are |x|^2, |g_min|^2, |g_c|^2 of what was probed and its step throughputs,
// sums that each rank adds up over its calls and the ranks sum once per window, at its end (delta
// is a ratio of sums, the seed's E[|C(x)|^2] / E[|x|^2]; gravac.h). Accordion's norm of a call is
// the root of the ranks' summed |g|^2, so its figure is exchanged on every call.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "base/error.h"
#include "compress/accordion.h"
#include "compress/codecs.h"
#include "compress/gravac.h"
#include "compress/topk.h"
#include "device/quantize.h"

namespace squeeze {
namespace {

// gravac's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kGravacId = 12;
// accordion's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kAccordionId = 13;

constexpr size_t kProbeValues = size_t{1} << 17;

enum class Selection { kMagnitude, kRandom };

// |x|^2, |C(x, lower)|^2 and |C(C(x, lower), step)|^2 over the sample x[j * stride], j < m.
void probeGains(const float* sample, size_t m, size_t stride, double lower, double step,
                Selection sel, uint64_t seed, uint64_t call, double out[3]) {
  std::vector<float> sq(m);
  double total = 0;
  for (size_t j = 0; j < m; ++j) {
    sq[j] = sample[j] * sample[j];
    total += sq[j];
  }
  double sumMin = 0, sumC = 0;
  if (sel == Selection::kMagnitude) {
    const size_t k1 = keepCount(1 / lower, m);
    std::nth_element(sq.begin(), sq.begin() + (k1 ? k1 - 1 : 0), sq.end(), std::greater<>());
    const size_t k2 = keepCount(1 / step, k1);  // MTL: within g_min's k1 values
    std::nth_element(sq.begin(), sq.begin() + (k2 ? k2 - 1 : 0), sq.begin() + k1,
                     std::greater<>());
    for (size_t j = 0; j < k1; ++j) (j < k2 ? sumC : sumMin) += sq[j];
    sumMin += sumC;
  } else {
    const double keepMin = 1 / lower, keepC = 1 / (lower * step);
    for (size_t j = 0; j < m; ++j) {
      const double u =
          double(device::mix64(seed ^ device::mix64(call ^ device::mix64(j * stride)))) * 0x1p-64;
      if (u < keepMin) sumMin += sq[j];
      if (u < keepC) sumC += sq[j];
    }
  }
  out[0] = total;
  out[1] = sumMin;
  out[2] = sumC;
}

class GravacAdapter final : public AdaptivePolicy {
 public:
  GravacAdapter(const GravacParams& p, Selection sel, uint64_t seed)
      : policy_(p), step_(p.step), sel_(sel), seed_(seed) {}
  size_t figureCount() const override { return policy_.figureCount(); }
  size_t sampleStride(size_t n) const override {
    return n > kProbeValues ? (n + kProbeValues - 1) / kProbeValues : 1;
  }
  void measure(double, const float* sample, size_t m, size_t stride, uint64_t call,
               double stepSeconds) override {
    double gains[3];
    probeGains(sample, m, stride, policy_.lower(), step_, sel_, seed_, call, gains);
    policy_.record(gains[0], gains[1], gains[2], stepSeconds);
  }
  bool exchangesNow() const override { return policy_.endsWindow(); }
  void figures(double* out) const override {
    std::copy(policy_.pending().begin(), policy_.pending().end(), out);
  }
  double decide(const double* summed, int) override { return policy_.step(summed); }
  AdaptivePhase phase() const override {
    return policy_.phase() == GravacPolicy::Phase::kSettled ? AdaptivePhase::kSettled
                                                            : AdaptivePhase::kExploring;
  }
  double cfMin() const override { return policy_.lower(); }
  std::vector<char> save() const override { return policy_.save(); }
  void load(const char* data, size_t bytes) override { policy_.load(data, bytes); }

 private:
  GravacPolicy policy_;
  double step_;
  Selection sel_;
  uint64_t seed_;
};

class AccordionAdapter final : public AdaptivePolicy {
 public:
  explicit AccordionAdapter(const AccordionParams& p) : policy_(p) {}
  size_t figureCount() const override { return 1; }
  bool needsGradientNorm() const override { return true; }
  void measure(double gradientSq, const float*, size_t, size_t, uint64_t, double) override {
    gradientSq_ = gradientSq;
  }
  bool exchangesNow() const override { return true; }  // a call's norm is of the ranks' sum
  void figures(double* out) const override { out[0] = gradientSq_; }
  double decide(const double* summed, int nranks) override {
    SQZ_ENFORCE(summed, "Accordion decided a call without the ranks' norms");
    return policy_.step(std::sqrt(summed[0] / nranks));
  }
  AdaptivePhase phase() const override {
    return policy_.critical() ? AdaptivePhase::kCritical : AdaptivePhase::kStable;
  }
  std::vector<char> save() const override { return policy_.save(); }
  void load(const char* data, size_t bytes) override { policy_.load(data, bytes); }

 private:
  AccordionPolicy policy_;
  double gradientSq_ = 0;  // this call's, on this rank
};

// Keys the adaptive methods read themselves; the rest go to the base.
const std::vector<std::string> kGravacKeys = {"cf_min", "cf_max", "step", "window", "eps",
                                              "omega"};
const std::vector<std::string> kAccordionKeys = {"cf_low", "cf_high", "interval", "eta"};

// The base's handle, checked to have a CF knob; sel: how the base selects (for GraVAC's probe).
std::unique_ptr<CodecHandle> makeBase(const CodecSpec& spec, const std::vector<std::string>& own,
                                      size_t count, DataType dtype, Selection& sel,
                                      double firstCf) {
  const std::string base = spec.base.value_or("topk");
  if (base != "topk" && base != "randk" && base != "dgc")
    raise(ErrorCode::kInvalidArgument, "codec ", spec.method, ": base = '", base, "' has no "
          "compression-factor knob; use base=topk, base=randk or base=dgc (a quantizer's wire "
          "format here has one or two widths, not a CF range).");
  if (spec.ratio)
    raise(ErrorCode::kInvalidArgument, "codec ", spec.method, " sets the ", base, " ratio "
          "itself (1/CF); remove ratio and give the CF range instead.");
  sel = base == "randk" ? Selection::kRandom : Selection::kMagnitude;
  std::vector<std::string> drop = own;
  drop.push_back("auto_dense");  // the outer spec's, read by the handle from adopt on
  auto handle = createCodecHandle(spec.without(base, drop), count, dtype);
  SQZ_ENFORCE(handle->setDensity(1 / firstCf), "base ", base, " without a density knob");
  return handle;
}

std::unique_ptr<CodecHandle> makeGravac(const CodecSpec& spec, size_t count, DataType dtype) {
  GravacParams p;
  p.cfMin = spec.get("cf_min", 10, 1, 1e9);
  p.step = spec.get("step", 2, 1, 1e9);
  if (!(p.step > 1))
    raise(ErrorCode::kInvalidArgument, "codec gravac: step = ", p.step, " must be above 1 (the "
          "factor between candidate CFs, e.g. step=2).");
  p.cfMax = spec.get("cf_max", 1000, p.cfMin * p.step, 1e9);
  p.window = static_cast<uint64_t>(spec.getWhole("window", 10, 1, 1e12));
  p.eps = spec.get("eps", 0.7, 0, 1);
  p.omega = spec.get("omega", 0.01, 0, 1);
  Selection sel;
  auto handle = makeBase(spec, kGravacKeys, count, dtype, sel, p.cfMin);
  handle->adopt(spec, std::make_unique<GravacAdapter>(
                          p, sel, static_cast<uint64_t>(spec.seed.value_or(0))));
  return handle;
}

std::unique_ptr<CodecHandle> makeAccordion(const CodecSpec& spec, size_t count, DataType dtype) {
  AccordionParams p;
  p.cfLow = spec.get("cf_low", 10, 1, 1e9);
  p.cfHigh = spec.get("cf_high", 1000, p.cfLow, 1e9);
  p.interval = static_cast<uint64_t>(spec.getWhole("interval", 100, 1, 1e12));
  p.eta = spec.get("eta", 0.5, 0, 1e9);
  Selection sel;
  auto handle = makeBase(spec, kAccordionKeys, count, dtype, sel, p.cfLow);
  handle->adopt(spec, std::make_unique<AccordionAdapter>(p));
  return handle;
}

}  // namespace

SQZ_CODEC_METHODS(adaptive) {
  addCodecMethod({"gravac", kGravacId, "base,cf_min,cf_max,step,window,eps,omega",
      "GraVAC: the CF of a base sparsifier chosen from its compression gain and step throughput",
      true, makeGravac});
  addCodecMethod({"accordion", kAccordionId, "base,cf_low,cf_high,interval,eta",
      "Accordion: a base sparsifier's low CF in critical regimes (fast-changing gradient norm), "
      "high CF otherwise",
      true, makeAccordion});
}

}  // namespace squeeze
