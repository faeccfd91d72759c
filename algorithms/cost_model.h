// The cost model the tuner prices algorithms with: alpha-beta-gamma per transport (configured by
// SQZ_TCP_*, SQZ_SHM_* and SQZ_REDUCE_GBPS), and per all-reduce algorithm how efficiently this
// implementation achieves its theoretical terms on that transport (measured: calibration.cc).
#pragma once

#include <string>

namespace squeeze {

// Multipliers on an algorithm's theoretical terms: predicted seconds =
//   lat * latency term + bw * bandwidth term + bwCold * bandwidth term of the bytes past
//   CostModel::cacheBytes (data that no longer fits in cache moves slower, and how much slower
//   depends on the algorithm's access pattern).
struct AlgoEfficiency {
  double lat = 1;
  double bw = 1;
  double bwCold = 0;
};

struct CostModel {
  double alpha;  // seconds per message
  double beta;   // seconds per byte moved
  double gamma;  // seconds per byte combined
  double cacheBytes = 2 << 20;
  AlgoEfficiency allReduce[5];  // indexed by AlgoId
};

// The model for "shm" or "tcp" (ranks on one host) with the measured efficiencies
// (calibration.cc), or for "net" (tcp between hosts, measured on the network lab).
CostModel calibratedModel(const std::string& transport, double alpha, double beta, double gamma);

}  // namespace squeeze
