// sqz-train-sim's training loop; see train_sim_trainer.h.
#include "train_sim_trainer.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "inputs.h"

namespace squeeze::perf {
namespace {

JsonFile* gJson = nullptr;  // discarded on every early exit

}  // namespace

void discardOnExit(JsonFile* json) { gJson = json; }

[[noreturn]] void exitNow(int status) {
  if (gJson) gJson->discard();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status);
}

void Trainer::check(sqzResult_t r, const char* what) const {
  if (r == sqzSuccess) return;
  std::fflush(stdout);
  const char* detail = sqzGetLastError(comm_);
  std::fprintf(stderr, "%s: rank %d: %s: %s: %s\n", kTrainSimProgram, rank_, what,
               sqzGetErrorString(r), detail && *detail ? detail : "(no details)");
  exitNow(1);
}

double Trainer::evaluate(const std::vector<float>& w, const std::string& spec, long step) const {
  double v[2];
  v[0] = model_->loss(w.data());
  v[1] = -v[0];
  check(sqzAllReduce(v, v, 2, sqzFloat64, sqzMax, comm_, nullptr), "loss all-reduce");
  if (v[0] != -v[1] && !(std::isnan(v[0]) && std::isnan(v[1]))) {
    std::fprintf(stderr,
                 "%s: rank %d: %s: the ranks' losses differ at step %ld (%.17g to %.17g):"
                 " their weights diverged\n",
                 kTrainSimProgram, rank_, spec.c_str(), step, -v[1], v[0]);
    exitNow(1);
  }
  return v[0];
}

RunResult Trainer::run(const std::string& spec, double targetLoss) {
  RunResult r;
  r.spec = spec;
  const size_t n = model_->size();
  sqzCodec_t codec = nullptr;
  check(sqzCodecCreate(&codec, spec.c_str(), n, sqzFloat32, comm_), "sqzCodecCreate");
  const double nominal = nominalCf(spec);
  std::vector<float> w(n, 0.0f), g(n);
  sqzCodecStats_t prev{}, st{};
  auto record = [&](long step) {
    r.finalLoss = evaluate(w, spec, step);
    r.evalSteps.push_back(step);
    r.evalLoss.push_back(r.finalLoss);
    if (r.finalLoss <= targetLoss && !r.reached) {
      r.reached = true;
      r.steps = step;
      r.timeToTarget = r.trainSeconds;
    }
  };
  record(0);
  for (long step = 0; step < o_.maxSteps && !r.reached;) {
    const auto t0 = std::chrono::steady_clock::now();
    model_->gradient(w.data(), step, g.data());
    check(sqzAllReduceCompressed(g.data(), g.data(), n, sqzFloat32, sqzAvg, codec, comm_, nullptr),
          "sqzAllReduceCompressed");
    const float lr = float(o_.lr);
    for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
    r.trainSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++step;
    check(sqzCodecGetStats(codec, &st), "sqzCodecGetStats");
    const double wire = double(st.wireBytes - prev.wireBytes);
    const double ratio = wire > 0 ? double(st.denseBytes - prev.denseBytes) / wire : NAN;
    // A call that ran dense (too small, the policy's or the pay-off guard's) used CF 1: stats.cf
    // keeps the policy's CF when the guard overrides it. Else the adaptive methods say their
    // CF; a static codec has none: its spec's 1/ratio, else what the call achieved.
    const bool ranDense = st.denseCalls > prev.denseCalls;
    r.cf.push_back(ranDense ? 1 : st.cf > 0 ? st.cf : nominal > 0 ? nominal : ratio);
    r.callRatio.push_back(ratio);
    r.phase.push_back(st.phase);
    prev = st;
    r.steps = step;
    if (step % o_.evalEvery == 0 || step == o_.maxSteps) record(step);
  }
  r.denseCalls = st.denseCalls;
  r.guardDenseCalls = st.guardDenseCalls;
  // One rank sends nothing: a codec without a nominal CF then has none (NaN, null in JSON).
  r.meanCf = std::accumulate(r.cf.begin(), r.cf.end(), 0.0) / double(r.cf.size());
  check(sqzCodecDestroy(codec), "sqzCodecDestroy");

  // The ranks' figures: the slowest rank's seconds, all ranks' bytes.
  double sec[2] = {r.trainSeconds, r.reached ? r.timeToTarget : 0};
  check(sqzAllReduce(sec, sec, 2, sqzFloat64, sqzMax, comm_, nullptr), "time all-reduce");
  r.trainSeconds = sec[0];
  if (r.reached) r.timeToTarget = sec[1];
  uint64_t bytes[2] = {st.wireBytes, st.denseBytes};
  check(sqzAllReduce(bytes, bytes, 2, sqzUint64, sqzSum, comm_, nullptr), "bytes all-reduce");
  r.wireBytes = bytes[0];
  r.denseBytes = bytes[1];

  // Bitwise the same weights everywhere: max of [sum, ~sum] gives the largest and the smallest.
  uint64_t sum[2] = {0xcbf29ce484222325ull, 0};
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(w.data());
  for (size_t i = 0; i < n; ++i) sum[0] = mix64(sum[0] ^ bits[i]);
  sum[1] = ~sum[0];
  check(sqzAllReduce(sum, sum, 2, sqzUint64, sqzMax, comm_, nullptr), "checksum all-reduce");
  if (sum[0] != ~sum[1]) {
    std::fprintf(stderr, "%s: rank %d: %s: the ranks' weights differ after %ld steps\n",
                 kTrainSimProgram, rank_, spec.c_str(), r.steps);
    exitNow(1);
  }
  return r;
}

double Trainer::nominalCf(const std::string& spec) {
  if (spec == "dense" || spec.rfind("dense:", 0) == 0) return 1;
  for (size_t at = spec.find(':'); at != std::string::npos; at = spec.find(',', at + 1)) {
    if (spec.compare(at + 1, 6, "ratio=") != 0) continue;
    double ratio = std::strtod(spec.c_str() + at + 7, nullptr);
    return ratio > 0 ? 1 / ratio : 0;
  }
  return 0;
}

}  // namespace squeeze::perf
