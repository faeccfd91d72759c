// The flags of the sqz-*-perf binaries: the shared sweep (sweep_flags.h) plus -d (datatypes, or
// where the buffers live), -o, -r, -a, -z and --guard, checked against what the collective
// supports, and the launcher's rank before a communicator exists (who prints a flag error).
#pragma once

#include <squeeze/squeeze.h>

#include <vector>

#include "common.h"
#include "sweep_flags.h"

namespace squeeze::perf {

/// -d host / -d cuda: where the send and receive buffers live.
enum class Memory { kHost, kCuda };

struct Options : SweepOptions {
  Memory memory = Memory::kHost;
  std::vector<sqzDataType_t> types{sqzFloat32};
  std::vector<sqzRedOp_t> ops{sqzSum};
  int root = 0;
  const char* algo = nullptr;       // -a: the SQZ_ALGO value after "<coll>:"
  std::vector<const char*> codecs;  // -z: codec specs, each a sweep through runCompressed
  bool guard = false;               // --guard: -z with the pay-off guard on (bench_codec.cc)
};

/// The launcher rank from the environment, before the communicator exists (for deciding who
/// prints a flag error), or -1.
int launcherRank();

/// True when a launcher describes this process (the variables sqzCommInitFromEnv reads).
bool haveLauncherEnv();

/// Reads argv into *o for `coll`. Returns -1 when the flags are fine, else the exit status (0
/// for -h, 2 for errors, after saying what is wrong and the usage on rank 0).
int parseOptions(int argc, char** argv, const PerfColl& coll, Options* o);

}  // namespace squeeze::perf
