// GraVAC's adaptive compression (seed 001, Tyagi and Swany) as a state machine over figures the
// ranks agree on: which compression factor (CF: values per value sent) each call uses. The codec
// method `gravac` (adaptive.cc) feeds it; it never sees a tensor, so tests script its inputs.
//
// Parameters (the seed's): the CF exploration space [cf_min, cf_max], window w, compression step
// c_s, gain threshold eps, gain/throughput saturation threshold omega. The candidates are
// cf_min * c_s^j for j = 0, 1, ... while <= cf_max ("CFs evaluated in the range [cf_min, cf_max]
// in steps of c_s").
//
// Each call brings, from this call's gradient g_o (with its error feedback):
//   delta_min = |g_min|^2 / |g_o|^2,  g_min = C(g_o, lower)           (lower: the current cf_min)
//   delta_c   = |g_c|^2 / |g_o|^2,    g_c = C(g_min, c_s)             (multi-level: CF lower*c_s)
// and the seconds of the previous call's training step (start of that call to start of this one),
// T_system = 1 / seconds. The seed's rules, in order:
//   1. which gradient is aggregated:  delta_c >= eps -> g_c (CF lower*c_s);  else delta_min >=
//      eps -> g_min (CF lower);  else g_o (dense, CF 1): "compression scales down according to eps".
//   2. T_compression = T_system * compression gain, recorded per CF used (the gain of the CF used:
//      delta_c or delta_min): the mean T_system of the steps run at that CF times its mean gain.
//   3. at the end of each window of w calls at the same lower CF, with the window's mean deltas:
//      IF omega >= |(delta_min - delta_c) / delta_min| THEN scale up: lower = lower * c_s
//      ("compression scales up by increasing cf_min based on c_s and omega"); otherwise lower
//      stays and the next window tries again (the gain saturates later in training, as gradients
//      shrink). The scale-up that would take the upper CF past cf_max ends the exploration: every
//      candidate has been evaluated.
//   4. "Once all candidate CFs are evaluated, choose one where T_compression saturates": the
//      smallest candidate whose T_compression is within omega of the largest measured (a higher
//      CF buys less than omega). From then on (settled) that CF is the upper of the pair rule 1
//      applies to (lower = chosen / c_s, at least 1), so eps still scales each call down.
// Where the seed is silent, these are our readings: the window mean of the deltas for rule 3;
// T_system from the interval between calls (the training step, compute included, is what
// compression speeds up); omega for the saturation of rule 4 as for the gain's in rule 3.
// Every input is all-reduced before the policy sees it (delta = sum over ranks of |C(g)|^2 /
// sum of |g|^2, seconds the ranks' mean), so every rank runs the same machine to the same CFs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace squeeze {

struct GravacParams {
  double cfMin = 10, cfMax = 1000, step = 2;
  uint64_t window = 10;
  double eps = 0.7, omega = 0.01;
};

class GravacPolicy {
 public:
  enum class Phase : uint32_t { kExploring = 1, kSettled = 2 };
  struct Decision {
    double cf = 1;    // 1: dense (g_o)
    double gain = 1;  // the delta of the gradient aggregated
  };

  explicit GravacPolicy(const GravacParams& p);

  // The CFs the next call's gradient is probed at: lower (cf_min) and upper (lower * c_s).
  double lower() const;
  double upper() const { return lower() * p_.step; }
  // One call (rules 1-4). stepSeconds: the previous call's step (<= 0: not known, e.g. the first
  // call or the first after a load).
  Decision step(double deltaMin, double deltaC, double stepSeconds);

  Phase phase() const { return phase_; }
  double lastCf() const { return lastCf_; }
  // The candidates and their T_compression (0 where not measured), for stats and docs.
  size_t candidates() const { return table_.size(); }
  double candidate(size_t j) const;
  double compressionThroughput(size_t j) const;

  // Every field, for the codec's saved state; load checks them and changes nothing on error.
  std::vector<char> save() const;
  void load(const char* data, size_t bytes);

 private:
  struct Measured {
    double throughputSum = 0, gainSum = 0;
    uint64_t steps = 0, gains = 0;
  };
  size_t chooseSaturated() const;

  GravacParams p_;
  Phase phase_ = Phase::kExploring;
  // lower = cf_min * c_s^level while exploring; settled, lower = candidate(chosen) / c_s.
  uint32_t level_ = 0;
  uint32_t chosen_ = 0;
  uint64_t windowCalls_ = 0;
  double windowDeltaMin_ = 0, windowDeltaC_ = 0;
  std::vector<Measured> table_;  // per candidate j
  double lastCf_ = 1;            // the CF the previous call used (its step's T_system is its)
};

}  // namespace squeeze
