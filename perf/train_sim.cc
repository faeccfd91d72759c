// sqz-train-sim: time-to-target of data-parallel SGD through each codec, on a synthetic model.
//
// Every rank (one process each, started by sqzrun, netlab.sh or another launcher, as for the
// sqz-*-perf binaries) trains the same model: per step it computes its own gradient, averages it
// over the ranks with sqzAllReduceCompressed (op sqzAvg, one codec per spec, "dense" included)
// and applies plain SGD, w -= lr * g. A run per -c SPEC stops when the loss, evaluated every -E
// steps, reaches the target, or after -s steps. Rank 0 prints one line per spec (reached, steps,
// seconds of training steps, wire and dense bytes of all ranks, mean CF, dense calls, final
// loss) and the time-to-target ratios to dense; -J FILE writes them with per-step CF and per-eval
// loss traces (format "squeeze-train-sim/1"; perf/plot_train.py draws them). Steps and time to
// target are those of the first evaluation at or below it, so they move in steps of -E.
//
// The models are train_sim_model.h's, the flags train_sim_flags.h's, the loop
// train_sim_trainer.h's, the table and the -J file train_sim_report.h's.
//
// Only the public C API is used. Time counts the training steps only (gradient, all-reduce,
// update), not loss evaluation nor the codec stats read after each call; each figure is the
// slowest rank's. Every rank must hold bitwise the same weights: the loss at each evaluation
// and a checksum of the weights at the end are compared across ranks, and a mismatch exits 1.
#include <squeeze/squeeze.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "json_file.h"
#include "perf_json.h"
#include "table.h"
#include "train_sim_flags.h"
#include "train_sim_model.h"
#include "train_sim_report.h"
#include "train_sim_trainer.h"

namespace squeeze::perf {
namespace {

int trainMain(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  TrainOptions o;
  if (int status = parseTrainOptions(argc, argv, &o); status >= 0) return status;
  JsonFile json;
  discardOnExit(&json);
  std::string why;
  if (o.jsonPath && launcherRank() <= 0 && !json.open(o.jsonPath, &why)) {
    std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", kTrainSimProgram, o.jsonPath,
                 why.c_str());
    return 2;
  }
  JsonRunInfo info;
  info.format = kTrainSimFormat;
  info.program = kTrainSimProgram;
  info.collective = "train-sim";
  const char* transport = std::getenv("SQZ_TRANSPORT");
  info.transport = transport && *transport ? transport : "cuda_ipc,shm,tcp";
  info.argc = argc;
  info.argv = argv;
  info.started = std::time(nullptr);

  sqzComm_t comm = nullptr;
  sqzResult_t r;
  const bool launched = std::getenv("SQZ_UNIQUE_ID") || launcherRank() >= 0;
  if (launched) {
    r = sqzCommInitFromEnv(&comm, nullptr);
  } else {
    sqzUniqueId id;
    r = sqzGetUniqueId(&id);
    if (r == sqzSuccess) r = sqzCommInitRank(&comm, 1, id, 0);
  }
  if (r != sqzSuccess) {
    std::fprintf(stderr, "%s: cannot create the communicator: %s: %s\n", kTrainSimProgram,
                 sqzGetErrorString(r), sqzGetLastError(nullptr));
    exitNow(1);
  }
  int rank = 0, nranks = 1;
  sqzCommUserRank(comm, &rank);
  sqzCommCount(comm, &nranks);

  std::unique_ptr<Model> model = makeModel(o.model, rank);
  const size_t n = model->size();
  Trainer trainer(o, comm, rank, model.get());
  // Every spec is tried before any training, so a typo stops the run at once (exit 2).
  for (const std::string& spec : o.specs) {
    sqzCodec_t codec = nullptr;
    if (sqzCodecCreate(&codec, spec.c_str(), n, sqzFloat32, comm) != sqzSuccess) {
      if (rank == 0)
        std::fprintf(stderr, "%s: bad codec spec '%s': %s\n", kTrainSimProgram, spec.c_str(),
                     sqzGetLastError(comm));
      exitNow(2);
    }
    sqzCodecDestroy(codec);
  }
  info.nranks = nranks;
  info.hosts = gatherHosts(trainer, comm, rank, nranks);

  const std::vector<float> w0(n, 0.0f);
  const double initialLoss = trainer.evaluate(w0, "initial", 0);
  const double targetLoss = o.model.softmax ? o.target : o.target * initialLoss;
  std::vector<std::string> seen;  // the hosts, each once
  std::string hosts;
  for (const std::string& h : info.hosts)
    if (std::find(seen.begin(), seen.end(), h) == seen.end()) {
      hosts += (seen.empty() ? "" : ",") + h;
      seen.push_back(h);
    }
  if (o.model.softmax)
    printOnRoot(rank,
                "# %s: softmax regression, %zu features x %d classes (%zu parameters),\n"
                "#   batch %d per rank, held-out loss on %d documents\n",
                kTrainSimProgram, n / kClasses - 1, kClasses, n, kBatch, kEvalDocs);
  char decay[64] = ", constant";
  if (o.model.decay > 0) std::snprintf(decay, sizeof decay, " / sqrt(1 + step/%g)", o.model.decay);
  if (!o.model.softmax)
    printOnRoot(rank,
                "# %s: quadratic, %zu parameters, curvature (1+k)^-%g shuffled;\n"
                "#   gradient noise %g x rms(grad) per rank%s\n",
                kTrainSimProgram, n, kAlpha, o.model.noise, decay);
  printOnRoot(rank, "#   %d rank%s on %s; SGD lr %g; loss every %ld steps, at most %ld steps\n",
              nranks, nranks == 1 ? "" : "s", hosts.c_str(), o.lr, o.evalEvery, o.maxSteps);
  printOnRoot(rank, "#   target: loss <= %.6g (initial %.6g)\n", targetLoss, initialLoss);

  const int width = specWidth(o);
  printColumns(rank, width);
  std::vector<RunResult> runs;
  for (const std::string& spec : o.specs) {
    runs.push_back(trainer.run(spec, targetLoss));
    printRow(rank, width, runs.back());
  }
  printSummary(rank, runs);
  int status = 0;
  if (json.isOpen()) {
    const size_t features = o.model.softmax ? n / kClasses - 1 : 0;
    if (!json.commit(trainJsonText(o, info, n, features, initialLoss, targetLoss, runs), &why)) {
      std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", kTrainSimProgram, o.jsonPath,
                   why.c_str());
      status = 2;
    }
  }
  trainer.check(sqzCommDestroy(comm), "sqzCommDestroy");
  return status;
}

}  // namespace
}  // namespace squeeze::perf

int main(int argc, char** argv) { return squeeze::perf::trainMain(argc, argv); }
