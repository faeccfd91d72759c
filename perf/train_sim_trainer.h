// sqz-train-sim's training loop (see train_sim.cc): one run of SGD per codec spec, every step's
// gradient averaged over the ranks through sqzAllReduceCompressed, with the checks that the ranks
// hold bitwise the same weights; and the way out of the process when something fails.
#pragma once

#include <squeeze/squeeze.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "json_file.h"
#include "train_sim_flags.h"
#include "train_sim_model.h"

namespace squeeze::perf {

/// Makes exitNow discard json (the -J file of a run that stops early); nullptr: none.
void discardOnExit(JsonFile* json);

/// Discards the -J file, flushes stdout and stderr, and ends the process with `status`.
[[noreturn]] void exitNow(int status);

struct RunResult {
  std::string spec;
  bool reached = false;
  long steps = 0;                                // to the target, else run
  double timeToTarget = NAN, trainSeconds = 0;   // slowest rank's
  uint64_t wireBytes = 0, denseBytes = 0;        // all ranks
  uint64_t denseCalls = 0, guardDenseCalls = 0;  // rank 0's (the ranks agree)
  double meanCf = 0, finalLoss = NAN;
  std::vector<double> cf, callRatio;  // per step
  std::vector<int> phase;             // per step
  std::vector<long> evalSteps;
  std::vector<double> evalLoss;
};

class Trainer {
 public:
  Trainer(const TrainOptions& o, sqzComm_t comm, int rank, Model* model)
      : o_(o), comm_(comm), rank_(rank), model_(model) {}

  /// Returns if r is sqzSuccess; else says what failed, with the library's detail, and exits 1.
  void check(sqzResult_t r, const char* what) const;

  /// The loss at w, agreed by the ranks: [loss, -loss] max-reduced must give the same value.
  double evaluate(const std::vector<float>& w, const std::string& spec, long step) const;

  /// Trains from w = 0 with `spec` until the loss is at most targetLoss or -s steps have run.
  RunResult run(const std::string& spec, double targetLoss);

  /// 1 for dense, 1/ratio for a spec with ratio=, else 0 (unknown: the calls' ratio is used).
  static double nominalCf(const std::string& spec);

 private:
  const TrainOptions& o_;
  sqzComm_t comm_;
  int rank_;
  Model* model_;
};

}  // namespace squeeze::perf
