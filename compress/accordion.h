// Accordion's critical-regime detection (Agarwal et al., "Accordion: Adaptive Gradient
// Communication via Critical Learning Regime Identification"; the comparison seed 001 makes with
// GraVAC), as a state machine over the gradient norm the ranks agree on. The codec method
// `accordion` (adaptive.cc) feeds it; tests script its inputs.
//
// Accordion's rule: training has critical regimes, where the gradient norm changes fast and
// compressing hard costs accuracy, and stable ones. Every `interval` calls it compares the mean
// gradient norm of the interval just ended, |g|_curr, with the previous interval's, |g|_old:
//   |(|g|_old - |g|_curr)| / |g|_old >= eta  -> critical: the low CF (cf_low) for the next interval
//   otherwise                                -> stable:   the high CF (cf_high)
// The first interval runs at cf_low (training starts in a critical regime) and so does the
// second (there is no old interval to compare the first with).
// The norm of a call is sqrt(sum over ranks of |g_r|^2 / ranks), all-reduced, so every rank
// switches at the same call. g is the gradient as the caller passes it, before error feedback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace squeeze {

struct AccordionParams {
  double cfLow = 10, cfHigh = 1000;
  uint64_t interval = 100;
  double eta = 0.5;
};

class AccordionPolicy {
 public:
  explicit AccordionPolicy(const AccordionParams& p) : p_(p) {}

  // One call with its gradient norm; returns the CF the call uses.
  double step(double gradNorm);
  bool critical() const { return critical_; }
  double cf() const { return critical_ ? p_.cfLow : p_.cfHigh; }

  std::vector<char> save() const;
  void load(const char* data, size_t bytes);  // checks, and changes nothing on error

 private:
  AccordionParams p_;
  bool critical_ = true;
  uint64_t calls_ = 0;      // in the current interval
  double normSum_ = 0;      // of the current interval
  double previousMean_ = 0; // the last finished interval's mean norm; 0: none yet
};

}  // namespace squeeze
