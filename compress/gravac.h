// GraVAC's adaptive compression (seed 001, Tyagi and Swany) as a state machine over figures the
// ranks agree on: which compression factor (CF: values per value sent) each call uses. The codec
// method `gravac` (adaptive.cc) feeds it; it never sees a tensor, so tests script its inputs.
//
// Parameters (the seed's): the CF exploration space [cf_min, cf_max], window w, compression step
// c_s, gain threshold eps, gain/throughput saturation threshold omega. The candidates are
// cf_min * c_s^j for j = 0, 1, ... while <= cf_max ("CFs evaluated in the range [cf_min, cf_max]
// in steps of c_s").
//
// Each call brings the squared norms of this call's gradient x = g_o (with its error feedback)
// and of its compressions at the current pair of CFs (lower = the current cf_min, upper = lower *
// c_s), multi-level as the seed's MTL: g_min = C(x, lower), g_c = C(g_min, c_s) (CF lower*c_s);
// and the seconds of the previous call's training step (start of that call to start of this
// one), T_system = 1 / seconds. Over a window of w calls the compression gains are the seed's
// expectations, delta = E[|C(x)|^2] / E[|x|^2], over the window's calls and the ranks:
//   delta_min = sum |g_min|^2 / sum |x|^2,   delta_c = sum |g_c|^2 / sum |x|^2.
// The seed reads the figures only at a window's end, and they are sums, so a rank adds its calls'
// figures up locally (record) and the ranks sum them once per window, at its end (the codec's
// one small all-reduce per window; handle.h's adapt step). T_system is kept the same way: per
// candidate CF, the sum of 1/seconds over the steps run at it and their count, on every rank; a
// candidate's T_system is their ratio, the mean throughput of its steps over the steps and ranks.
// Every call of a window runs at the CF chosen at the end of the window before (the first window
// at cf_min). At the end of each window, the seed's rules in order:
//   1. the CF of the next window:  delta_c >= eps -> upper (aggregate g_c);  else delta_min >=
//      eps -> lower (g_min);  else dense (g_o, CF 1): "compression scales down according to eps".
//   2. T_compression = T_system * compression gain of the CF the window ran at (delta_min for the
//      lower, delta_c for the upper; dense is not a candidate): kept per candidate CF as the mean
//      T_system of the steps run at it times the mean of its windows' gains.
//   3. IF omega >= |(delta_min - delta_c) / delta_min| THEN scale up: lower = lower * c_s
//      ("compression scales up by increasing cf_min based on c_s and omega"); otherwise the pair
//      stays and the next window tries again (the gain saturates later in training, as gradients
//      shrink).
//   4. "Once all candidate CFs are evaluated, choose one where T_compression saturates": when the
//      gain is saturated at the last pair (upper * c_s > cf_max) and the upper CF has run (or
//      rule 1 did not pick it), the CF kept is the smallest candidate whose T_compression is
//      within omega of the largest (a higher CF buys less than omega). The next window runs at it,
//      and from then on (settled) it is the upper of the pair rule 1 applies to (lower = chosen /
//      c_s, at least 1), so eps still scales the CF down.
// Where the seed is silent, these are our readings: windowed decisions (the gains are
// expectations over the window, so a window runs at one CF and its step times measure that CF);
// T_system from the interval between calls (the training step, compute included, is what
// compression speeds up); omega for the saturation of rule 4 as for the gain's in rule 3.
// Decisions read only figures summed over the ranks (step's argument) and fields every rank
// holds alike, so every rank runs the same machine to the same CFs; what a rank measured alone
// (pending) only ever enters a decision through an exchange. An exchange may also come inside a
// window (the pay-off guard's, which carries the figures along): its sums join the window's.
// Measured on real models (perf/adaptive_real.sh; perf/RESULTS.md): no rule departs from the
// seed. Real gradients are concentrated enough for eps 0.7, where sqz-train-sim's synthetic ones
// were not: the gain of x at CF 10 is about 0.75 (0.9 without the residual), so windows run
// compressed. The gain falls 10-20% with each doubling of the CF, so omega 0.01 never finds the
// pair saturated within a few hundred steps: the policy stays at (10, 20) and runs at 10, at 20
// when delta_c clears eps, and dense when the residual has pulled both under it.
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
  explicit GravacPolicy(const GravacParams& p);

  // The CFs the next call's gradient is probed at: lower (cf_min) and upper (lower * c_s).
  double lower() const;
  double upper() const { return lower() * p_.step; }
  // One call on this rank, in two parts. record: the squared norms |x|^2, |g_min|^2, |g_c|^2 of
  // its gradient as this rank measured them and this rank's previous step's seconds (<= 0: not
  // known, e.g. the first call or the first after a load), added to this rank's figures since
  // the last exchange (pending). Then step: summed is every rank's pending summed (figureCount
  // doubles) when this call exchanged them, which it must at a window's end (endsWindow), and
  // null otherwise. Returns the CF this call runs at; at a window's end, rules 1-4 choose the
  // next window's.
  void record(double inputSq, double minSq, double cSq, double stepSeconds);
  bool endsWindow() const { return windowCalls_ + 1 >= p_.window; }
  // [|x|^2, |g_min|^2, |g_c|^2, then per candidate j: sum of 1/seconds, steps]
  size_t figureCount() const { return 3 + 2 * table_.size(); }
  const std::vector<double>& pending() const { return pending_; }
  double step(const double* summed);

  Phase phase() const { return phase_; }
  double lastCf() const { return lastCf_; }
  double windowCf() const { return windowCf_; }  // the CF of the calls of the current window
  // The candidates and their T_compression (0 where not measured), for stats and docs.
  size_t candidates() const { return table_.size(); }
  double candidate(size_t j) const;
  double compressionThroughput(size_t j) const;

  // Every field, for the codec's saved state (pending too: a rank's state holds its own figures
  // since the last exchange, so each rank loads the state it saved); load checks them and
  // changes nothing on error. It also reads the form saved before pending existed.
  std::vector<char> save() const;
  void load(const char* data, size_t bytes);

 private:
  struct Measured {
    double throughputSum = 0, gainSum = 0;
    uint64_t steps = 0, gains = 0;  // steps: of every rank
  };
  size_t chooseSaturated() const;
  long indexOf(double cf) const;  // the candidate index of cf, or -1

  GravacParams p_;
  Phase phase_ = Phase::kExploring;
  // lower = cf_min * c_s^level while exploring; settled, lower = candidate(chosen) / c_s.
  uint32_t level_ = 0;
  uint32_t chosen_ = 0;
  uint64_t windowCalls_ = 0;
  // The window's figures summed over the ranks so far (from its exchanges).
  double windowInputSq_ = 0, windowMinSq_ = 0, windowCSq_ = 0;
  double windowCf_;              // the current window's CF (1: dense)
  std::vector<Measured> table_;  // per candidate j
  double lastCf_ = 1;            // the CF the previous call used (its step's T_system is its)
  std::vector<double> pending_;  // this rank's figures since the last exchange (figureCount)
};

}  // namespace squeeze
