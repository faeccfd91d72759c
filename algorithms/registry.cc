// The table of algorithms and their alpha-beta costs. One line registers an algorithm.
#include <cmath>

#include "algorithms/algorithm.h"

namespace squeeze {
namespace {

bool always(const CollRequest&, int) { return true; }

int log2Floor(int p) {
  int l = 0;
  while ((2 << l) <= p) ++l;
  return l;
}

// Costs for n bytes per rank on P ranks (see each algorithm's opening comment).
double naiveCost(const CostModel& m, double n, int P) {
  return 2 * m.alpha + 2 * (P - 1) * n * m.beta + (P - 1) * n * m.gamma;
}
double psCost(const CostModel& m, double n, int P) {
  double f = double(P - 1) / P;
  return 2 * (P - 1) * m.alpha + 2 * f * n * m.beta + f * n * m.gamma;
}
double ringCost(const CostModel& m, double n, int P) {
  double f = double(P - 1) / P;
  return 2 * (P - 1) * m.alpha + 2 * f * n * m.beta + f * n * m.gamma;
}
double rhdCost(const CostModel& m, double n, int P) {
  int L = log2Floor(P), p2 = 1 << L;
  double f = double(p2 - 1) / p2;
  double fold = P == p2 ? 0 : 2 * (m.alpha + n * m.beta) + n * m.gamma;
  return 2 * L * m.alpha + 2 * f * n * m.beta + f * n * m.gamma + fold;
}
double treeCost(const CostModel& m, double n, int P) {
  int depth = log2Floor(P) + 1;
  return 2 * depth * m.alpha + 1.5 * n * m.beta + n * m.gamma;
}

}  // namespace

const std::vector<AlgorithmEntry>& algorithms() {
  static const std::vector<AlgorithmEntry> table = {
      {AlgoId::kNaive, CollKind::kAllReduce, "naive",
       "all to rank 0, reduce there, send back (the reference)", always, buildNaiveAllReduce,
       naiveCost},
      {AlgoId::kPs, CollKind::kAllReduce, "ps",
       "parameter server: shard owners reduce and reply", always, buildPsAllReduce, psCost},
      {AlgoId::kRing, CollKind::kAllReduce, "ring",
       "reduce-scatter then all-gather around a ring, pipelined", always, buildRingAllReduce,
       ringCost},
      {AlgoId::kRhd, CollKind::kAllReduce, "rhd",
       "recursive halving/doubling (Rabenseifner), folding non-powers of two", always,
       buildRhdAllReduce, rhdCost},
      {AlgoId::kTree, CollKind::kAllReduce, "tree",
       "double binary tree, each tree half the data, pipelined", always, buildTreeAllReduce,
       treeCost},
  };
  return table;
}

const AlgorithmEntry* findAlgorithm(CollKind coll, const std::string& name) {
  for (const auto& a : algorithms())
    if (a.coll == coll && name == a.name) return &a;
  return nullptr;
}

}  // namespace squeeze
