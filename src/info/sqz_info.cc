// sqz-info: what this build of Squeeze is and how it is configured here. Prints the version,
// the built features (from squeeze_config.h and the transport table), every SQZ_* parameter
// (from the one registry in base/params.h: key, current value, default, help), the codec methods
// (from compress/registry.cc, the table sqzCodecCreate looks them up in) and, with hwloc,
// this host's topology, which is what sqzrun --bind uses. Modelled on ucc_info
// (openucx/ucc:tools/info/ucc_info.c): each section is one function, chosen by an option.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "algorithms/tuner.h"
#include "api/api_guard.h"
#include "base/error.h"
#include "base/params.h"
#include "base/strings.h"
#include "compress/codecs.h"
#include "core/calibrate.h"
#include "core/communicator.h"
#include "core/config.h"
#include "info/topology.h"
#include "squeeze/squeeze.h"
#include "squeeze_config.h"
#include "transports/transport.h"
#if SQZ_HAVE_CUDA
#include "device/cuda/runtime.h"
#endif

namespace squeeze {
namespace {

constexpr const char kUsage[] =
    "Usage: sqz-info [--params] [--algorithms] [--codecs] [--tuning [-n RANKS]] [-h]\n"
    "\n"
    "Prints the Squeeze version, the features this build has (hwloc, MPI, transports), every\n"
    "SQZ_* parameter with its current value (from the environment, else the default), default\n"
    "and help, the algorithms, the codec methods, and, when built with hwloc, this host's\n"
    "topology (the cores sqzrun --bind uses).\n"
    "\n"
    "Options:\n"
    "  --params      print only the parameter table\n"
    "  --algorithms  print only the algorithm table (every collective's algorithms)\n"
    "  --codecs      print only the codec methods: the names a codec spec (sqzCodecCreate,\n"
    "                sqz-allreduce-perf -z) starts with, and the keys each takes\n"
    "  --tuning      print only the tuner's choice per collective and size, for tcp and shm,\n"
    "                from the cost model as SQZ_TCP_*/SQZ_SHM_*/SQZ_REDUCE_GBPS set it; run as\n"
    "                a job (sqzrun -n N sqz-info --tuning, or any launcher that sets SQZ_RANK\n"
    "                and SQZ_WORLD_SIZE), rank 0 prints what init-time calibration measured on\n"
    "                every link and the model and choices the job's tuner uses\n"
    "  -n RANKS      rank count for --tuning (default 4)\n"
    "  -h, --help    print this help and exit\n";

// The sections, in output order. A new one (--tuning: the algorithm table and the cost model's
// choice per size) is a bit here, an option in parseSections() and a print function.
enum Section : unsigned {
  kVersion = 1u << 0,
  kFeatures = 1u << 1,
  kParams = 1u << 2,
  kTopology = 1u << 3,
  kAlgorithms = 1u << 4,
  kTuning = 1u << 5,
  kCodecs = 1u << 6,
  kAllSections = kVersion | kFeatures | kParams | kAlgorithms | kCodecs | kTopology,
};

const char* yesNo(bool b) { return b ? "yes" : "no"; }

void printVersion() {
  int code = 0;
  std::string library = sqzGetVersion(&code) == sqzSuccess ? strCat(code) : "unavailable";
  std::printf("Squeeze %s (sqzGetVersion: %s)\n", SQZ_VERSION_STRING, library.c_str());
}

void printFeatures() {
  std::string transports;
  for (const std::string& t : availableTransports())
    transports += (transports.empty() ? "" : ", ") + t;
  std::printf("\nFeatures\n");
  std::printf("  %-11s %s\n", "hwloc", yesNo(SQZ_HAVE_HWLOC));
  std::printf("  %-11s %s\n", "mpi", yesNo(SQZ_HAVE_MPI));
#if SQZ_HAVE_CUDA
  // Built with CUDA: say whether device buffers can be used here, and why not.
  const int gpus = cuda::deviceCount();
  std::printf("  %-11s yes: %s\n", "cuda",
              gpus ? strCat(gpus, " GPU(s) usable").c_str() : cuda::unavailableReason().c_str());
#else
  std::printf("  %-11s %s\n", "cuda", yesNo(SQZ_HAVE_CUDA));
#endif
  std::printf("  %-11s %s\n", "ibverbs", yesNo(SQZ_HAVE_IBVERBS));
  std::printf("  %-11s %s\n", "ucx", yesNo(SQZ_HAVE_UCX));
  std::printf("  %-11s %s\n", "transports", transports.empty() ? "(none)" : transports.c_str());
}

// Credentials are never printed: a log of sqz-info under sqzrun would leak the job secret.
bool isSecret(const std::string& key) { return key == "SQZ_UNIQUE_ID" || key == "SQZ_SECRET"; }

std::string shown(const std::string& v) { return v.empty() ? "\"\"" : v; }

void printParams(bool withTitle) {
  struct Row {
    std::string key, value, def, help;
  };
  std::vector<Row> rows;
  rows.push_back({"KEY", "VALUE", "DEFAULT", "HELP"});
  for (const ParamInfo& p : paramTable()) {
    std::string value = paramValueString(p);
    if (isSecret(p.key) && std::getenv(p.key)) value = "(set, hidden)";
    rows.push_back({p.key, shown(value), shown(p.defaultValue), p.help});
  }
  size_t wKey = 0, wValue = 0, wDef = 0;
  for (const Row& r : rows) {
    wKey = std::max(wKey, r.key.size());
    wValue = std::max(wValue, r.value.size());
    wDef = std::max(wDef, r.def.size());
  }
  if (withTitle) std::printf("\nParameters (value: from the environment, else the default)\n");
  for (const Row& r : rows)
    std::printf("  %-*s  %-*s  %-*s  %s\n", static_cast<int>(wKey), r.key.c_str(),
                static_cast<int>(wValue), r.value.c_str(), static_cast<int>(wDef), r.def.c_str(),
                r.help.c_str());
  // The same check a communicator makes at creation: say now if a set value will not parse.
  try {
    loadParams();
  } catch (const Error& e) {
    std::printf("  warning: %s\n", e.what());
  }
}

void printTopology() {
  std::string error;
  auto topo = loadTopology(&error);
  if (!topo) {
    std::printf("\nTopology: unavailable: %s\n", error.c_str());
    return;
  }
  size_t ncores = topo->cores.size();
  std::printf("\nTopology (hwloc %s)\n", topo->hwlocVersion.c_str());
  std::printf("  packages %d, NUMA nodes %d, cores %zu, PUs %d\n", topo->packages, topo->numaNodes,
              ncores, topo->pus);
  std::printf("  sqzrun --bind puts rank i on core i mod %zu:\n", ncores);
  for (const CoreInfo& c : topo->cores) {
    std::string where = c.osIndex >= 0 ? strCat("P#", c.osIndex) : std::string("P#?");
    if (c.package >= 0) where += strCat(", package ", c.package);
    if (c.numaNode >= 0) where += strCat(", NUMA node ", c.numaNode);
    std::printf("  core %d (%s): PUs %s\n", c.logicalIndex, where.c_str(),
                formatCpuList(c.pus).c_str());
  }
}

void printAlgorithms(bool withTitle) {
  if (withTitle) std::printf("\nAlgorithms (force with SQZ_ALGO)\n");
  for (const AlgorithmEntry& a : algorithms())
    std::printf("  %-14s %-6s %s\n", collKindName(a.coll), a.name, a.description);
}

// A spec is "method:key=value,...". The keys every lossy method takes (ef, min_bytes,
// auto_dense: createCodecHandle adds them) and an adaptive one's base keys are said once, below.
void printCodecs(bool withTitle) {
  if (withTitle) std::printf("\nCodecs (sqzCodecCreate specs, e.g. topk:ratio=0.01)\n");
  size_t wName = 6, wKeys = 4;  // the headings' widths
  for (const CodecMethod& m : codecMethods()) {
    wName = std::max(wName, std::string(m.name).size());
    wKeys = std::max(wKeys, std::string(m.keys).size());
  }
  std::printf("  %-*s  %-*s  %s\n", static_cast<int>(wName), "METHOD", static_cast<int>(wKeys),
              "KEYS", "WHAT IT SENDS");
  for (const CodecMethod& m : codecMethods())
    std::printf("  %-*s  %-*s  %s%s\n", static_cast<int>(wName), m.name,
                static_cast<int>(wKeys), *m.keys ? m.keys : "-", m.description,
                m.lossy ? "" : " (lossless)");
  std::printf(
      "  Every lossy method also takes ef, min_bytes and auto_dense; one with a base key takes\n"
      "  its base method's keys too. docs/compression.md says what each does.\n");
}

int tuningRanks = 4;

// 8 B to 256 MiB: powers of 8, and 256 MiB.
std::vector<size_t> tuningSizes() {
  std::vector<size_t> sizes;
  for (size_t b = 8; b <= (256u << 20); b *= 8) sizes.push_back(b);
  sizes.push_back(256u << 20);
  return sizes;
}

// Under a launcher: build a communicator, which calibrates as any job's does, and print on rank
// 0 what it learned and how its tuner prices. The other ranks print nothing.
void printLearnedTuning() {
  sqzComm_t comm = nullptr;
  if (sqzResult_t rc = sqzCommInitFromEnv(&comm, nullptr); rc != sqzSuccess)
    raise(ErrorCode::kInvalidUsage, "--tuning under a launcher: ", sqzGetErrorString(rc), ": ",
          sqzGetLastError(nullptr));
  const Communicator& c = *comm->impl;
  if (c.rank() == 0) {
    const Calibration& cal = c.calibration();
    const MeasuredTerms& t = cal.terms;
    std::printf("# a job of %d ranks: the tuner prices \"%s\" (%s), rows %s\n", c.size(),
                c.tunerTransport().c_str(),
                c.tunerTransport() == "net" ? "ranks on several hosts" : "ranks on one host",
                c.tunerRows().c_str());
    if (cal.probe == Probe::kNone) {
      std::printf("# calibration did not run (SQZ_TUNER_CALIBRATE=0, or SQZ_ALGO set): the "
                  "configured constants stand\n");
    } else {
      std::printf("# measured at init in %.1f ms (%s): every link, half a small round trip and "
                  "the per-byte rate\n",
                  t.seconds * 1e3,
                  cal.probe == Probe::kPair ? "rank 0 and one partner" : "every ring link");
      for (const LinkTerms& l : cal.links)
        std::printf("#   link %d<->%d: %8.1f us %9.4f GB/s\n", l.a, l.b, l.alpha * 1e6,
                    1e-9 / l.beta);
      std::printf("# slowest: %.1f us, %.4f GB/s; reduce kernel %.2f GB/s (slowest rank)\n",
                  t.alpha * 1e6, 1e-9 / t.beta, 1e-9 / t.gamma);
    }
    const CostModel& m = c.tuner().model();
    if (m.anchorBytes > 0) {
      std::printf("# all-reduce timed at %zu B (median of a few calls, slowest rank):",
                  size_t(m.anchorBytes));
      for (const AlgorithmEntry& a : algorithms())
        if (a.coll == CollKind::kAllReduce && a.id != AlgoId::kDirect)
          std::printf(" %s %.1f us", a.name, m.anchorSeconds[static_cast<int>(a.id)] * 1e6);
      std::printf("\n");
    }
    // The job's sizes: 8 B, then powers of 4 from 1 KiB to 256 MiB.
    std::vector<size_t> sizes = {8};
    for (size_t b = 1 << 10; b <= (256u << 20); b *= 4) sizes.push_back(b);
    for (CollKind k : {CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduce,
                       CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAlltoAll})
      std::fputs(c.tuner().choiceTable(k, c.size(), sizes).c_str(), stdout);
    std::fflush(stdout);
  }
  sqzCommDestroy(comm);
}

void printTuning() {
  if (std::getenv("SQZ_RANK") && std::getenv("SQZ_WORLD_SIZE")) return printLearnedTuning();
  CommConfig config = CommConfig::fromParams(loadParams());
  const std::vector<size_t> sizes = tuningSizes();
  std::printf("# From the configured constants. A job calibrates at init (SQZ_TUNER_CALIBRATE): "
              "between hosts it measures every link and times each all-reduce at 4 KiB; run "
              "sqz-info --tuning as a job (sqzrun, netlab.sh run) to see what it learns.\n");
  for (auto [name, model] : {std::pair{"tcp between hosts", config.netModel},
                             std::pair{"tcp on one host", config.tcpModel},
                             std::pair{"shm", config.shmModel}}) {
    Tuner tuner("", model);
    for (CollKind k : {CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduce,
                       CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAlltoAll}) {
      std::printf("\n# over %s: ", name);
      std::fputs(tuner.choiceTable(k, tuningRanks, sizes).c_str(), stdout);
      if (k == CollKind::kAllReduce && std::string(name) == "shm")
        std::printf(
            "# choice: calls that direct cannot run (codecs, device memory, a peer over "
            "another transport, SQZ_SHM_DIRECT_BYTES=0); dense host calls run direct\n");
    }
  }
  if (!config.algoSpec.empty())
    std::printf("\nSQZ_ALGO='%s' overrides the model where its rules match.\n",
                config.algoSpec.c_str());
}

struct UsageError {
  std::string message;
};

// Returns the sections to print; 0 for --help.
unsigned parseSections(int argc, char** argv) {
  unsigned sections = kAllSections;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") return 0;
    if (arg == "--params") {
      sections = kParams;
    } else if (arg == "--algorithms") {
      sections = kAlgorithms;
    } else if (arg == "--codecs") {
      sections = kCodecs;
    } else if (arg == "--tuning") {
      sections = kTuning;
    } else if (arg == "-n" && i + 1 < argc) {
      tuningRanks = std::atoi(argv[++i]);
      if (tuningRanks < 1 || tuningRanks > 65536)
        throw UsageError{strCat("-n needs a rank count from 1 to 65536, not '", argv[i], "'")};
    } else {
      throw UsageError{strCat("unknown argument '", arg, "'")};
    }
  }
  return sections;
}

}  // namespace
}  // namespace squeeze

int main(int argc, char** argv) {
  using namespace squeeze;
  unsigned sections;
  try {
    sections = parseSections(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "sqz-info: %s\n\n%s", e.message.c_str(), kUsage);
    return 2;
  }
  if (sections == 0) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    if (sections & kVersion) printVersion();
    if (sections & kFeatures) printFeatures();
    if (sections & kParams) printParams(sections != kParams);
    if (sections & kAlgorithms) printAlgorithms(sections != kAlgorithms);
    if (sections & kCodecs) printCodecs(sections != kCodecs);
    if (sections & kTuning) printTuning();
    if (sections & kTopology) printTopology();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "sqz-info: %s\n", e.what());
    return 1;
  }
  return 0;
}
