// sqzrun's command line: the options, their parsing, and the help text (printed for --help and
// after a usage error).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace squeeze::launcher {

constexpr int kMaxRanks = 1024;

extern const char kUsage[];

struct Options {
  int nranks = 0;
  std::optional<double> timeoutSec;
  bool bind = false;
  bool tagOutput = false;
  bool verbose = false;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

struct UsageError {
  std::string message;
};

// Returns nullopt for --help; throws UsageError.
std::optional<Options> parseOptions(int argc, char** argv);

}  // namespace squeeze::launcher
