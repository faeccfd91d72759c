// sqz-codec-bench's flags (see codec_bench.cc and its -h): what they set, and the reading of them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace squeeze::perf {

inline constexpr const char* kCodecBenchProgram = "sqz-codec-bench";

struct CodecBenchOptions {
  size_t count = size_t{1} << 20;  // the size being run
  std::vector<size_t> counts;      // -s: every size, run in turn (empty: count)
  bool onceRows = true;            // the rows run once per invocation (-d cuda's copy and
                                   // selection, -S), not once per size
  int reps = 5;
  bool selection = false;
  bool cuda = false;               // -d cuda: the CUDA kernels on device memory
  std::vector<std::string> specs;  // empty: every registered method
  const char* jsonPath = nullptr;  // -J: the rows as JSON to this file
};

/// Returns -1 when the flags are fine, else the exit status (0 for -h, 2 with a message).
int parseCodecBenchOptions(int argc, char** argv, CodecBenchOptions* o);

}  // namespace squeeze::perf
