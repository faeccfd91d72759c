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
// Models (data from counter-based hashes, so every run is reproducible):
//  - quadratic: loss(w) = 0.5 sum_i h_i (w_i - w*_i)^2, h_i = (1 + k_i)^-0.5 with k a stride
//    permutation of 0..n-1, so every chunk of the tensor mixes large and small curvatures.
//    alpha = 0.5 is the steep end of the usual 0.5-1: dense SGD's steps to a fixed fraction of
//    the initial loss grow as n^alpha (about 900 steps to 5% at n = 1M, lr 1), and alpha 0.75
//    would need ~20k. Each rank's gradient is h (w - w*) plus noise of std
//    V / sqrt(1 + t/D) * rms(true gradient), independent per rank, step and element. w starts at 0.
//  - softmax: tests/collective/convergence_test.cc's problem (documents of 16 tokens, 32 classes,
//    24 keywords per class at p = 0.15) with PARAMS/32 features; batches of 32 per rank from the
//    rank's own shard; the loss is the mean cross-entropy on 2048 held-out documents.
//
// Only the public C API is used. Time counts the training steps only (gradient, all-reduce,
// update), not loss evaluation nor the codec stats read after each call; each figure is the
// slowest rank's. Every rank must hold bitwise the same weights: the loss at each evaluation
// and a checksum of the weights at the end are compared across ranks, and a mismatch exits 1.
#include <squeeze/squeeze.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "json_file.h"
#include "perf_json.h"
#include "sweep_flags.h"
#include "table.h"

namespace squeeze::perf {
namespace {

constexpr const char* kProgram = "sqz-train-sim";
constexpr const char* kFormat = "squeeze-train-sim/1";
constexpr double kAlpha = 0.5;  // quadratic: curvature spectrum exponent
constexpr int kClasses = 32, kTokens = 16, kKeywords = 24, kKeywordPerMille = 150;
constexpr uint64_t kDocsPerRank = 16384;
constexpr int kBatch = 32, kEvalDocs = 2048;

JsonFile* gJson = nullptr;  // discarded on every early exit

uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) { return mix(mix(mix(a) ^ b) ^ c); }

// Roughly standard normal from one hash: the sum of its four 16-bit uniforms (Irwin-Hall),
// centred and scaled to unit variance; one mix per value keeps the noise pass cheap.
float gaussish(uint64_t h) {
  double s =
      double(h & 0xffff) + double(h >> 16 & 0xffff) + double(h >> 32 & 0xffff) + double(h >> 48);
  return float((s - 131070.0) * (1.7320508075688772 / 65536.0));
}

[[noreturn]] void exitNow(int status) {
  if (gJson) gJson->discard();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status);
}

// The launcher's rank before the communicator exists (who prints flag errors), or -1.
int launcherRank() {
  for (const char* var : {"SQZ_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
  return -1;
}

struct Options {
  std::vector<std::string> specs;
  bool softmax = false;
  size_t params = 1u << 20;
  double target = NAN, lr = NAN;  // NaN: the model's default
  long maxSteps = 2000, evalEvery = 10;
  double noise = 0.5, decay = 0;
  bool noiseSet = false;
  long seed = 1;
  const char* jsonPath = nullptr;
};

void usage(FILE* out) {
  std::fprintf(
      out,
      "Usage: %s [options]\n"
      "  -c SPEC     codec spec, repeatable (default dense), e.g. topk:ratio=0.01,\n"
      "              gravac:cf_min=10,cf_max=1000, accordion:cf_low=10,cf_high=1000\n"
      "  -m MODEL    quadratic (default) or softmax\n"
      "  -p PARAMS   parameters (K/M suffixes; default 1M); softmax: PARAMS/32 features\n"
      "  -t TARGET   loss to reach: quadratic, a fraction of the initial loss (default\n"
      "              0.05); softmax, the held-out cross-entropy (default 1.0)\n"
      "  -s STEPS    at most this many steps per spec (default 2000)\n"
      "  -E N        evaluate the loss every N steps (default 10)\n"
      "  -l LR       SGD learning rate (default 1 quadratic, 2 softmax)\n"
      "  -V NOISE    quadratic: per-rank gradient noise std relative to the rms gradient\n"
      "              (default 0.5)\n"
      "  -D DECAY    quadratic: noise std V / sqrt(1 + step/DECAY); 0: constant (default)\n"
      "  -S SEED     data and noise seed (default 1)\n"
      "  -J FILE     also write the results and traces as JSON (squeeze-train-sim/1), from\n"
      "              rank 0; plot them with perf/plot_train.py\n"
      "  -h          this text\n"
      "Run under sqzrun (sqzrun -n 4 %s ...) or another launcher; alone it is one rank.\n",
      kProgram, kProgram);
}

bool parseDouble(const char* text, double lo, double hi, double* out) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

// -1 when the flags are fine, else the exit status (0 for -h, 2 for errors).
int parseOptions(int argc, char** argv, Options* o) {
  const bool speak = launcherRank() <= 0;
  auto bad = [&](const std::string& msg) {
    if (speak) std::fprintf(stderr, "%s: %s (-h for help)\n", kProgram, msg.c_str());
    return 2;
  };
  auto value = [](char flag) { return std::string("'") + optarg + "' for -" + flag; };
  opterr = 0;
  long v;
  for (int c; (c = getopt(argc, argv, ":c:m:p:t:s:E:l:V:D:S:J:h")) != -1;) {
    switch (c) {
      case 'c':
        if (!*optarg) return bad("-c needs a codec spec, e.g. -c topk:ratio=0.01");
        o->specs.push_back(optarg);
        break;
      case 'm':
        if (std::strcmp(optarg, "quadratic") && std::strcmp(optarg, "softmax"))
          return bad("unknown model " + value('m') + " (quadratic or softmax)");
        o->softmax = optarg[0] == 's';
        break;
      case 'p':
        if (!parseSize(optarg, &o->params, false) || o->params == 0 || o->params > (1u << 30))
          return bad("invalid parameter count " + value('p') + " (1 to 1G, e.g. 64K, 4M)");
        break;
      case 't':
        if (!parseDouble(optarg, 0, HUGE_VAL, &o->target) || o->target == 0)
          return bad("invalid target " + value('t') + " (a loss > 0)");
        break;
      case 's':
        if (!parseInt(optarg, 1, 1L << 30, &o->maxSteps))
          return bad("invalid step count " + value('s') + " (need >= 1)");
        break;
      case 'E':
        if (!parseInt(optarg, 1, 1L << 30, &o->evalEvery))
          return bad("invalid evaluation interval " + value('E') + " (need >= 1)");
        break;
      case 'l':
        if (!parseDouble(optarg, 0, HUGE_VAL, &o->lr) || o->lr == 0)
          return bad("invalid learning rate " + value('l') + " (need > 0)");
        break;
      case 'V':
        if (!parseDouble(optarg, 0, HUGE_VAL, &o->noise))
          return bad("invalid noise " + value('V') + " (need >= 0)");
        o->noiseSet = true;
        break;
      case 'D':
        if (!parseDouble(optarg, 0, HUGE_VAL, &o->decay))
          return bad("invalid decay " + value('D') + " (steps >= 0; 0 = constant noise)");
        o->noiseSet = true;
        break;
      case 'S':
        if (!parseInt(optarg, 0, 1L << 62, &v)) return bad("invalid seed " + value('S'));
        o->seed = v;
        break;
      case 'J':
        o->jsonPath = optarg;
        break;
      case 'h':
        if (speak) usage(stdout);
        return 0;
      case ':':
        return bad(std::string("-") + char(optopt) + " needs a value");
      default:
        return bad(std::string("unknown flag -") + char(optopt));
    }
  }
  if (optind < argc) return bad(std::string("unexpected argument '") + argv[optind] + "'");
  if (o->softmax && o->noiseSet) return bad("-V and -D apply to -m quadratic only");
  if (o->softmax && o->params < kClasses)
    return bad("-m softmax needs -p >= 32 (PARAMS/32 features)");
  if (!o->softmax && o->target >= 1)
    return bad("-t is a fraction of the initial loss for -m quadratic (need < 1)");
  if (std::isnan(o->target)) o->target = o->softmax ? 1.0 : 0.05;
  if (std::isnan(o->lr)) o->lr = o->softmax ? 2.0 : 1.0;
  if (o->specs.empty()) o->specs.push_back("dense");
  return -1;
}

// ---- Models ----------------------------------------------------------------------------------

class Model {
 public:
  virtual ~Model() = default;
  size_t size() const { return n_; }
  // This rank's gradient at w for `step` (0-based) into g.
  virtual void gradient(const float* w, long step, float* g) = 0;
  // The loss at w (the same on every rank holding the same w).
  virtual double loss(const float* w) const = 0;

 protected:
  size_t n_ = 0;
};

class Quadratic : public Model {
 public:
  Quadratic(const Options& o, int rank) : o_(o), rank_(rank), h_(o.params), wstar_(o.params) {
    n_ = o.params;
    // k_i = i * stride mod n, stride coprime with n near n / golden ratio: a permutation that
    // puts far-apart ranks of the spectrum next to each other.
    uint64_t stride = std::max<uint64_t>(1, uint64_t(double(n_) * 0.6180339887));
    while (std::gcd(stride, uint64_t(n_)) != 1) ++stride;
    for (size_t i = 0; i < n_; ++i) {
      h_[i] = float(std::pow(1.0 + double(i * stride % n_), -kAlpha));
      wstar_[i] = gaussish(hash3(uint64_t(o.seed), 1, i));
    }
  }
  void gradient(const float* w, long step, float* g) override {
    double sq = 0;
    for (size_t i = 0; i < n_; ++i) {
      g[i] = h_[i] * (w[i] - wstar_[i]);
      sq += double(g[i]) * g[i];
    }
    double std = o_.noise * std::sqrt(sq / double(n_));
    if (o_.decay > 0) std /= std::sqrt(1.0 + double(step) / o_.decay);
    if (std == 0) return;
    const uint64_t base = hash3(uint64_t(o_.seed), 2, uint64_t(rank_) << 40 | uint64_t(step));
    const float s = float(std);
    for (size_t i = 0; i < n_; ++i) g[i] += s * gaussish(mix(base + i));
  }
  double loss(const float* w) const override {
    double sum = 0;
    for (size_t i = 0; i < n_; ++i) {
      double d = double(w[i]) - wstar_[i];
      sum += h_[i] * d * d;
    }
    return 0.5 * sum;
  }

 private:
  const Options& o_;
  int rank_;
  std::vector<float> h_, wstar_;
};

class Softmax : public Model {
 public:
  Softmax(const Options& o, int rank)
      : seed_(uint64_t(o.seed)), rank_(rank), features_(o.params / kClasses) {
    n_ = features_ * kClasses + kClasses;
    for (int k = 0; k < kClasses * kKeywords; ++k)
      keywords_.push_back(uint32_t(hash3(seed_, 3, uint64_t(k)) % features_));
    // Held-out documents come from ids no shard uses, whatever the rank count.
    for (int d = 0; d < kEvalDocs; ++d) makeDoc((uint64_t(1) << 40) + uint64_t(d), &eval_);
  }
  void gradient(const float* w, long step, float* g) override {
    std::fill(g, g + n_, 0.0f);
    batch_.labels.clear();
    batch_.tokens.clear();
    for (int s = 0; s < kBatch; ++s) {
      uint64_t pick = hash3(seed_, 4, uint64_t(rank_) << 40 | uint64_t(step) << 8 | uint64_t(s));
      makeDoc(uint64_t(rank_) * kDocsPerRank + pick % kDocsPerRank, &batch_);
    }
    lossAndGrad(batch_, w, g);
  }
  double loss(const float* w) const override { return lossAndGrad(eval_, w, nullptr); }

 private:
  struct Docs {
    std::vector<uint32_t> tokens;  // kTokens per document
    std::vector<uint8_t> labels;
  };
  // Document `id`: a label, and tokens that are one of its class's keywords with p = 0.15, else
  // a uniform feature, so the classes overlap and the loss has a floor.
  void makeDoc(uint64_t id, Docs* d) const {
    const int label = int(hash3(seed_, 5, id) % kClasses);
    d->labels.push_back(uint8_t(label));
    for (int t = 0; t < kTokens; ++t) {
      const uint64_t h = hash3(seed_, 6, id << 4 | uint64_t(t));
      const uint64_t pick = h >> 20;
      d->tokens.push_back(h % 1000 < kKeywordPerMille
                              ? keywords_[label * kKeywords + pick % kKeywords]
                              : uint32_t(pick % features_));
    }
  }
  // Mean cross-entropy of softmax(x W + b) over d; adds its gradient to grad unless null.
  // w = W (features x classes, row-major) then b.
  double lossAndGrad(const Docs& d, const float* w, float* grad) const {
    const float* b = w + features_ * kClasses;
    const size_t n = d.labels.size();
    double loss = 0;
    float z[kClasses], dz[kClasses];
    for (size_t s = 0; s < n; ++s) {
      const uint32_t* tok = &d.tokens[s * kTokens];
      std::copy(b, b + kClasses, z);
      for (int t = 0; t < kTokens; ++t)
        for (int c = 0; c < kClasses; ++c) z[c] += w[size_t(tok[t]) * kClasses + c];
      const float mx = *std::max_element(z, z + kClasses);
      double sum = 0;
      for (int c = 0; c < kClasses; ++c) sum += std::exp(double(z[c] - mx));
      const int y = d.labels[s];
      loss += std::log(sum) - double(z[y] - mx);
      if (!grad) continue;
      for (int c = 0; c < kClasses; ++c)
        dz[c] = float((std::exp(double(z[c] - mx)) / sum - (c == y)) / double(n));
      for (int t = 0; t < kTokens; ++t)
        for (int c = 0; c < kClasses; ++c) grad[size_t(tok[t]) * kClasses + c] += dz[c];
      for (int c = 0; c < kClasses; ++c) grad[features_ * kClasses + c] += dz[c];
    }
    return loss / double(n);
  }

  uint64_t seed_;
  int rank_;
  size_t features_;
  std::vector<uint32_t> keywords_;
  Docs eval_, batch_;
};

// ---- Training --------------------------------------------------------------------------------

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
  Trainer(const Options& o, sqzComm_t comm, int rank, Model* model)
      : o_(o), comm_(comm), rank_(rank), model_(model) {}

  void check(sqzResult_t r, const char* what) const {
    if (r == sqzSuccess) return;
    std::fflush(stdout);
    const char* detail = sqzGetLastError(comm_);
    std::fprintf(stderr, "%s: rank %d: %s: %s: %s\n", kProgram, rank_, what, sqzGetErrorString(r),
                 detail && *detail ? detail : "(no details)");
    exitNow(1);
  }

  // The loss at w, agreed by the ranks: [loss, -loss] max-reduced must give the same value.
  double evaluate(const std::vector<float>& w, const std::string& spec, long step) const {
    double v[2];
    v[0] = model_->loss(w.data());
    v[1] = -v[0];
    check(sqzAllReduce(v, v, 2, sqzFloat64, sqzMax, comm_, nullptr), "loss all-reduce");
    if (v[0] != -v[1] && !(std::isnan(v[0]) && std::isnan(v[1]))) {
      std::fprintf(stderr,
                   "%s: rank %d: %s: the ranks' losses differ at step %ld (%.17g to %.17g):"
                   " their weights diverged\n",
                   kProgram, rank_, spec.c_str(), step, -v[1], v[0]);
      exitNow(1);
    }
    return v[0];
  }

  RunResult run(const std::string& spec, double targetLoss) {
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
      check(
          sqzAllReduceCompressed(g.data(), g.data(), n, sqzFloat32, sqzAvg, codec, comm_, nullptr),
          "sqzAllReduceCompressed");
      const float lr = float(o_.lr);
      for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
      r.trainSeconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
    for (size_t i = 0; i < n; ++i) sum[0] = mix(sum[0] ^ bits[i]);
    sum[1] = ~sum[0];
    check(sqzAllReduce(sum, sum, 2, sqzUint64, sqzMax, comm_, nullptr), "checksum all-reduce");
    if (sum[0] != ~sum[1]) {
      std::fprintf(stderr, "%s: rank %d: %s: the ranks' weights differ after %ld steps\n", kProgram,
                   rank_, spec.c_str(), r.steps);
      exitNow(1);
    }
    return r;
  }

  // 1 for dense, 1/ratio for a spec with ratio=, else 0 (unknown: the calls' ratio is used).
  static double nominalCf(const std::string& spec) {
    if (spec == "dense" || spec.rfind("dense:", 0) == 0) return 1;
    for (size_t at = spec.find(':'); at != std::string::npos; at = spec.find(',', at + 1)) {
      if (spec.compare(at + 1, 6, "ratio=") != 0) continue;
      double ratio = std::strtod(spec.c_str() + at + 7, nullptr);
      return ratio > 0 ? 1 / ratio : 0;
    }
    return 0;
  }

 private:
  const Options& o_;
  sqzComm_t comm_;
  int rank_;
  Model* model_;
};

// ---- Output ----------------------------------------------------------------------------------

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

// The table: its column names before the first run, a line as each run ends (runs can take
// minutes on a slow link), the notes and the ratios to dense after the last.
int specWidth(const Options& o) {
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

std::string trainJsonText(const Options& o, const JsonRunInfo& info, size_t n, size_t features,
                          double initialLoss, double targetLoss,
                          const std::vector<RunResult>& runs) {
  Json doc = jsonPreamble(info);
  Json settings = Json::object();
  settings["model"] = o.softmax ? "softmax" : "quadratic";
  settings["params"] = int64_t(n);
  if (o.softmax)
    settings["features"] = int64_t(features);
  else
    settings["alpha"] = kAlpha;
  settings["lr"] = o.lr;
  if (!o.softmax) {
    settings["noise"] = o.noise;
    settings["decay"] = o.decay;
  }
  settings["target"] = o.target;
  settings["target_loss"] = targetLoss;
  settings["initial_loss"] = initialLoss;
  settings["max_steps"] = o.maxSteps;
  settings["eval_every"] = o.evalEvery;
  settings["seed"] = o.seed;
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

int trainMain(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  if (int status = parseOptions(argc, argv, &o); status >= 0) return status;
  JsonFile json;
  gJson = &json;
  std::string why;
  if (o.jsonPath && launcherRank() <= 0 && !json.open(o.jsonPath, &why)) {
    std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", kProgram, o.jsonPath,
                 why.c_str());
    return 2;
  }
  JsonRunInfo info;
  info.format = kFormat;
  info.program = kProgram;
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
    std::fprintf(stderr, "%s: cannot create the communicator: %s: %s\n", kProgram,
                 sqzGetErrorString(r), sqzGetLastError(nullptr));
    exitNow(1);
  }
  int rank = 0, nranks = 1;
  sqzCommUserRank(comm, &rank);
  sqzCommCount(comm, &nranks);

  std::unique_ptr<Model> model;
  if (o.softmax)
    model = std::make_unique<Softmax>(o, rank);
  else
    model = std::make_unique<Quadratic>(o, rank);
  const size_t n = model->size();
  Trainer trainer(o, comm, rank, model.get());
  // Every spec is tried before any training, so a typo stops the run at once (exit 2).
  for (const std::string& spec : o.specs) {
    sqzCodec_t codec = nullptr;
    if (sqzCodecCreate(&codec, spec.c_str(), n, sqzFloat32, comm) != sqzSuccess) {
      if (rank == 0)
        std::fprintf(stderr, "%s: bad codec spec '%s': %s\n", kProgram, spec.c_str(),
                     sqzGetLastError(comm));
      exitNow(2);
    }
    sqzCodecDestroy(codec);
  }
  info.nranks = nranks;
  info.hosts = gatherHosts(trainer, comm, rank, nranks);

  const std::vector<float> w0(n, 0.0f);
  const double initialLoss = trainer.evaluate(w0, "initial", 0);
  const double targetLoss = o.softmax ? o.target : o.target * initialLoss;
  std::vector<std::string> seen;  // the hosts, each once
  std::string hosts;
  for (const std::string& h : info.hosts)
    if (std::find(seen.begin(), seen.end(), h) == seen.end()) {
      hosts += (seen.empty() ? "" : ",") + h;
      seen.push_back(h);
    }
  if (o.softmax)
    printOnRoot(rank,
                "# %s: softmax regression, %zu features x %d classes (%zu parameters),\n"
                "#   batch %d per rank, held-out loss on %d documents\n",
                kProgram, n / kClasses - 1, kClasses, n, kBatch, kEvalDocs);
  char decay[64] = ", constant";
  if (o.decay > 0) std::snprintf(decay, sizeof decay, " / sqrt(1 + step/%g)", o.decay);
  if (!o.softmax)
    printOnRoot(rank,
                "# %s: quadratic, %zu parameters, curvature (1+k)^-%g shuffled;\n"
                "#   gradient noise %g x rms(grad) per rank%s\n",
                kProgram, n, kAlpha, o.noise, decay);
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
    const size_t features = o.softmax ? n / kClasses - 1 : 0;
    if (!json.commit(trainJsonText(o, info, n, features, initialLoss, targetLoss, runs), &why)) {
      std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", kProgram, o.jsonPath,
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
