// The alpha-beta cost model's constants for one transport: what the tuner prices algorithms
// with (configured by SQZ_TCP_*, SQZ_SHM_* and SQZ_REDUCE_GBPS).
#pragma once

namespace squeeze {

// Seconds per message (alpha), per byte moved (beta) and per byte combined (gamma).
struct CostModel {
  double alpha;
  double beta;
  double gamma;
};

}  // namespace squeeze
