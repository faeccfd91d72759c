// PayoffGuard (see payoff_guard.h): the decision and its probe schedule.
#include "compress/payoff_guard.h"

#include <algorithm>

namespace squeeze {
namespace {

constexpr uint64_t kWarmupCalls = 4;  // compressed, dense, compressed, dense
constexpr uint64_t kFirstInterval = 64;
constexpr uint64_t kMaxInterval = 4096;
constexpr uint64_t kSyncEvery = 16;

}  // namespace

void PayoffGuard::Average::add(double v) {
  // The first figure of a mode is replaced by the second (warm-up), then an even average.
  value = samples <= 1 ? v : 0.5 * value + 0.5 * v;
  ++samples;
}

void PayoffGuard::record(const Sample& s, double tensorBytes) {
  if (!(tensorBytes > 0)) return;
  // A probe of the mode not chosen replaces that mode's figures: the last ones are a probe
  // interval old, and the probe is all there is to notice a change with.
  const bool probe = calls_ > kWarmupCalls && s.compressed != lastDecision_;
  auto put = [&](Average& a, double v) {
    if (probe) a.samples = 0;
    a.add(v);
  };
  if (s.compressed) {
    put(codec_, s.codecSeconds / tensorBytes);
    put(linkCompressed_, std::max(0.0, s.seconds - s.codecSeconds) / tensorBytes);
  } else {
    put(linkDense_, s.seconds / tensorBytes);
  }
}

bool PayoffGuard::syncs() const {
  return calls_ <= kSyncEvery || (lastProbe_ && calls_ == lastProbe_ + 1) ||
         calls_ % kSyncEvery == 0;
}

bool PayoffGuard::pays() const {
  if (linkDense_.samples == 0 || codec_.samples == 0) return true;  // not measured yet
  return codec_.value + linkCompressed_.value < linkDense_.value;
}

PayoffGuard::Reason PayoffGuard::lastReason() const {
  if (calls_ <= kWarmupCalls) return Reason::kWarmup;
  return lastProbe_ == calls_ - 1 ? Reason::kProbe : Reason::kDecision;
}

bool PayoffGuard::timesLastCall() const {
  const uint64_t call = calls_ - 1;
  return call <= kSyncEvery || lastReason() == Reason::kProbe ||
         call % kSyncEvery >= kSyncEvery - 4;
}

bool PayoffGuard::nextCompresses() {
  const uint64_t call = calls_++;
  bool compress;
  if (call < kWarmupCalls) {
    compress = call % 2 == 0;
  } else {
    const bool decision = pays();
    if (call == kWarmupCalls || decision != lastDecision_) {  // a new decision: probe soon
      interval_ = kFirstInterval;
      nextProbe_ = call + interval_;
    }
    lastDecision_ = decision;
    compress = decision;
    if (call == nextProbe_) {  // re-measure the other mode; the decision held: wait longer
      compress = !decision;
      lastProbe_ = call;
      interval_ = std::min(interval_ * 2, kMaxInterval);
      nextProbe_ = call + interval_;
    }
  }
  if (!compress) ++denseCalls_;
  return compress;
}

}  // namespace squeeze
