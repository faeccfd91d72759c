// PayoffGuard: "compress only when it pays" (codec key auto_dense, on by default for every lossy
// codec; SQZ_CODEC_AUTO_DENSE sets the default). A compressed call costs codec work (encode,
// combine, decode) and saves link time (fewer bytes); on a fast link the work costs more than it
// saves and the call is faster dense. The guard keeps, per codec handle, what its calls cost
// (seconds per byte of the tensor, so the figures hold whatever the size):
//   linkDense      a dense call's seconds (all link: no codec work),
//   linkCompressed a compressed call's seconds minus its codec seconds,
//   codec          a compressed call's codec seconds,
// and runs a call compressed iff codec + linkCompressed < linkDense: the codec's time is less than
// the link time it saves. Each rank times its own calls; a small all-reduce (CodecHandle)
// averages them over the ranks, so every rank holds the same figures, takes the same decision,
// and the schedules match. That exchange happens only on the calls syncs() names: each of the
// first 17 (the warm-up's figures, and early decisions taken from more than one call of each
// mode, so one slow warm-up call does not decide for long), the call after a probe, and every
// 16th call; a sync brings the mean of each mode's calls since the last one. An adaptive method's
// exchanges (GraVAC's once per window, Accordion's every call) bring the guard's figures too.
// Measuring both sides: the first four calls alternate compressed, dense, compressed, dense (a
// mode's first figure is replaced by its second: first calls pay for allocations and connection
// warm-up); after that each figure is an even moving average of the calls of its mode. The mode
// not chosen is re-measured by one probe call after 64 calls, then after twice as many each time
// the decision stays the same (up to every 4096 calls), back to 64 when it flips; a probe's
// figures replace that mode's old ones. A link that slows down (or a codec that speeds up) is
// noticed at the next probe, for at most 1/64 of the calls spent on the slower mode.
#pragma once

#include <cstdint>

namespace squeeze {

class PayoffGuard {
 public:
  // What one call cost, averaged over the ranks.
  struct Sample {
    bool compressed = false;
    double seconds = 0;       // the call's wall time
    double codecSeconds = 0;  // of which encode + combine + decode
  };

  // Whether the next call (the one nextCompresses decides) exchanges figures first.
  bool syncs() const;
  // The figures of the calls since the last sync, one sample per mode that ran; tensorBytes is
  // the tensor's size (count * 4).
  void record(const Sample& s, double tensorBytes);
  // Whether the next call compresses. Advances the call counter: call once per call.
  bool nextCompresses();
  // The decision from the figures alone (no probes, no counter); true until both modes have
  // been measured.
  bool pays() const;
  // Why the call nextCompresses last decided runs as it does: one of the first calls, which
  // alternate to measure both modes; the figures' decision; or a probe of the other mode.
  enum class Reason { kWarmup, kDecision, kProbe };
  Reason lastReason() const;
  // Whether the call nextCompresses last decided is one whose time the next figures need where
  // timing costs something (GPU events, on the caller's stream): each of the first 17, a probe,
  // and the last 4 before each sync. A mean over those is a mean over the mode's calls.
  bool timesLastCall() const;

  // Seconds per tensor byte; 0 until measured.
  double linkDensePerByte() const { return linkDense_.value; }
  double linkCompressedPerByte() const { return linkCompressed_.value; }
  double codecPerByte() const { return codec_.value; }
  uint64_t denseCalls() const { return denseCalls_; }  // calls it sent dense (probes included)

 private:
  struct Average {
    double value = 0;
    int samples = 0;
    void add(double v);
  };

  Average linkDense_, linkCompressed_, codec_;
  uint64_t calls_ = 0;       // decisions taken
  uint64_t nextProbe_ = 0;   // the call that runs the mode not chosen
  uint64_t interval_ = 0;    // calls between probes
  uint64_t lastProbe_ = 0;   // the last probe call (0: none yet)
  bool lastDecision_ = true;
  uint64_t denseCalls_ = 0;
};

}  // namespace squeeze
