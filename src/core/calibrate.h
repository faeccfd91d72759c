// Init-time calibration of the tuner (SQZ_TUNER_CALIBRATE=1, the default): a short, bounded
// measurement of what the cost model's terms cost on this machine and network, taken through the
// communicator's own point-to-point groups and collectives (so it prices the path real calls
// take: executor, wire headers, transport, and the other ranks sharing the cores), and agreed by
// every rank, so that all of them price alike and pick the same algorithms.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/cost_model.h"

namespace squeeze {

class Communicator;

// What the ranks' ping-pongs cover.
enum class Probe {
  kNone,       // nothing measured: only the rows are checked
  kPair,       // rank 0 and `partner` alone, the others waiting (ranks on one host: every pair
               // is alike, and the built-in rows' references were measured so)
  kRingLinks,  // every link between ring neighbours r and r+1 (ranks on several hosts): per peer,
               // the slowest link governs
};

// One measured link between two ranks: alpha is half a small round trip, beta seconds per byte.
struct LinkTerms {
  int a = 0, b = 0;
  double alpha = 0, beta = 0;
};

// What calibration learned, the same bit for bit on every rank.
struct Calibration {
  Probe probe = Probe::kNone;
  // alpha and beta: the slowest link's (the maximum over `links` of each); gamma: the slowest
  // rank's reduce kernel; seconds: how long the measurement took (slowest rank).
  MeasuredTerms terms;
  std::vector<LinkTerms> links;  // kPair: one; kRingLinks: one per ring neighbour pair
};

// Collective over `comm` (every rank calls it with the same `probe` and `partner`): measures
// gamma on every rank and alpha and beta over the links `probe` names. kPair: beta from a small
// and a medium message. kRingLinks: beta from a medium and a large one, so that a burst a link
// lets through at a faster rate (a token bucket, a switch buffer) falls out of the slope.
// `partner` (kPair only) is the rank that ping-pongs with rank 0. `rowsHash` identifies the
// efficiency rows this rank prices with (hashRows): ranks whose rows differ (SQZ_TUNER_FILE
// differs between hosts) fail with Error(kInvalidUsage) on every rank. Bounded: a fixed number
// of rounds per link, cut short on a slow link (a few ms on a 2-core host at 8 ranks; about
// 0.2 s over 1 Gbit/s links); a peer that dies or stalls fails it within SQZ_TIMEOUT_MS, as any
// call.
Calibration measureCostTerms(Communicator& comm, Probe probe, int partner, uint64_t rowsHash);

// Collective: times every all-reduce algorithm but direct on `bytes` per rank (float sum, in
// place; one untimed call, then kAnchorCalls timed) through `comm`'s own calls, `force(a)`
// making the calls that follow use `a`. Returns the slowest rank's median seconds per AlgoId
// (kAllReduceAlgos entries), the same bit for bit on every rank. A few calls per algorithm: a
// few ms over 1 Gbit/s links at 4 KiB, after ten untimed rounds of them all (about 10 ms).
std::vector<double> timeAllReduces(Communicator& comm, size_t bytes,
                                   const std::function<void(const AlgorithmEntry&)>& force);

// "0<->1 42.1 us 0.118 GB/s, 1<->2 ..." for logs and sqz-info.
std::string describeLinks(const Calibration& c);

}  // namespace squeeze
