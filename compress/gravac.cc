// GraVAC's state machine (see gravac.h): rules 1-4 and the saved form of its fields.
#include "compress/gravac.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "compress/state_bytes.h"

namespace squeeze {
namespace {

constexpr uint32_t kGravacMagicV1 = 0x43565247;  // "GRVC": the summed figures of every call
constexpr uint32_t kGravacMagic = 0x32565247;    // "GRV2": and this rank's pending figures

}  // namespace

GravacPolicy::GravacPolicy(const GravacParams& p) : p_(p), windowCf_(p.cfMin) {
  SQZ_ENFORCE(p_.cfMin >= 1 && p_.cfMax >= p_.cfMin * p_.step && p_.step > 1 && p_.window >= 1,
              "GravacParams unchecked");
  // cf_min * c_s^j <= cf_max, with a relative slack so 10 * 10^2 counts as 1000.
  size_t n = 1;
  while (p_.cfMin * std::pow(p_.step, double(n)) <= p_.cfMax * (1 + 1e-9)) ++n;
  table_.resize(n);
  pending_.assign(figureCount(), 0.0);
}

double GravacPolicy::candidate(size_t j) const { return p_.cfMin * std::pow(p_.step, double(j)); }

double GravacPolicy::lower() const {
  if (phase_ == Phase::kExploring) return candidate(level_);
  return std::max(1.0, candidate(chosen_) / p_.step);
}

double GravacPolicy::compressionThroughput(size_t j) const {
  const Measured& m = table_[j];
  if (m.steps == 0 || m.gains == 0) return 0;
  return (m.throughputSum / double(m.steps)) * (m.gainSum / double(m.gains));
}

size_t GravacPolicy::chooseSaturated() const {
  double best = 0;
  for (size_t j = 0; j < table_.size(); ++j) best = std::max(best, compressionThroughput(j));
  if (!(best > 0)) return level_ + 1;  // nothing measured: the last upper CF
  for (size_t j = 0; j < table_.size(); ++j)
    if (compressionThroughput(j) >= (1 - p_.omega) * best) return j;
  return table_.size() - 1;  // not reached: the best itself qualifies
}

long GravacPolicy::indexOf(double cf) const {
  for (size_t j = 0; j < table_.size(); ++j)
    if (std::fabs(candidate(j) - cf) <= 1e-9 * cf) return long(j);
  return -1;
}

void GravacPolicy::record(double inputSq, double minSq, double cSq, double stepSeconds) {
  pending_[0] += inputSq;
  pending_[1] += minSq;
  pending_[2] += cSq;
  // Rule 2, the step side: the previous call's step ran at lastCf_.
  if (stepSeconds > 0)
    if (long j = indexOf(lastCf_); j >= 0) {
      pending_[3 + 2 * j] += 1.0 / stepSeconds;
      pending_[4 + 2 * j] += 1;
    }
}

double GravacPolicy::step(const double* summed) {
  if (summed) {
    windowInputSq_ += summed[0];
    windowMinSq_ += summed[1];
    windowCSq_ += summed[2];
    for (size_t j = 0; j < table_.size(); ++j) {
      table_[j].throughputSum += summed[3 + 2 * j];
      table_[j].steps += static_cast<uint64_t>(summed[4 + 2 * j]);  // a sum of whole counts
    }
    std::fill(pending_.begin(), pending_.end(), 0.0);
  }
  const double cf = windowCf_;
  lastCf_ = cf;
  if (++windowCalls_ < p_.window) return cf;
  SQZ_ENFORCE(summed, "GraVAC's window ended on a call that did not exchange its figures");

  // The window's end: its expected gains, then rules 1-4.
  const double deltaMin = windowInputSq_ > 0 ? windowMinSq_ / windowInputSq_ : 1;
  const double deltaC = windowInputSq_ > 0 ? windowCSq_ / windowInputSq_ : 1;
  windowCalls_ = 0;
  windowInputSq_ = windowMinSq_ = windowCSq_ = 0;
  const double lo = lower(), hi = upper();
  // Rule 2, the gain side.
  if (long j = indexOf(cf); j >= 0) {
    table_[j].gainSum += cf == hi ? deltaC : deltaMin;
    table_[j].gains++;
  }
  // Rule 1.
  double next = 1;
  if (deltaC >= p_.eps)
    next = hi;
  else if (deltaMin >= p_.eps)
    next = lo;
  // Rules 3 and 4.
  if (phase_ == Phase::kExploring) {
    const bool saturated = deltaMin > 0 && p_.omega >= std::fabs((deltaMin - deltaC) / deltaMin);
    if (saturated) {
      if (level_ + 2 < table_.size()) {
        ++level_;  // the new pair (upper, upper * c_s) fits the space
      } else if (table_[level_ + 1].steps > 0 || next != hi) {
        chosen_ = static_cast<uint32_t>(chooseSaturated());
        phase_ = Phase::kSettled;
        next = candidate(chosen_);
      }  // else the last candidate runs for a window first
    }
  }
  windowCf_ = next <= 1 ? 1 : next;
  return cf;
}

std::vector<char> GravacPolicy::save() const {
  std::vector<char> out;
  StateWriter w{out};
  w.pod(kGravacMagic);
  w.pod(static_cast<uint32_t>(phase_));
  w.pod(level_);
  w.pod(chosen_);
  w.pod(windowCalls_);
  w.pod(windowInputSq_);
  w.pod(windowMinSq_);
  w.pod(windowCSq_);
  w.pod(windowCf_);
  w.pod(lastCf_);
  w.pod(static_cast<uint64_t>(table_.size()));
  for (const Measured& m : table_) {
    w.pod(m.throughputSum);
    w.pod(m.gainSum);
    w.pod(m.steps);
    w.pod(m.gains);
  }
  for (double f : pending_) w.pod(f);
  return out;
}

void GravacPolicy::load(const char* data, size_t bytes) {
  StateReader r{data, bytes};
  GravacPolicy next = *this;
  const uint32_t magic = r.pod<uint32_t>();
  if (magic != kGravacMagic && magic != kGravacMagicV1)
    raise(ErrorCode::kInvalidArgument, "codec state: the gravac section is not GraVAC's; pass "
          "the whole buffer sqzCodecSaveState wrote.");
  const uint32_t phase = r.pod<uint32_t>();
  next.level_ = r.pod<uint32_t>();
  next.chosen_ = r.pod<uint32_t>();
  next.windowCalls_ = r.pod<uint64_t>();
  next.windowInputSq_ = r.pod<double>();
  next.windowMinSq_ = r.pod<double>();
  next.windowCSq_ = r.pod<double>();
  next.windowCf_ = r.pod<double>();
  next.lastCf_ = r.pod<double>();
  const uint64_t n = r.pod<uint64_t>();
  if (n != table_.size() || (phase != 1 && phase != 2) || next.level_ + 1 >= n ||
      next.chosen_ >= n || next.windowCalls_ >= p_.window ||
      !(next.windowCf_ == 1 || next.indexOf(next.windowCf_) >= 0 ||
        next.windowCf_ == std::max(1.0, candidate(next.chosen_) / p_.step)))
    raise(ErrorCode::kInvalidArgument, "codec state: the gravac section (", n, " candidates, "
          "phase ", phase, ", level ", next.level_, ") does not fit this codec's ", table_.size(),
          " candidates and window ", p_.window, "; load it into a codec created from the same "
          "spec.");
  next.phase_ = static_cast<Phase>(phase);
  for (Measured& m : next.table_) {
    m.throughputSum = r.pod<double>();
    m.gainSum = r.pod<double>();
    m.steps = r.pod<uint64_t>();
    m.gains = r.pod<uint64_t>();
  }
  // Before pending existed every call's figures were summed at once: nothing was pending (and
  // its steps counted calls, not the ranks' steps: the means it gives hold).
  std::fill(next.pending_.begin(), next.pending_.end(), 0.0);
  if (magic == kGravacMagic)
    for (double& f : next.pending_) f = r.pod<double>();
  if (r.left != 0)
    raise(ErrorCode::kInvalidArgument, "codec state: the gravac section has ", r.left,
          " trailing bytes.");
  *this = next;
}

}  // namespace squeeze
