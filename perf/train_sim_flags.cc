// sqz-train-sim's flags; see train_sim_flags.h.
#include "train_sim_flags.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sweep_flags.h"

namespace squeeze::perf {
namespace {

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
      kTrainSimProgram, kTrainSimProgram);
}

bool parseDouble(const char* text, double lo, double hi, double* out) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

}  // namespace

int launcherRank() {
  for (const char* var : {"SQZ_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
  return -1;
}

int parseTrainOptions(int argc, char** argv, TrainOptions* o) {
  const bool speak = launcherRank() <= 0;
  auto bad = [&](const std::string& msg) {
    if (speak) std::fprintf(stderr, "%s: %s (-h for help)\n", kTrainSimProgram, msg.c_str());
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
        o->model.softmax = optarg[0] == 's';
        break;
      case 'p':
        if (!parseSize(optarg, &o->model.params, false) || o->model.params == 0 ||
            o->model.params > (1u << 30))
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
        if (!parseDouble(optarg, 0, HUGE_VAL, &o->model.noise))
          return bad("invalid noise " + value('V') + " (need >= 0)");
        o->noiseSet = true;
        break;
      case 'D':
        if (!parseDouble(optarg, 0, HUGE_VAL, &o->model.decay))
          return bad("invalid decay " + value('D') + " (steps >= 0; 0 = constant noise)");
        o->noiseSet = true;
        break;
      case 'S':
        if (!parseInt(optarg, 0, 1L << 62, &v)) return bad("invalid seed " + value('S'));
        o->model.seed = v;
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
  if (o->model.softmax && o->noiseSet) return bad("-V and -D apply to -m quadratic only");
  if (o->model.softmax && o->model.params < kClasses)
    return bad("-m softmax needs -p >= 32 (PARAMS/32 features)");
  if (!o->model.softmax && o->target >= 1)
    return bad("-t is a fraction of the initial loss for -m quadratic (need < 1)");
  if (std::isnan(o->target)) o->target = o->model.softmax ? 1.0 : 0.05;
  if (std::isnan(o->lr)) o->lr = o->model.softmax ? 2.0 : 1.0;
  if (o->specs.empty()) o->specs.push_back("dense");
  return -1;
}

}  // namespace squeeze::perf
