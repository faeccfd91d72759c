// The perf drivers' shared flags, table lines and JSON rows; see table.h.
//
// The formats are nccl-tests' (src/common.cu), which parsers of its output read by column: keep
// every width as it is.
#include "table.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdlib>

namespace squeeze::perf {
namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list again;
  va_copy(again, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

}  // namespace

// ---- Flags -------------------------------------------------------------------------------------

bool parseSize(const char* text, size_t* out, bool byteSuffix) {
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
  if (byteSuffix && (*end == 'B' || *end == 'b')) ++end;
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

namespace {

// Applies getopt's `flag` with value `arg` to *o when it is a shared one, and returns true
// (*error then empty, or saying what is wrong with the value); false for any other flag.
bool parseSweepFlag(int flag, const char* arg, SweepOptions* o, std::string* error) {
  const std::string value = arg ? arg : "";
  long v = 0;
  error->clear();
  switch (flag) {
    case 'b':
      if (!parseSize(arg, &o->minBytes)) *error = "invalid size '" + value + "' for -b (minbytes)";
      return true;
    case 'e':
      if (!parseSize(arg, &o->maxBytes)) *error = "invalid size '" + value + "' for -e (maxbytes)";
      return true;
    case 'f':
      if (!parseInt(arg, 1, 1 << 20, &v))
        *error = "invalid step factor '" + value + "' for -f (need >= 1)";
      else
        o->stepFactor = static_cast<size_t>(v);
      return true;
    case 'i':
      if (!parseSize(arg, &o->stepBytes) || o->stepBytes == 0)
        *error = "invalid step '" + value + "' for -i (need > 0 bytes)";
      else
        o->stepFactor = 1;
      return true;
    case 'n':
      if (!parseInt(arg, 1, 1 << 30, &v))
        *error = "invalid iteration count '" + value + "' for -n (need >= 1)";
      else
        o->iters = static_cast<int>(v);
      return true;
    case 'w':
      if (!parseInt(arg, 0, 1 << 30, &v))
        *error = "invalid warm-up count '" + value + "' for -w (need >= 0)";
      else
        o->warmup = static_cast<int>(v);
      return true;
    case 'c':
      if (!parseInt(arg, 0, 1 << 20, &v))
        *error = "invalid check count '" + value + "' for -c (need 0 or 1)";
      else
        o->check = static_cast<int>(v);
      return true;
    case 'J':
      if (value.empty())
        *error = "-J needs a file name, e.g. -J allreduce.json";
      else
        o->jsonPath = arg;
      return true;
    default:
      return false;
  }
}

}  // namespace

FlagReader::FlagReader(int argc, char** argv, const char* ownShort,
                       std::initializer_list<option> ownLong, SweepOptions* o)
    : argc_(argc), argv_(argv), short_(std::string(":b:e:f:i:n:w:c:J:") + ownShort), o_(o) {
  long_ = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"json", required_argument, nullptr, 'J'},
  };
  long_.insert(long_.end(), ownLong);
  long_.push_back({nullptr, 0, nullptr, 0});
  opterr = 0;  // the messages are ours
  optind = 1;
}

int FlagReader::next() {
  for (;;) {
    int c = getopt_long(argc_, argv_, short_.c_str(), long_.data(), nullptr);
    if (c == -1) {
      error_ = finish();
      return error_.empty() ? -1 : '?';
    }
    if (c == ':') {
      error_ = std::string("option '") + argv_[optind - 1] + "' needs a value";
      return '?';
    }
    if (c == '?') {
      error_ = optopt != 0 ? std::string("unknown option '-") + char(optopt) + "'"
                           : std::string("unknown option '") + argv_[optind - 1] + "'";
      return '?';
    }
    if (!parseSweepFlag(c, optarg, o_, &error_)) return c;
    if (!error_.empty()) return '?';
  }
}

std::string FlagReader::finish() const {
  if (optind < argc_) return std::string("unexpected argument '") + argv_[optind] + "'";
  if (o_->minBytes > o_->maxBytes)
    return "minbytes (" + std::to_string(o_->minBytes) + ") is larger than maxbytes (" +
           std::to_string(o_->maxBytes) + ")";
  return "";
}

bool nextSize(const SweepOptions& o, size_t* size) {
  if (o.stepFactor > 1) {
    if (*size > o.maxBytes / o.stepFactor) return false;
    *size *= o.stepFactor;
  } else {
    if (*size > o.maxBytes - o.stepBytes) return false;
    *size += o.stepBytes;
  }
  return true;
}

size_t AlignedBuffer::roundedBytes(size_t bytes) {
  constexpr size_t kPage = 4096;
  return std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
}

bool AlignedBuffer::allocate(size_t bytes) {
  std::free(ptr);
  size_t rounded = roundedBytes(bytes);
  ptr = std::aligned_alloc(4096, rounded);
  if (!ptr) return false;
  std::memset(ptr, 0, rounded);
  return true;
}

// ---- Table -------------------------------------------------------------------------------------

void printOnRoot(int rank, const char* fmt, ...) {
  if (rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
}

std::string headerLines(const SweepOptions& o) {
  return format(
             "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
             "iters: %d agg iters: 1 validation: %d graph: 0\n",
             o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
             o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check) +
         "#\n# Using devices\n";
}

std::string rankLine(int rank, const char* pid, const char* host) {
  return format("#  Rank %2d Group %2d Pid %6s on %10s device %2d [host memory]\n", rank, 0, pid,
                host, 0);
}

std::string columnGroupLine() {
  return format(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
      "\n",
      "", "", "", "", "");
}

std::string columnNames() {
  return format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  ", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                "algbw", "busbw", "#wrong");
}

std::string columnUnits() {
  return format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "");
}

std::string rowStart(size_t bytes, size_t count, const char* type, const char* redop, int root) {
  return format("%12zu  %12zu  %8s  %6s  %6d", bytes, count, type, redop, root);
}

std::string timedCells(double timeUs, double algBw, double busBw, int64_t wrong) {
  // Fewer decimals as the time grows, so the column stays 7 wide.
  int decimals = timeUs >= 10000.0 ? 0 : timeUs >= 100.0 ? 1 : 2;
  std::string cells = format("  %7.*f  %6.2f  %6.2f", decimals, timeUs, algBw, busBw);
  return cells + (wrong >= 0 ? format("  %5" PRId64, wrong) : format("  %5s", "N/A"));
}

std::string naCells() { return format("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A"); }

std::string summaryLines(int errors, double bwSum, int bwCount) {
  return format("# Out of bounds values : %d %s\n", errors, errors ? "FAILED" : "OK") +
         format("# Avg bus bandwidth    : %g \n", bwCount ? bwSum / bwCount : 0.0) + "#\n";
}

// ---- JSON --------------------------------------------------------------------------------------

void writeJsonRows(JsonWriter& w, const std::vector<JsonRow>& rows) {
  w.key("rows").beginArray();
  for (const JsonRow& row : rows) {
    w.beginObject();
    w.key("size").integer(static_cast<int64_t>(row.size));
    w.key("count").integer(static_cast<int64_t>(row.count));
    w.key("type").string(row.type);
    w.key("redop").string(row.redop);
    w.key("root").integer(row.root);
    w.key("inplace").boolean(row.inPlace);
    w.key("time_us").number(row.timeUs);
    w.key("algbw").number(row.algBw);
    w.key("busbw").number(row.busBw);
    if (row.wrong >= 0)
      w.key("wrong").integer(row.wrong);
    else
      w.key("wrong").null();
    w.key("algo").string(row.algo);
    w.key("codec").stringOrNull(row.codec);
    w.key("wire_per_rank").number(row.wirePerRank);
    w.key("ratio").number(row.ratio);
    w.key("relerr").number(row.relErr);
    w.endObject();
  }
  w.endArray();
}

}  // namespace squeeze::perf
