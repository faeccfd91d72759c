// Shared driver of the peer all-reduce benchmarks; see compare_common.h.
//
// The flow follows perf/common.cc, so the numbers mean the same thing as sqz-allreduce-perf's:
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
#include <map>

extern char** environ;

namespace squeeze::compare {
namespace {

constexpr size_t kAlignment = 4096;
constexpr unsigned char kPoison = 0xA5;  // 0xA5A5A5A5 is no small integer as a float

// ---- Flags -------------------------------------------------------------------------------------

void usage(FILE* out, const DriverInfo& info) {
  std::fprintf(out,
               "Usage: %s [options]\n"
               "All-reduce of float32 with sum, in sqz-allreduce-perf's columns.\n"
               "  -b, --minbytes <size>     smallest size in bytes (default 32M; K/M/G suffixes)\n"
               "  -e, --maxbytes <size>     largest size in bytes (default 32M)\n"
               "  -f, --stepfactor <n>      multiply the size by n each step (default 2;\n"
               "                            1 means add -i bytes instead)\n"
               "  -i, --stepbytes <size>    add this many bytes each step (instead of -f)\n"
               "  -n, --iters <n>           timed iterations per size (default 20)\n"
               "  -w, --warmup_iters <n>    warm-up iterations (default 5)\n"
               "  -c, --check <n>           checked calls per size, 0 to skip (default 1)\n"
               "  -d, --datatype float      the only type measured (accepted for sqz's flags)\n"
               "  -o, --op sum              the only op measured (accepted for sqz's flags)\n"
               "  -J, --json <file>         also write the results as JSON (squeeze-perf/1)\n",
               info.program);
  if (info.algoHelp) std::fprintf(out, "%s", info.algoHelp);
  if (info.takesStore)
    std::fprintf(out,
                 "      --store <dir>         rendezvous directory, existing and shared by the\n"
                 "                            ranks (needed with more than one rank)\n");
  std::fprintf(out, "  -h, --help                this text\n%s", info.launchHint);
}

// "<number>[K|M|G][B]", as sqz-allreduce-perf reads it.
bool parseSize(const char* text, size_t* out) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (end == text || errno != 0 || !(v >= 0)) return false;
  double unit = 1;
  switch (*end) {
    case 'k':
    case 'K':
      unit = 1024.0;
      ++end;
      break;
    case 'm':
    case 'M':
      unit = 1024.0 * 1024;
      ++end;
      break;
    case 'g':
    case 'G':
      unit = 1024.0 * 1024 * 1024;
      ++end;
      break;
    default:
      break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  double bytes = v * unit;
  if (bytes > 4.0e18) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

bool parseInt(const char* text, long lo, long hi, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 0);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
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

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

struct Row {
  size_t size;
  size_t count;
  bool inPlace;
  double timeUs;
  double algBw;
  double busBw;
  int64_t wrong;  // < 0: not checked
  std::string algo;
};

struct Buffer {
  float* ptr = nullptr;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(ptr); }
};

class Bench {
 public:
  Bench(const DriverInfo& info, const Options& o, RankGroup& group)
      : info_(info), o_(o), group_(group), rank_(group.rank()), nranks_(group.size()) {}

  int run(std::vector<Target>& targets, const std::string& command, const char* transport);

 private:
  void print(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  void allocate(Buffer* b, size_t count, const char* what);
  std::vector<std::string> printHeader();
  void printColumns(const Target& t);
  void sweep(Target& t);
  void benchTime(Target& t, size_t count, bool inPlace);
  int64_t checkOnce(Target& t, size_t count, bool inPlace);
  bool writeJson(const std::vector<std::string>& hosts, const std::string& command,
                 const char* transport) const;

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
  std::vector<Row> rows_;
};

void Bench::print(const char* fmt, ...) const {
  if (rank_ != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
}

void Bench::allocate(Buffer* b, size_t count, const char* what) {
  size_t bytes = count * sizeof(float);
  size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  b->ptr = static_cast<float*>(std::aligned_alloc(kAlignment, rounded));
  if (!b->ptr)
    fail(info_.program, rank_,
         "cannot allocate " + std::to_string(rounded) + " bytes for the " + what +
             " buffer: out of memory (lower -e)");
  std::memset(b->ptr, 0, rounded);  // touch the pages now, not in the first timed call
}

// sqz-allreduce-perf's header; returns every rank's host name (on rank 0) for the JSON.
std::vector<std::string> Bench::printHeader() {
  print(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: 1 validation: %d graph: 0\n",
      o_.minBytes, o_.maxBytes, o_.stepFactor > 1 ? o_.stepFactor : o_.stepBytes,
      o_.stepFactor > 1 ? "factor" : "bytes", o_.warmup, o_.iters, o_.check);
  print("#\n# Using devices\n");
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  std::vector<std::string> hosts = group_.gatherToRoot(host);
  std::vector<std::string> pids = group_.gatherToRoot(std::to_string(getpid()));
  for (int r = 0; rank_ == 0 && r < nranks_; ++r)
    print("#  Rank %2d Group %2d Pid %6s on %10s device %2d [host memory]\n", r, 0,
          pids[static_cast<size_t>(r)].c_str(), hosts[static_cast<size_t>(r)].c_str(), 0);
  print("#\n");
  return hosts;
}

void Bench::printColumns(const Target& t) {
  print("# %s (%s)\n", t.title.empty() ? t.algo.c_str() : t.title.c_str(),
        t.outOfPlace && t.inPlace ? "out of place and in place"
        : t.inPlace               ? "in place only: the out-of-place columns are N/A"
                                  : "out of place only: the in-place columns are N/A");
  print(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
      "\n",
      "", "", "", "", "");
  print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %s\n", "size", "count",
        "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
        "#wrong", "algo");
  print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
        "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

int64_t Bench::checkOnce(Target& t, size_t count, bool inPlace) {
  const uint64_t seed = ++seed_;
  std::memset(recv_.ptr, kPoison, count * sizeof(float));
  fillPeriodic(inPlace ? recv_.ptr : send_.ptr, count, inputPeriod(rank_, seed));
  t.call(inPlace);

  const std::vector<float> want = sumPeriod(nranks_, seed);
  const float* got = recv_.ptr;
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
    print("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  // Sane inputs for the timed calls too (in place they grow n-fold per call, as in nccl-tests).
  if (o_.check) fillPeriodic(inPlace ? recv_.ptr : send_.ptr, count, inputPeriod(rank_, 0));
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

  double us = sec * 1.0e6;
  print("  %7.*f  %6.2f  %6.2f", us >= 10000.0 ? 0 : us >= 100.0 ? 1 : 2, us, algBw, busBw);
  if (o_.check)
    print("  %5" PRId64, wrong);
  else
    print("  %5s", "N/A");
  bwSum_ += busBw;
  ++bwCount_;
  rows_.push_back({bytes, count, inPlace, us, algBw, busBw, o_.check ? wrong : -1, t.algo});
}

void Bench::sweep(Target& t) {
  printColumns(t);
  group_.barrier();
  const bool warmInPlace = !t.outOfPlace;
  for (size_t bytes : {o_.maxBytes, o_.minBytes}) {
    t.setup(bytes / sizeof(float), send_.ptr, recv_.ptr);
    for (int i = 0; i < o_.warmup; ++i) t.call(warmInPlace);
  }
  for (size_t size = o_.minBytes; size <= o_.maxBytes;) {
    const size_t count = size / sizeof(float);
    t.setup(count, send_.ptr, recv_.ptr);
    print("%12zu  %12zu  %8s  %6s  %6d", count * sizeof(float), count, "float", "sum", -1);
    benchTime(t, count, false);
    benchTime(t, count, true);
    print("  %s\n", t.algo.c_str());
    if (o_.stepFactor > 1) {
      if (size > o_.maxBytes / o_.stepFactor) break;
      size *= o_.stepFactor;
    } else {
      if (size > o_.maxBytes - o_.stepBytes) break;
      size += o_.stepBytes;
    }
  }
}

bool Bench::writeJson(const std::vector<std::string>& hosts, const std::string& command,
                      const char* transport) const {
  char date[32];
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);

  std::map<std::string, std::string> env;  // sorted, so runs diff cleanly
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    if (name.rfind("SQZ_", 0) == 0 || name.rfind("GLOO_", 0) == 0 ||
        name.rfind("OMPI_MCA_", 0) == 0)
      env[name] = kv.substr(eq + 1);
  }

  std::string j = "{\n  \"format\": \"squeeze-perf/1\",\n";
  j += "  \"library\": " + jsonString(info_.library) + ",\n";
  j += "  \"program\": " + jsonString(info_.program) + ",\n";
  j += "  \"collective\": \"allreduce\",\n";
  j += "  \"nranks\": " + std::to_string(nranks_) + ",\n  \"hosts\": [";
  for (size_t i = 0; i < hosts.size(); ++i) j += (i ? ", " : "") + jsonString(hosts[i]);
  j += "],\n  \"transport\": " + (transport ? jsonString(transport) : std::string("null")) + ",\n";
  j += "  \"command\": " + jsonString(command) + ",\n";
  j += "  \"date\": " + jsonString(date) + ",\n  \"env\": {";
  bool firstEnv = true;
  for (const auto& [name, value] : env) {
    j += (firstEnv ? "" : ", ") + jsonString(name) + ": " + jsonString(value);
    firstEnv = false;
  }
  j += "},\n  \"rows\": [";
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    char line[512];
    std::snprintf(
        line, sizeof line,
        "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"float\", \"redop\": \"sum\", "
        "\"root\": -1, \"inplace\": %s, \"time_us\": %.6g, \"algbw\": %.6g, "
        "\"busbw\": %.6g, \"wrong\": ",
        i ? "," : "", r.size, r.count, r.inPlace ? "true" : "false", r.timeUs, r.algBw, r.busBw);
    j += line;
    j += r.wrong >= 0 ? std::to_string(r.wrong) : std::string("null");
    j += ", \"algo\": " + jsonString(r.algo) +
         ", \"codec\": null, \"wire_per_rank\": null, \"ratio\": null, \"relerr\": null}";
  }
  j += "\n  ]\n}\n";

  // Through a temporary file, so a killed run leaves no half-written FILE.
  const std::string tmp = o_.jsonPath + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "%s: cannot write -J %s: %s\n", info_.program, tmp.c_str(),
                 std::strerror(errno));
    return false;
  }
  bool ok = std::fwrite(j.data(), 1, j.size(), f) == j.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), o_.jsonPath.c_str()) != 0) {
    std::fprintf(stderr, "%s: cannot write -J %s: %s\n", info_.program, o_.jsonPath.c_str(),
                 std::strerror(errno));
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

int Bench::run(std::vector<Target>& targets, const std::string& command, const char* transport) {
  std::vector<std::string> hosts = printHeader();
  const size_t maxCount = o_.maxBytes / sizeof(float);
  allocate(&send_, maxCount, "send");
  allocate(&recv_, maxCount, "receive");
  for (Target& t : targets) sweep(t);
  print("# Out of bounds values : %d %s\n", errors_, errors_ ? "FAILED" : "OK");
  print("# Avg bus bandwidth    : %g \n", bwCount_ ? bwSum_ / bwCount_ : 0.0);
  print("#\n");
  std::fflush(stdout);
  bool jsonOk = rank_ != 0 || o_.jsonPath.empty() || writeJson(hosts, command, transport);
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
  static const option kLong[] = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"datatype", required_argument, nullptr, 'd'},
      {"op", required_argument, nullptr, 'o'},
      {"json", required_argument, nullptr, 'J'},
      {"algo", required_argument, nullptr, 'A'},
      {"store", required_argument, nullptr, kStore},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  opterr = 0;
  optind = 1;
  int c;
  long v;
  while ((c = getopt_long(argc, argv, ":b:e:f:i:n:w:c:d:o:J:A:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'b':
        if (!parseSize(optarg, &o->minBytes))
          return bad(std::string("invalid size '") + optarg + "' for -b (minbytes)");
        break;
      case 'e':
        if (!parseSize(optarg, &o->maxBytes))
          return bad(std::string("invalid size '") + optarg + "' for -e (maxbytes)");
        break;
      case 'f':
        if (!parseInt(optarg, 1, 1 << 20, &v))
          return bad(std::string("invalid step factor '") + optarg + "' for -f (need >= 1)");
        o->stepFactor = static_cast<size_t>(v);
        break;
      case 'i':
        if (!parseSize(optarg, &o->stepBytes) || o->stepBytes == 0)
          return bad(std::string("invalid step '") + optarg + "' for -i (need > 0 bytes)");
        o->stepFactor = 1;
        break;
      case 'n':
        if (!parseInt(optarg, 1, 1 << 30, &v))
          return bad(std::string("invalid iteration count '") + optarg + "' for -n (need >= 1)");
        o->iters = static_cast<int>(v);
        break;
      case 'w':
        if (!parseInt(optarg, 0, 1 << 30, &v))
          return bad(std::string("invalid warm-up count '") + optarg + "' for -w (need >= 0)");
        o->warmup = static_cast<int>(v);
        break;
      case 'c':
        if (!parseInt(optarg, 0, 1 << 20, &v))
          return bad(std::string("invalid check count '") + optarg + "' for -c (need 0 or 1)");
        o->check = static_cast<int>(v);
        break;
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
      case 'J':
        if (*optarg == '\0') return bad("-J needs a file name");
        o->jsonPath = optarg;
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
      case ':':
        return bad(std::string("option '") + argv[optind - 1] + "' needs a value");
      case '?':
      default:
        if (optopt != 0) return bad(std::string("unknown option '-") + char(optopt) + "'");
        return bad(std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind < argc) return bad(std::string("unexpected argument '") + argv[optind] + "'");
  if (o->minBytes > o->maxBytes)
    return bad("minbytes (" + std::to_string(o->minBytes) + ") is larger than maxbytes (" +
               std::to_string(o->maxBytes) + ")");
  if (o->minBytes < sizeof(float))
    return bad("-b " + std::to_string(o->minBytes) + ": the smallest size is 4 bytes (one float)");
  if (o->maxBytes / sizeof(float) > kMaxCount)
    return bad("-e " + std::to_string(o->maxBytes) + ": the peers take at most " +
               std::to_string(kMaxCount) + " elements (an int count)");
  if (!o->jsonPath.empty()) {
    // Fail now rather than after the whole sweep.
    size_t slash = o->jsonPath.find_last_of('/');
    const std::string dir =
        slash == std::string::npos ? std::string(".") : o->jsonPath.substr(0, slash + 1);
    if (access(dir.c_str(), W_OK) != 0)
      return bad("-J " + o->jsonPath + ": cannot write into " + dir + ": " + std::strerror(errno));
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
    if (!r || !s || !parseInt(r, 0, 1 << 24, &rv) || !parseInt(s, 1, 1 << 24, &sv) || rv >= sv) {
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
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i) command += ' ';
    command += argv[i];
  }
  Bench bench(info, o, group);
  return bench.run(targets, command, transport);
}

void fail(const char* program, int rank, const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: rank %d: %s\n", program, rank, message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace squeeze::compare
