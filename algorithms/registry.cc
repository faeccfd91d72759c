// The table of algorithms and their alpha-beta costs. One line registers an algorithm.
#include <cmath>

#include "algorithms/algorithm.h"

namespace squeeze {
namespace {

bool always(const CollRequest&, int) { return true; }
bool windowed(const CollRequest& req, int nranks) { return req.windowed && nranks > 1; }

int log2Floor(int p) {
  int l = 0;
  while ((2 << l) <= p) ++l;
  return l;
}

// All-reduce costs for n bytes per rank on P ranks: each algorithm's theoretical latency and
// per-byte terms for its busiest rank (see its opening comment), scaled by its measured
// efficiency (calibration.cc). On a host with fewer cores than ranks two things change, the same
// for every algorithm in kind, by its own measured amount in degree:
//  - bytes: every all-reduce here moves 2(P-1)n bytes and combines (P-1)n in all (ring, ps, rhd
//    with its fold, both trees, naive: count them), and with every core busy it is that total
//    divided among the cores that sets the pace, not how an algorithm spreads it over ranks (on
//    2 cores naive's serial rank 0 keeps up with ring at 3 to 8 ranks, and rhd's fold costs it
//    nothing at 3 and 6): the per-byte term becomes the total over the cores;
//  - latency: a message step waits for its ranks to get a core; with s ranks per core each step
//    costs latShared * (s - 1) more, which the fit finds large for rhd and the trees (every rank
//    runs in every step) and small for naive (rank 0 drives, the others wait).
double calibratedBy(const AlgoEfficiency& e, const CostModel& m, double latency, double perByte,
                    double n, int P) {
  double shared = 1;
  if (m.cores > 0 && P > m.cores) {
    shared = double(P) / m.cores;
    perByte = (2 * (P - 1) * m.beta + (P - 1) * m.gamma) / m.cores;
  }
  const double hot = n < m.cacheBytes ? n : m.cacheBytes;
  return e.lat * latency + e.latShared * latency * (shared - 1) + e.bw * perByte * hot +
         e.bwCold * perByte * (n - hot);
}
double calibrated(const CostModel& m, AlgoId id, double latency, double perByte, double n, int P) {
  return calibratedBy(m.allReduce[static_cast<int>(id)], m, latency, perByte, n, P);
}
// Rank 0 receives P-1 messages and sends P-1: its latency is linear in P, as the ring's.
double naiveCost(const CostModel& m, double n, int P) {
  return calibrated(m, AlgoId::kNaive, 2 * (P - 1) * m.alpha,
                    2 * (P - 1) * m.beta + (P - 1) * m.gamma, n, P);
}
double psCost(const CostModel& m, double n, int P) {
  double f = double(P - 1) / P;
  return calibrated(m, AlgoId::kPs, 2 * (P - 1) * m.alpha, 2 * f * m.beta + f * m.gamma, n, P);
}
double ringCost(const CostModel& m, double n, int P) {
  double f = double(P - 1) / P;
  return calibrated(m, AlgoId::kRing, 2 * (P - 1) * m.alpha, 2 * f * m.beta + f * m.gamma, n, P);
}
double rhdCost(const CostModel& m, double n, int P) {
  int L = log2Floor(P), p2 = 1 << L;
  double f = double(p2 - 1) / p2;
  bool fold = P != p2;
  return calibrated(m, AlgoId::kRhd, (2 * L + (fold ? 2 : 0)) * m.alpha,
                    2 * f * m.beta + f * m.gamma + (fold ? 2 * m.beta + m.gamma : 0), n, P);
}
double treeCost(const CostModel& m, double n, int P) {
  int depth = log2Floor(P) + 1;
  return calibrated(m, AlgoId::kTree, 2 * depth * m.alpha, 1.5 * m.beta + m.gamma, n, P);
}

// Direct (src/core/direct_allreduce.h): three waits a round; per rank (P-1)/P n copied into the
// window, as much out, and (P-1)/P n combined, with no message in between. Its efficiency is not
// a tuner-file row: where it runs the tuner takes it (tuner.cc), so this cost is for sqz-info's
// table only, fit to one measurement (4 ranks on the 2-core reference VM, shm's default
// constants, perf/RESULTS.md "Direct all-reduce"): a copy into a shared window runs at memory
// speed, about a tenth of what a message's beta prices, a fifth once past the cache.
double directCost(const CostModel& m, double n, int P) {
  static constexpr AlgoEfficiency kDirect{0.2, 0, 0.1, 0.18};
  const double f = double(P - 1) / P;
  return calibratedBy(kDirect, m, 3 * m.alpha, 2 * f * m.beta + f * m.gamma, n, P);
}

// n is bytes per rank's buffer (broadcast, reduce) or per block (all-gather, reduce-scatter,
// all-to-all), as CollRequest::bytes() gives it.
double chainCost(const CostModel& m, double n, int P) {
  return (P - 1) * m.alpha + n * m.beta + n * m.gamma;
}
double starCost(const CostModel& m, double n, int P) {
  return m.alpha + (P - 1) * n * m.beta + (P - 1) * n * m.gamma;
}
double gatherRingCost(const CostModel& m, double n, int P) {
  return (P - 1) * (m.alpha + n * m.beta + n * m.gamma);
}
double gatherDirectCost(const CostModel& m, double n, int P) {
  return (P - 1) * m.alpha * 0.5 + (P - 1) * n * (m.beta + m.gamma) * 1.1;
}

}  // namespace

const std::vector<AlgorithmEntry>& algorithms() {
  static const std::vector<AlgorithmEntry> table = {
      {AlgoId::kNaive, CollKind::kAllReduce, "naive",
       "all to rank 0, reduce there, send back (the reference)", always, buildNaiveAllReduce,
       naiveCost},
      {AlgoId::kPs, CollKind::kAllReduce, "ps", "parameter server: shard owners reduce and reply",
       always, buildPsAllReduce, psCost},
      {AlgoId::kRing, CollKind::kAllReduce, "ring",
       "reduce-scatter then all-gather around a ring, pipelined", always, buildRingAllReduce,
       ringCost},
      {AlgoId::kRhd, CollKind::kAllReduce, "rhd",
       "recursive halving/doubling (Rabenseifner), folding non-powers of two", always,
       buildRhdAllReduce, rhdCost},
      {AlgoId::kTree, CollKind::kAllReduce, "tree",
       "double binary tree, each tree half the data, pipelined", always, buildTreeAllReduce,
       treeCost},
      {AlgoId::kDirect, CollKind::kAllReduce, "direct",
       "ranks on one host over shm: each reduces its part in the others' shared-memory windows"
       " (dense, host memory)",
       windowed, nullptr, directCost},
      {AlgoId::kRing, CollKind::kBroadcast, "ring", "pipelined chain from the root", always,
       buildRingBroadcast, chainCost},
      {AlgoId::kNaive, CollKind::kBroadcast, "naive", "root sends to every rank", always,
       buildNaiveBroadcast, starCost},
      {AlgoId::kRing, CollKind::kReduce, "ring", "pipelined chain ending at the root", always,
       buildRingReduce, chainCost},
      {AlgoId::kNaive, CollKind::kReduce, "naive", "every rank sends to the root", always,
       buildNaiveReduce, starCost},
      {AlgoId::kRing, CollKind::kAllGather, "ring", "P-1 steps around a ring", always,
       buildRingAllGather, gatherRingCost},
      {AlgoId::kNaive, CollKind::kAllGather, "naive", "every rank sends to every rank", always,
       buildNaiveAllGather, gatherDirectCost},
      {AlgoId::kRing, CollKind::kReduceScatter, "ring", "P-1 steps around a ring", always,
       buildRingReduceScatter, gatherRingCost},
      {AlgoId::kNaive, CollKind::kReduceScatter, "naive", "every rank sends block b to rank b",
       always, buildNaiveReduceScatter, gatherDirectCost},
      {AlgoId::kNaive, CollKind::kAlltoAll, "naive", "pairwise exchange, all posted at once",
       always, buildNaiveAlltoAll, gatherDirectCost},
  };
  return table;
}

const AlgorithmEntry* findAlgorithm(CollKind coll, const std::string& name) {
  for (const auto& a : algorithms())
    if (a.coll == coll && name == a.name) return &a;
  return nullptr;
}

}  // namespace squeeze
