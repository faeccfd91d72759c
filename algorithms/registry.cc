// The table of algorithms, in preference order. One line registers an algorithm.
#include "algorithms/algorithm.h"
#include "common/error.h"

namespace squeeze {
namespace {

bool ringSupports(const CollRequest& req, int) { return req.kind == CollKind::kAllReduce; }

}  // namespace

const std::vector<AlgorithmEntry>& algorithms() {
  static const std::vector<AlgorithmEntry> table = {
      {AlgoId::kRing, "ring", "reduce-scatter then all-gather around a ring, pipelined in chunks",
       ringSupports, buildRingAllReduce},
  };
  return table;
}

const AlgorithmEntry& selectAlgorithm(const CollRequest& req, int nranks) {
  for (const auto& a : algorithms())
    if (a.supports(req, nranks)) return a;
  raise(ErrorCode::kInternal, "no algorithm supports ", collKindName(req.kind));
}

}  // namespace squeeze
