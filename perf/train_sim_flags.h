// sqz-train-sim's flags (see train_sim.cc and its -h): what they set, and the reading of them,
// which only the launcher's rank 0 (or a rank alone) speaks about.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "train_sim_model.h"

namespace squeeze::perf {

inline constexpr const char* kTrainSimProgram = "sqz-train-sim";

struct TrainOptions {
  std::vector<std::string> specs;
  ModelSettings model;
  double target = NAN, lr = NAN;  // NaN: the model's default
  long maxSteps = 2000, evalEvery = 10;
  bool noiseSet = false;  // -V or -D given
  const char* jsonPath = nullptr;
};

/// The launcher's rank before the communicator exists (who prints flag errors), or -1.
int launcherRank();

/// -1 when the flags are fine, else the exit status (0 for -h, 2 for errors).
int parseTrainOptions(int argc, char** argv, TrainOptions* o);

}  // namespace squeeze::perf
