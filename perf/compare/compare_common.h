// Shared driver of the peer all-reduce benchmarks in perf/compare/ (Gloo, Open MPI), which print
// sqz-allreduce-perf's header, columns and -J JSON so that one script can set Squeeze and its
// peers side by side.
//
// It knows nothing of any communication library: a driver hands it a RankGroup (rank, size, the
// few helper reductions the timing and checks need) and, per table section, a Target (how to set
// up and make one all-reduce call of a given size). The driver here parses the flags, owns the
// buffers, sweeps the sizes, times and checks the calls, prints the table on rank 0 and writes
// the JSON, in the lines and rows of perf/table.h and perf/perf_json.h. Only float32 sum is
// measured: that is what the comparison is about.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "../sweep_flags.h"

namespace squeeze::compare {

/// The flags (see usage() in compare_common.cc): sqz-allreduce-perf's sweep, and the drivers'.
struct Options : perf::SweepOptions {
  std::string algo;   // -A (drivers that take it; empty otherwise)
  std::string store;  // --store (drivers that take it; empty otherwise)
};

/// What a driver accepts beyond the common flags.
struct DriverInfo {
  const char* program;             ///< binary name, for messages and the JSON
  const char* library;             ///< the JSON "library": "gloo", "openmpi"
  const char* launchHint;          ///< how to start several ranks, for -h
  const char* algoHelp;            ///< help text of -A, or nullptr when -A is not taken
  std::vector<std::string> algos;  ///< the values -A accepts
  bool takesStore;                 ///< --store DIR
};

/// Parses argv into *o. Returns -1 when the flags are fine, else the exit status (0 after -h,
/// 2 for a bad flag). Every rank prints a bad flag's message (a launcher may stop rank 0 before
/// it speaks, once another rank has exited); only when `speak` the usage or -h text.
int parseOptions(int argc, char** argv, const DriverInfo& info, bool speak, Options* o);

/// The rank and world size a launcher gave this process: SQZ_RANK/SQZ_WORLD_SIZE (sqzrun), else
/// OMPI_COMM_WORLD_RANK/SIZE (mpirun); 0 and 1 without a launcher. Returns false with *error set
/// when the variables are there but malformed or contradictory.
bool launcherRankAndSize(int* rank, int* size, std::string* error);

/// What the sweep needs from the library besides the call under test. Every member is collective:
/// all ranks call it in the same order.
class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual double maxOverRanks(double value) = 0;
  virtual int64_t sumOverRanks(int64_t value) = 0;
  virtual void barrier() = 0;
  /// Every rank's `mine`, in rank order, on rank 0 (other ranks may get an empty vector).
  virtual std::vector<std::string> gatherToRoot(const std::string& mine) = 0;
};

/// One table section: one algorithm of the library, made with the buffers the driver owns.
struct Target {
  std::string algo;   ///< the algo column
  std::string title;  ///< what the section measures, for the line above its columns
  bool outOfPlace;    ///< whether the out-of-place columns are measured (else N/A)
  bool inPlace;       ///< whether the in-place columns are measured (else N/A)
  /// Prepares the calls for `count` floats: out of place from send to recv, in place on recv.
  /// Called once per size before any call of that size (a library that builds per-size state,
  /// such as Gloo's algorithm objects, builds it here, untimed).
  std::function<void(size_t count, float* send, float* recv)> setup;
  /// One all-reduce (float32, sum) of the size of the last setup.
  std::function<void(bool inPlace)> call;
};

/// Runs the whole benchmark: header, one section per target, the summary lines and the JSON.
/// `transport` is the JSON's transport (nullptr for null). Returns the exit status (0, or 1 when
/// a check found wrong results).
int runBenchmark(int argc, char** argv, const DriverInfo& info, const Options& o, RankGroup& group,
                 std::vector<Target>& targets, const char* transport);

/// Prints "PROGRAM: rank R: MESSAGE" on stderr and ends the process with status 1 without
/// running destructors (a library's threads may still be running).
[[noreturn]] void fail(const char* program, int rank, const std::string& message);

/// The largest all-reduce the drivers make, in floats: the peers take an int count.
constexpr size_t kMaxCount = 0x7fffffff;

}  // namespace squeeze::compare
