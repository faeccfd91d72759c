// The tuner: picks the algorithm for each call. An SQZ_ALGO rule for the call's collective and
// size wins; otherwise the algorithm with the lowest alpha-beta cost for the communicator's
// slowest transport. SQZ_ALGO grammar (rules separated by ';'):
//   [collective:]range=name[,range=name...]   e.g. allreduce:0-64K=rhd,64K-inf=ring
//   [collective:]name                         e.g. ring (every size), allreduce:tree
// Ranges are bytes per rank, half-open, with K/M/G suffixes and 'inf'.
#pragma once

#include <string>
#include <vector>

#include "algorithms/algorithm.h"

namespace squeeze {

// What the tuner predicts `a` costs under `model` for `bytes` on `nranks` ranks: the
// algorithm's alpha-beta cost, anchored to the time measured at model.anchorBytes where there is
// one (all-reduce between hosts).
double priceOf(const AlgorithmEntry& a, const CostModel& model, double bytes, int nranks);

class Tuner {
 public:
  // Throws Error(kInvalidArgument) naming the part of `spec` that does not parse.
  Tuner(const std::string& spec, const CostModel& model);

  const AlgorithmEntry& choose(const CollRequest& req, int nranks) const;
  // The model's choice (ignoring SQZ_ALGO) and every algorithm's predicted time.
  std::string choiceTable(CollKind coll, int nranks, const std::vector<size_t>& sizes) const;
  const CostModel& model() const { return model_; }

 private:
  const AlgorithmEntry& byModel(const CollRequest& req, int nranks) const;

  struct Rule {
    bool anyColl;
    CollKind coll;
    uint64_t lo, hi;
    const AlgorithmEntry* algo;  // for anyColl rules, the entry is looked up per collective
    std::string name;
  };
  std::vector<Rule> rules_;
  CostModel model_;
};

}  // namespace squeeze
