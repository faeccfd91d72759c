// The sqz-*-perf binaries' flags and usage text; see driver_options.h.
#include "driver_options.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "datatypes.h"

namespace squeeze::perf {
namespace {

constexpr int kGuardFlag = 0x100;  // --guard: a long option only

void usage(FILE* out, const PerfColl& coll) {
  const char* program = coll.program;
  std::fprintf(out,
               "Usage: %s [options]\n"
               "%s"
               "  -d, --datatype <type>     int8 uint8 int32 uint32 int64 uint64 half float\n"
               "                            double bfloat16, or all (default float)\n"
               "  -d cuda, -d host          not datatypes: where the buffers live. cuda: memory\n"
               "                            of GPU SQZ_LOCAL_RANK %% count, the calls enqueued on\n"
               "                            a stream and timed to its synchronization; host:\n"
               "                            host memory (default). -d takes a datatype and a\n"
               "                            memory both, e.g. -d cuda -d half\n"
               "  -o, --op <op>             sum prod max min avg, or all (default sum)\n"
               "  -r, --root <rank>         root rank of rooted collectives (default 0)\n",
               program, kSweepUsage);
  if (coll.algoColl)
    std::fprintf(
        out,
        "  -a, --algo <name>         force the algorithm: a name (e.g. ring), or rules by\n"
        "                            bytes per rank (e.g. 0-64K=naive,64K-inf=ring); sets\n"
        "                            SQZ_ALGO=%s:<name>, replacing any SQZ_ALGO\n",
        coll.algoColl);
  else
    std::fprintf(out, "  -a, --algo <name>         not here: %s has no algorithm choice\n",
                 coll.name);
  if (coll.runCompressed)
    std::fprintf(
        out,
        "  -z, --codec <spec>        time the compressed call through a codec, e.g.\n"
        "                            fp16, int8, topk:ratio=0.01 (sqz-info --codecs\n"
        "                            lists the methods and their keys);\n"
        "                            float only, sum or avg; adds the columns codec,\n"
        "                            wire/rank, ratio, relerr and dense; repeat -z for\n"
        "                            several. The pay-off guard is off (auto_dense=0 is\n"
        "                            added to each spec), so every call runs the codec,\n"
        "                            unless the spec sets auto_dense, or --guard, or else\n"
        "                            SQZ_CODEC_AUTO_DENSE says otherwise\n"
        "      --guard               -z with the pay-off guard on (auto_dense=1), as a\n"
        "                            training loop has it by default; the dense column\n"
        "                            counts the timed calls that ran dense\n");
  std::fprintf(out,
               "  -J, --json <file>         also write the rows as JSON (format squeeze-perf/1)\n"
               "                            to <file>, from rank 0; plot them with perf/plot.py\n"
               "  -h, --help                this text\n"
               "Run under sqzrun (sqzrun -n 4 %s ...), mpirun, srun or torchrun for several\n"
               "ranks; without a launcher it runs as a single rank.\n",
               program);
}

}  // namespace

int launcherRank() {
  static const char* const kRankVars[] = {"SQZ_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                          "SLURM_PROCID"};
  for (const char* var : kRankVars) {
    const char* v = std::getenv(var);
    if (v && *v) return std::atoi(v);
  }
  return -1;
}

bool haveLauncherEnv() {
  static const char* const kPairs[][2] = {{"SQZ_RANK", "SQZ_WORLD_SIZE"},
                                          {"RANK", "WORLD_SIZE"},
                                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"PMI_RANK", "PMI_SIZE"},
                                          {"SLURM_PROCID", "SLURM_NTASKS"}};
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v;
  };
  if (set("SQZ_UNIQUE_ID")) return true;  // let the library say what else is missing
  for (const auto& pair : kPairs)
    if (set(pair[0]) && set(pair[1])) return true;
  return false;
}

int parseOptions(int argc, char** argv, const PerfColl& coll, Options* o) {
  const bool speak = launcherRank() <= 0;
  auto bad = [&](const std::string& msg) {
    if (speak) {
      std::fprintf(stderr, "%s: %s\n", coll.program, msg.c_str());
      usage(stderr, coll);
    }
    return 2;
  };
  FlagReader flags(argc, argv, "d:o:r:a:z:h",
                   {
                       {"datatype", required_argument, nullptr, 'd'},
                       {"op", required_argument, nullptr, 'o'},
                       {"root", required_argument, nullptr, 'r'},
                       {"algo", required_argument, nullptr, 'a'},
                       {"codec", required_argument, nullptr, 'z'},
                       {"guard", no_argument, nullptr, kGuardFlag},
                       {"help", no_argument, nullptr, 'h'},
                   },
                   o);
  long v;
  for (int c; (c = flags.next()) != -1;) {
    switch (c) {
      case 'd': {
        if (std::strcmp(optarg, "host") == 0 || std::strcmp(optarg, "cuda") == 0) {
          o->memory = optarg[0] == 'c' ? Memory::kCuda : Memory::kHost;
          break;
        }
        o->types.clear();
        if (std::strcmp(optarg, "all") == 0) {
          for (const TypeName& t : kTypes) o->types.push_back(t.type);
          break;
        }
        for (const TypeName& t : kTypes)
          if (std::strcmp(optarg, t.name) == 0) o->types.push_back(t.type);
        for (const TypeName& t : kTypeAliases)
          if (std::strcmp(optarg, t.name) == 0) o->types.push_back(t.type);
        if (o->types.empty())
          return bad(std::string("unknown datatype '") + optarg +
                     "' for -d (int8 uint8 int32 uint32 int64 uint64 half float double "
                     "bfloat16 all; or cuda, host for the buffers' memory)");
        break;
      }
      case 'o': {
        o->ops.clear();
        for (const OpName& op : kOps)
          if (std::strcmp(optarg, "all") == 0 || std::strcmp(optarg, op.name) == 0)
            o->ops.push_back(op.op);
        if (o->ops.empty())
          return bad(std::string("unknown op '") + optarg + "' for -o (sum prod max min avg all)");
        break;
      }
      case 'r':
        if (!parseInt(optarg, 0, 1 << 24, &v))
          return bad(std::string("invalid root '") + optarg + "' for -r (need a rank >= 0)");
        o->root = static_cast<int>(v);
        break;
      case 'a':
        if (!coll.algoColl)
          return bad(std::string(coll.name) +
                     " has no algorithm choice (it is plain point-to-point); drop -a");
        if (*optarg == '\0') return bad("-a needs an algorithm name, e.g. -a ring");
        o->algo = optarg;
        break;
      case 'z':
        if (!coll.runCompressed)
          return bad(std::string(coll.name) +
                     " has no compressed variant; drop -z (it is for "
                     "sqz-allreduce-perf)");
        if (*optarg == '\0')
          return bad("-z needs a codec spec, e.g. -z fp16 or -z topk:ratio=0.01");
        o->codecs.push_back(optarg);
        break;
      case kGuardFlag:
        if (!coll.runCompressed)
          return bad(std::string(coll.name) + " has no compressed variant; drop --guard");
        o->guard = true;
        break;
      case 'h':
        if (speak) usage(stdout, coll);
        return 0;
      default:
        return bad(flags.error());
    }
  }
  if (o->stepFactor > 1 && o->minBytes == 0)
    return bad("-b 0 never grows with -f; start at -b 1 or more, or step with -i");
  if (!coll.usesOp) o->ops.assign(1, sqzSum);
  if (o->guard && o->codecs.empty())
    return bad("--guard turns on the pay-off guard of -z runs: add -z SPEC, or drop --guard");
  if (!o->codecs.empty()) {
    if (o->types.size() != 1 || o->types[0] != sqzFloat32)
      return bad("-z compresses float32 gradients: drop -d or pass -d float");
    for (sqzRedOp_t op : o->ops)
      if (op != sqzSum && op != sqzAvg)
        return bad(std::string("-z reduces with sum or avg, not ") + opName(op) +
                   ": pass -o sum or -o avg");
  }
  return -1;
}

}  // namespace squeeze::perf
