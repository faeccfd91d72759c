// Init-time calibration of the tuner (SQZ_TUNER_CALIBRATE=1, the default): a short, bounded
// measurement of what the cost model's terms cost on this machine, taken through the
// communicator's own point-to-point groups and collectives (so it prices the path real calls
// take: executor, wire headers, transport, and the other ranks sharing the cores), and agreed by
// every rank, so that all of them price alike and pick the same algorithms.
#pragma once

#include <cstdint>

#include "algorithms/cost_model.h"

namespace squeeze {

class Communicator;

// Collective over `comm` (every rank calls it with the same `partner`): measures alpha, beta and
// gamma (MeasuredTerms, cost_model.h) and returns on every rank, bit for bit, the maximum over
// the ranks of each. `partner` is the rank that ping-pongs with rank 0 (a peer over the
// communicator's slowest transport); 0 measures nothing (the result is all zero but `seconds`)
// and only checks the rows. `rowsHash` identifies the efficiency rows this rank prices with
// (hashRows): ranks whose rows differ (SQZ_TUNER_FILE differs between hosts) fail with
// Error(kInvalidUsage) on every rank. Bounded: a fixed number of rounds, cut short on a slow
// link (a few ms on a 2-core host at 8 ranks); a peer that dies or stalls fails it within
// SQZ_TIMEOUT_MS, as any call.
MeasuredTerms measureCostTerms(Communicator& comm, int partner, uint64_t rowsHash);

}  // namespace squeeze
