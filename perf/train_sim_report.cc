// sqz-train-sim's table and -J document; see train_sim_report.h.
#include "train_sim_report.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "table.h"

namespace squeeze::perf {

std::vector<std::string> gatherHosts(const Trainer& t, sqzComm_t comm, int rank, int nranks) {
  constexpr size_t kHostBytes = 256;
  std::vector<unsigned char> names(size_t(nranks) * kHostBytes, 0);
  std::string host = hostName().substr(0, kHostBytes - 1);
  std::memcpy(&names[size_t(rank) * kHostBytes], host.data(), host.size());
  t.check(sqzAllReduce(names.data(), names.data(), names.size(), sqzUint8, sqzMax, comm, nullptr),
          "host all-reduce");
  std::vector<std::string> hosts;
  for (int r = 0; r < nranks; ++r)
    hosts.emplace_back(reinterpret_cast<const char*>(&names[size_t(r) * kHostBytes]));
  return hosts;
}

int specWidth(const TrainOptions& o) {
  int width = 4;
  for (const std::string& s : o.specs) width = std::max(width, int(s.size()));
  return width;
}

void printColumns(int rank, int width) {
  printOnRoot(rank, "#\n# %-*s  %7s  %6s  %9s  %10s  %10s  %8s  %11s  %10s\n", width, "spec",
              "reached", "steps", "time s", "wire MB", "dense MB", "mean CF", "dense calls",
              "final loss");
}

void printRow(int rank, int width, const RunResult& r) {
  printOnRoot(rank, "  %-*s  %7s  %6ld  %9.3f  %10.1f  %10.1f  %8.1f  %11llu  %10.4g\n", width,
              r.spec.c_str(), r.reached ? "yes" : "no", r.steps,
              r.reached ? r.timeToTarget : r.trainSeconds, double(r.wireBytes) / 1e6,
              double(r.denseBytes) / 1e6, r.meanCf, (unsigned long long)r.denseCalls, r.finalLoss);
}

void printSummary(int rank, const std::vector<RunResult>& runs) {
  printOnRoot(rank,
              "# time s: seconds of training steps to the target (all steps when not\n"
              "#   reached), the slowest rank's; MB: 1e6 bytes sent by all ranks; dense calls:\n"
              "#   too small, the policy's or the pay-off guard's (SQZ_CODEC_AUTO_DENSE=0: off)\n");
  const RunResult* dense = nullptr;
  for (const RunResult& r : runs)
    if (Trainer::nominalCf(r.spec) == 1 && !dense) dense = &r;
  std::string line = "# time to target / dense's:";
  if (!dense || !dense->reached) {
    line += dense ? " dense did not reach the target" : " no dense run (add -c dense)";
  } else {
    for (const RunResult& r : runs) {
      char cell[64];
      if (r.reached)
        std::snprintf(cell, sizeof cell, " %.2fx", r.timeToTarget / dense->timeToTarget);
      else
        std::snprintf(cell, sizeof cell, " not reached");
      line += (&r == &runs[0] ? " " : ", ") + r.spec + cell;
    }
  }
  printOnRoot(rank, "%s\n", line.c_str());
}

std::string trainJsonText(const TrainOptions& o, const JsonRunInfo& info, size_t n, size_t features,
                          double initialLoss, double targetLoss,
                          const std::vector<RunResult>& runs) {
  Json doc = jsonPreamble(info);
  Json settings = Json::object();
  settings["model"] = o.model.softmax ? "softmax" : "quadratic";
  settings["params"] = int64_t(n);
  if (o.model.softmax)
    settings["features"] = int64_t(features);
  else
    settings["alpha"] = kAlpha;
  settings["lr"] = o.lr;
  if (!o.model.softmax) {
    settings["noise"] = o.model.noise;
    settings["decay"] = o.model.decay;
  }
  settings["target"] = o.target;
  settings["target_loss"] = targetLoss;
  settings["initial_loss"] = initialLoss;
  settings["max_steps"] = o.maxSteps;
  settings["eval_every"] = o.evalEvery;
  settings["seed"] = o.model.seed;
  doc["settings"] = std::move(settings);
  Json runArray = Json::array();
  for (const RunResult& r : runs) {
    Json run = Json::object();
    run["spec"] = r.spec;
    run["reached"] = r.reached;
    run["steps"] = r.steps;
    run["time_to_target_s"] = r.timeToTarget;  // NaN: null
    run["train_s"] = r.trainSeconds;
    run["wire_bytes"] = int64_t(r.wireBytes);
    run["dense_bytes"] = int64_t(r.denseBytes);
    run["mean_cf"] = r.meanCf;
    run["dense_calls"] = int64_t(r.denseCalls);
    run["guard_dense_calls"] = int64_t(r.guardDenseCalls);
    run["final_loss"] = r.finalLoss;
    // The traces are doubles whatever their type, as they always were (phase 2, not 2.0: the
    // writer prints doubles in their shortest form).
    auto array = [](const auto& values) {
      Json a = Json::array();
      for (auto v : values) a.push_back(double(v));
      return a;
    };
    run["cf"] = array(r.cf);  // per step, step 1 first
    run["call_ratio"] = array(r.callRatio);
    run["phase"] = array(r.phase);
    run["eval_steps"] = array(r.evalSteps);
    run["eval_loss"] = array(r.evalLoss);
    runArray.push_back(std::move(run));
  }
  doc["runs"] = std::move(runArray);
  return jsonText(doc, 3);
}

}  // namespace squeeze::perf
