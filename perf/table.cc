// The perf drivers' table lines; see table.h.
//
// The formats are nccl-tests' (src/common.cu), which parsers of its output read by column: keep
// every width as it is.
#include "table.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>

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

}  // namespace squeeze::perf
