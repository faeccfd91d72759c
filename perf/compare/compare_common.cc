// Shared driver of the peer all-reduce benchmarks; see compare_common.h.
//
// The flow follows perf/bench.cc, so the numbers mean the same thing as sqz-allreduce-perf's:
// warm up -w calls at the largest and then the smallest size; for every size make one untimed
// call and a barrier, time -n calls together, and report this rank's mean per call, maximised
// over the ranks; then -c checked calls on fresh inputs, compared bit for bit with the locally
// computed sum, the wrong-element counts summed over the ranks. Inputs are small integers (in
// [-5, 5]) so every float32 sum is exact whatever order a library adds in.
#include "compare_common.h"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>

#include "../aligned_buffer.h"
#include "../json_file.h"
#include "../perf_json.h"
#include "../table.h"

namespace squeeze::compare {
namespace {

constexpr unsigned char kPoison = 0xA5;  // 0xA5A5A5A5 is no small integer as a float

// ---- Flags -------------------------------------------------------------------------------------

void usage(FILE* out, const DriverInfo& info) {
  std::fprintf(out,
               "Usage: %s [options]\n"
               "All-reduce of float32 with sum, in sqz-allreduce-perf's columns.\n"
               "%s"
               "  -d, --datatype float      the only type measured (accepted for sqz's flags)\n"
               "  -o, --op sum              the only op measured (accepted for sqz's flags)\n"
               "  -J, --json <file>         also write the results as JSON (squeeze-perf/1)\n",
               info.program, perf::kSweepUsage);
  if (info.algoHelp) std::fprintf(out, "%s", info.algoHelp);
  if (info.takesStore)
    std::fprintf(out,
                 "      --store <dir>         rendezvous directory, existing and shared by the\n"
                 "                            ranks (needed with more than one rank)\n");
  std::fprintf(out, "  -h, --help                this text\n%s", info.launchHint);
}

// ---- Inputs ------------------------------------------------------------------------------------

// Inputs repeat with this period (a prime, so it lines up with no chunk size a library picks):
// one period is computed and then copied, which keeps 256 MB fills cheap.
constexpr size_t kPeriod = 65521;

// Rank `rank`'s element j (j < kPeriod) for checked call `seed`: an integer in [-5, 5]. The same
// formula is in torch_allreduce_perf.py.
float inputValue(size_t j, int rank, uint64_t seed) {
  uint64_t h = (j * 2654435761ull + static_cast<uint64_t>(rank) * 97531ull + seed * 1000003ull) %
               4294967291ull;
  return static_cast<float>((h >> 5) % 11) - 5.0f;
}

// Writes the periodic pattern `period` (kPeriod values) into buf[0 .. count-1].
void fillPeriodic(float* buf, size_t count, const std::vector<float>& period) {
  size_t done = std::min(count, kPeriod);
  std::memcpy(buf, period.data(), done * sizeof(float));
  while (done < count) {  // doubling copies from the filled prefix, which is whole periods
    size_t n = std::min(done, count - done);
    std::memcpy(buf + done, buf, n * sizeof(float));
    done += n;
  }
}

std::vector<float> inputPeriod(int rank, uint64_t seed) {
  std::vector<float> p(kPeriod);
  for (size_t j = 0; j < kPeriod; ++j) p[j] = inputValue(j, rank, seed);
  return p;
}

std::vector<float> sumPeriod(int nranks, uint64_t seed) {
  std::vector<float> p(kPeriod, 0.0f);
  for (int r = 0; r < nranks; ++r)
    for (size_t j = 0; j < kPeriod; ++j) p[j] += inputValue(j, r, seed);
  return p;
}

// ---- Output ------------------------------------------------------------------------------------

using Buffer = perf::AlignedBuffer;

class Bench {
 public:
  Bench(const DriverInfo& info, const Options& o, RankGroup& group)
      : info_(info), o_(o), group_(group), rank_(group.rank()), nranks_(group.size()) {}

  int run(std::vector<Target>& targets, perf::JsonRunInfo& runInfo);

 private:
  void allocate(Buffer* b, size_t count, const char* what);
  std::vector<std::string> printHeader();
  void printColumns(const Target& t);
  void sweep(Target& t);
  void benchTime(Target& t, size_t count, bool inPlace);
  int64_t checkOnce(Target& t, size_t count, bool inPlace);
  bool writeJson(const perf::JsonRunInfo& runInfo) const;

  const DriverInfo& info_;
  const Options& o_;
  RankGroup& group_;
  const int rank_;
  const int nranks_;
  Buffer send_, recv_;
  uint64_t seed_ = 0;
  int errors_ = 0;  // calls with wrong results, over all ranks
  double bwSum_ = 0;
  int bwCount_ = 0;
  std::vector<perf::JsonRow> rows_;
};

void Bench::allocate(Buffer* b, size_t count, const char* what) {
  size_t bytes = count * sizeof(float);
  if (!b->allocate(bytes))
    fail(info_.program, rank_,
         "cannot allocate " + std::to_string(perf::AlignedBuffer::roundedBytes(bytes)) +
             " bytes for the " + what + " buffer: out of memory (lower -e)");
}

// sqz-allreduce-perf's header; returns every rank's host name (on rank 0) for the JSON.
std::vector<std::string> Bench::printHeader() {
  perf::printOnRoot(rank_, "%s", perf::headerLines(o_).c_str());
  std::vector<std::string> hosts = group_.gatherToRoot(perf::hostName());
  std::vector<std::string> pids = group_.gatherToRoot(std::to_string(getpid()));
  for (int r = 0; rank_ == 0 && r < nranks_; ++r)
    perf::printOnRoot(rank_, "%s",
                      perf::rankLine(r, pids[static_cast<size_t>(r)].c_str(),
                                     hosts[static_cast<size_t>(r)].c_str())
                          .c_str());
  perf::printOnRoot(rank_, "#\n");
  return hosts;
}

void Bench::printColumns(const Target& t) {
  perf::printOnRoot(rank_, "# %s (%s)\n", t.title.empty() ? t.algo.c_str() : t.title.c_str(),
                    t.outOfPlace && t.inPlace ? "out of place and in place"
                    : t.inPlace               ? "in place only: the out-of-place columns are N/A"
                                              : "out of place only: the in-place columns are N/A");
  perf::printOnRoot(rank_, "%s%salgo\n%s\n", perf::columnGroupLine().c_str(),
                    perf::columnNames().c_str(), perf::columnUnits().c_str());
}

int64_t Bench::checkOnce(Target& t, size_t count, bool inPlace) {
  const uint64_t seed = ++seed_;
  std::memset(recv_.floats(), kPoison, count * sizeof(float));
  fillPeriodic(inPlace ? recv_.floats() : send_.floats(), count, inputPeriod(rank_, seed));
  t.call(inPlace);

  const std::vector<float> want = sumPeriod(nranks_, seed);
  const float* got = recv_.floats();
  int64_t wrong = 0;
  size_t first = count;
  for (size_t base = 0; base < count; base += kPeriod) {
    size_t n = std::min(kPeriod, count - base);
    if (std::memcmp(got + base, want.data(), n * sizeof(float)) == 0) continue;
    for (size_t j = 0; j < n; ++j) {
      if (std::memcmp(got + base + j, &want[j], sizeof(float)) != 0) {
        if (first == count) first = base + j;
        ++wrong;
      }
    }
  }
  if (wrong)
    std::fprintf(stderr,
                 "%s: rank %d: %zu B float sum %s: %" PRId64
                 " wrong elements, first at %zu: expected %g got %g\n",
                 info_.program, rank_, count * sizeof(float), inPlace ? "in-place" : "out-of-place",
                 wrong, first, static_cast<double>(want[first % kPeriod]),
                 static_cast<double>(got[first]));
  return wrong;
}

void Bench::benchTime(Target& t, size_t count, bool inPlace) {
  if (!(inPlace ? t.inPlace : t.outOfPlace)) {
    perf::printOnRoot(rank_, "%s", perf::naCells().c_str());
    return;
  }
  // Sane inputs for the timed calls too (in place they grow n-fold per call, as in nccl-tests).
  if (o_.check)
    fillPeriodic(inPlace ? recv_.floats() : send_.floats(), count, inputPeriod(rank_, 0));
  t.call(inPlace);  // untimed: brings every rank to this call
  group_.barrier();

  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o_.iters; ++i) t.call(inPlace);
  auto t1 = std::chrono::steady_clock::now();
  double sec = group_.maxOverRanks(std::chrono::duration<double>(t1 - t0).count() / o_.iters);

  const size_t bytes = count * sizeof(float);
  double algBw = sec > 0 ? static_cast<double>(bytes) / 1.0e9 / sec : 0.0;
  double busBw = algBw * (nranks_ > 0 ? 2.0 * (nranks_ - 1) / nranks_ : 0.0);

  int64_t wrong = 0;
  for (int c = 0; c < o_.check; ++c) {
    wrong = group_.sumOverRanks(checkOnce(t, count, inPlace));
    if (wrong) break;
  }
  if (wrong) ++errors_;

  perf::JsonRow row;
  row.size = bytes;
  row.count = count;
  row.type = "float";
  row.redop = "sum";
  row.inPlace = inPlace;
  row.timeUs = sec * 1.0e6;
  row.algBw = algBw;
  row.busBw = busBw;
  row.wrong = o_.check ? wrong : -1;
  row.algo = t.algo;
  perf::printOnRoot(rank_, "%s", perf::timedCells(row.timeUs, algBw, busBw, row.wrong).c_str());
  bwSum_ += busBw;
  ++bwCount_;
  rows_.push_back(std::move(row));
}

void Bench::sweep(Target& t) {
  printColumns(t);
  group_.barrier();
  const bool warmInPlace = !t.outOfPlace;
  for (size_t bytes : {o_.maxBytes, o_.minBytes}) {
    t.setup(bytes / sizeof(float), send_.floats(), recv_.floats());
    for (int i = 0; i < o_.warmup; ++i) t.call(warmInPlace);
  }
  for (size_t size = o_.minBytes; size <= o_.maxBytes;) {
    const size_t count = size / sizeof(float);
    t.setup(count, send_.floats(), recv_.floats());
    perf::printOnRoot(rank_, "%s",
                      perf::rowStart(count * sizeof(float), count, "float", "sum", -1).c_str());
    benchTime(t, count, false);
    benchTime(t, count, true);
    perf::printOnRoot(rank_, "  %s\n", t.algo.c_str());
    if (!perf::nextSize(o_, &size)) break;
  }
}

bool Bench::writeJson(const perf::JsonRunInfo& runInfo) const {
  perf::JsonFile file;
  std::string why;
  if (!file.open(o_.jsonPath, &why) || !file.commit(perf::perfJsonText(runInfo, rows_), &why)) {
    std::fprintf(stderr, "%s: cannot write -J %s: %s\n", info_.program, o_.jsonPath, why.c_str());
    return false;
  }
  return true;
}

int Bench::run(std::vector<Target>& targets, perf::JsonRunInfo& runInfo) {
  runInfo.hosts = printHeader();
  runInfo.nranks = nranks_;
  const size_t maxCount = o_.maxBytes / sizeof(float);
  allocate(&send_, maxCount, "send");
  allocate(&recv_, maxCount, "receive");
  for (Target& t : targets) sweep(t);
  perf::printOnRoot(rank_, "%s", perf::summaryLines(errors_, bwSum_, bwCount_).c_str());
  std::fflush(stdout);
  bool jsonOk = rank_ != 0 || !o_.jsonPath || writeJson(runInfo);
  return errors_ || !jsonOk ? 1 : 0;
}

}  // namespace

int parseOptions(int argc, char** argv, const DriverInfo& info, bool speak, Options* o) {
  auto bad = [&](const std::string& msg) {
    std::fprintf(stderr, "%s: %s\n", info.program, msg.c_str());
    if (speak) usage(stderr, info);
    return 2;
  };
  enum { kStore = 1000 };
  perf::FlagReader flags(argc, argv, "d:o:A:h",
                         {
                             {"datatype", required_argument, nullptr, 'd'},
                             {"op", required_argument, nullptr, 'o'},
                             {"algo", required_argument, nullptr, 'A'},
                             {"store", required_argument, nullptr, kStore},
                             {"help", no_argument, nullptr, 'h'},
                         },
                         o);
  for (int c; (c = flags.next()) != -1;) {
    switch (c) {
      case 'd':
        if (std::strcmp(optarg, "float") != 0 && std::strcmp(optarg, "fp32") != 0 &&
            std::strcmp(optarg, "float32") != 0)
          return bad(std::string("-d ") + optarg +
                     ": the peer drivers measure float32 only (drop -d or pass -d float)");
        break;
      case 'o':
        if (std::strcmp(optarg, "sum") != 0)
          return bad(std::string("-o ") + optarg +
                     ": the peer drivers measure sum only (drop -o or pass -o sum)");
        break;
      case 'A':
        if (!info.algoHelp) return bad("-A: this driver has no algorithm choice; drop it");
        if (std::find(info.algos.begin(), info.algos.end(), optarg) == info.algos.end()) {
          std::string names;
          for (const std::string& a : info.algos) names += (names.empty() ? "" : ", ") + a;
          return bad(std::string("unknown algorithm '") + optarg + "' for -A (" + names + ")");
        }
        o->algo = optarg;
        break;
      case kStore:
        if (!info.takesStore) return bad("--store: this driver needs no store; drop it");
        if (*optarg == '\0') return bad("--store needs a directory");
        o->store = optarg;
        break;
      case 'h':
        if (speak) usage(stdout, info);
        return 0;
      default:
        return bad(flags.error());
    }
  }
  if (o->minBytes < sizeof(float))
    return bad("-b " + std::to_string(o->minBytes) + ": the smallest size is 4 bytes (one float)");
  if (o->maxBytes / sizeof(float) > kMaxCount)
    return bad("-e " + std::to_string(o->maxBytes) + ": the peers take at most " +
               std::to_string(kMaxCount) + " elements (an int count)");
  if (o->jsonPath) {
    // Fail now rather than after the whole sweep.
    const std::string path = o->jsonPath;
    size_t slash = path.find_last_of('/');
    const std::string dir =
        slash == std::string::npos ? std::string(".") : path.substr(0, slash + 1);
    if (access(dir.c_str(), W_OK) != 0)
      return bad("-J " + path + ": cannot write into " + dir + ": " + std::strerror(errno));
  }
  return -1;
}

bool launcherRankAndSize(int* rank, int* size, std::string* error) {
  static const char* const kPairs[][2] = {{"SQZ_RANK", "SQZ_WORLD_SIZE"},
                                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}};
  for (const auto& pair : kPairs) {
    const char* r = std::getenv(pair[0]);
    const char* s = std::getenv(pair[1]);
    if (!(r && *r) && !(s && *s)) continue;
    long rv = -1, sv = -1;
    if (!r || !s || !perf::parseInt(r, 0, 1 << 24, &rv) || !perf::parseInt(s, 1, 1 << 24, &sv) ||
        rv >= sv) {
      *error = std::string(pair[0]) + "=" + (r ? r : "(unset)") + " and " + pair[1] + "=" +
               (s ? s : "(unset)") + " do not describe a rank (need 0 <= rank < size)";
      return false;
    }
    *rank = static_cast<int>(rv);
    *size = static_cast<int>(sv);
    return true;
  }
  *rank = 0;
  *size = 1;
  return true;
}

int runBenchmark(int argc, char** argv, const DriverInfo& info, const Options& o, RankGroup& group,
                 std::vector<Target>& targets, const char* transport) {
  perf::JsonRunInfo runInfo;
  runInfo.library = info.library;
  runInfo.program = info.program;
  runInfo.collective = "allreduce";
  runInfo.transport = transport;
  runInfo.argc = argc;
  runInfo.argv = argv;
  runInfo.started = std::time(nullptr);
  Bench bench(info, o, group);
  return bench.run(targets, runInfo);
}

void fail(const char* program, int rank, const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: rank %d: %s\n", program, rank, message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace squeeze::compare
