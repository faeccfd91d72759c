// What sqz-train-sim reports (see train_sim.cc): the table on rank 0, its column names before the
// first run, a line as each run ends (runs can take minutes on a slow link), the notes and the
// ratios to dense after the last; the -J document (format squeeze-train-sim/1,
// perf/plot_train.py draws it); and the ranks' host names that both carry.
#pragma once

#include <squeeze/squeeze.h>

#include <cstddef>
#include <string>
#include <vector>

#include "perf_json.h"
#include "train_sim_flags.h"
#include "train_sim_trainer.h"

namespace squeeze::perf {

inline constexpr const char* kTrainSimFormat = "squeeze-train-sim/1";

/// Every rank's host name, in rank order (an all-reduce: every rank calls it).
std::vector<std::string> gatherHosts(const Trainer& t, sqzComm_t comm, int rank, int nranks);

/// The width of the spec column: the longest -c spec.
int specWidth(const TrainOptions& o);

void printColumns(int rank, int width);
void printRow(int rank, int width, const RunResult& r);
/// The notes under the table and the time-to-target ratios to the first dense run.
void printSummary(int rank, const std::vector<RunResult>& runs);

/// The -J document's text: the preamble, the settings (features: softmax's, else unused) and the
/// runs with their traces.
std::string trainJsonText(const TrainOptions& o, const JsonRunInfo& info, size_t n, size_t features,
                          double initialLoss, double targetLoss,
                          const std::vector<RunResult>& runs);

}  // namespace squeeze::perf
