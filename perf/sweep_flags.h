// The flags every perf driver shares (-b -e -f -i -n -w -c -J), their size suffixes, and the size
// sweep they describe: the sqz-*-perf binaries, the peer drivers in perf/compare/, sqz-codec-bench
// and sqz-train-sim read them here, so the same flag means the same thing in each. A driver's own
// flags go through FlagReader to its own switch.
#pragma once

#include <getopt.h>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace squeeze::perf {

/// The sweep's flags, with nccl-tests' defaults.
struct SweepOptions {
  size_t minBytes = 32u << 20;
  size_t maxBytes = 32u << 20;
  size_t stepBytes = 1u << 20;
  size_t stepFactor = 2;  // > 1: multiply; 1: add stepBytes
  int iters = 20;
  int warmup = 5;
  int check = 1;
  const char* jsonPath = nullptr;  // -J: the rows as JSON to this file (rank 0)
};

/// The usage lines of -b .. -c (-J's text differs per driver, so it is theirs).
inline constexpr const char* kSweepUsage =
    "  -b, --minbytes <size>     smallest size in bytes (default 32M; K/M/G suffixes)\n"
    "  -e, --maxbytes <size>     largest size in bytes (default 32M)\n"
    "  -f, --stepfactor <n>      multiply the size by n each step (default 2;\n"
    "                            1 means add -i bytes instead)\n"
    "  -i, --stepbytes <size>    add this many bytes each step (instead of -f)\n"
    "  -n, --iters <n>           timed iterations per size (default 20)\n"
    "  -w, --warmup_iters <n>    warm-up iterations (default 5)\n"
    "  -c, --check <n>           checked calls per size, 0 to skip (default 1)\n";

/// Parses "<number>[K|M|G][B]" (binary units; the B only when `byteSuffix`); false on anything
/// else, or above 4e18.
bool parseSize(const char* text, size_t* out, bool byteSuffix = true);

/// Parses an integer in [lo, hi] (decimal, 0x hex or 0 octal); false on anything else.
bool parseInt(const char* text, long lo, long hi, long* out);

/// Reads argv with getopt_long: the shared flags into *o, and hands the driver its own. A driver
/// loops `for (int c; (c = flags.next()) != -1;)` over a switch on its own flags whose default
/// is `return bad(flags.error());`.
class FlagReader {
 public:
  /// ownShort: getopt letters of the driver's flags; ownLong: their long names.
  FlagReader(int argc, char** argv, const char* ownShort, std::initializer_list<option> ownLong,
             SweepOptions* o);

  /// The driver's next flag (its value in optarg); -1 after the last; '?' when a flag is unknown,
  /// lacks its value, or a shared flag's value is bad, and after the last flag when arguments are
  /// left over or the shared flags contradict each other, with error() saying what.
  int next();
  const std::string& error() const { return error_; }

 private:
  std::string finish() const;  // what is wrong after the last flag, or ""

  int argc_;
  char** argv_;
  std::string short_;
  std::vector<option> long_;
  SweepOptions* o_;
  std::string error_;
};

/// Steps *size to the sweep's next size; false when the sweep is done (the next would pass
/// maxBytes, or overflow).
bool nextSize(const SweepOptions& o, size_t* size);

}  // namespace squeeze::perf
