// Bench: the timed runner of the sqz-*-perf binaries, one object per run, for perfMain. It
// creates the communicator, prints the header, sweeps the sizes for each datatype and op, times
// and checks the calls, prints the rows and keeps them for -J. bench.cc has the dense calls,
// the table and -J; bench_codec.cc has -z (the compressed call and its codec columns).
#pragma once

#include <squeeze/squeeze.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "aligned_buffer.h"
#include "common.h"
#include "driver_options.h"
#include "gpu.h"
#include "json_file.h"
#include "perf_json.h"

namespace squeeze::perf {

/// Written over a receive buffer before a checked call: never an expected byte pattern (see
/// inputs.h), so an element the call did not write is caught.
inline constexpr unsigned char kPoison = 0xA5;

using Buffer = AlignedBuffer;

class Bench {
 public:
  /// json: the -J file; open (PATH.tmp) on the rank that writes it, closed elsewhere.
  /// gpu: the GPU of a -d cuda run, set up (ordinal < 0 for host memory).
  Bench(const PerfColl& coll, const Options& o, const Gpu& gpu, JsonFile* json,
        const JsonRunInfo& runInfo)
      : coll_(coll), o_(o), gpu_(gpu), json_(json), runInfo_(runInfo) {}

  int run();

 private:
  [[noreturn]] void libraryError(sqzResult_t r) const;
  // Ends the process at once (no destructors: the library's threads may still be running),
  // removing the -J file's PATH.tmp first.
  [[noreturn]] void exitNow(int status) const;
  void check(sqzResult_t r) const {
    if (r != sqzSuccess) libraryError(r);
  }
  // A failed CUDA runtime call of the driver (`why`: "" for none).
  void checkCuda(const std::string& why) const;
  // -d cuda: the buffers the calls see are device copies of send_ and recv_.
  bool onGpu() const { return gpu_.ordinal >= 0; }
  char* callSend() const { return static_cast<char*>(onGpu() ? dsend_.ptr : send_.ptr); }
  char* callRecv() const { return static_cast<char*>(onGpu() ? drecv_.ptr : recv_.ptr); }
  // Waits for the enqueued calls and reports an asynchronous error; nothing for host buffers.
  void syncCalls();
  // On the CUDA stand-in with -d cuda: what a timed loop of `calls` calls (ended by one
  // syncCalls, whose host waits are left out) asked of the emulated device, per call, with the
  // progress threads' CUDA calls (0 by design), into standinLine_, printed under the size's row.
  // Elsewhere nothing.
  void countStart();
  void countStop(int calls);
  // send_ and the whole of recv_ (the current size) to the device copies; recv_ back.
  void upload(size_t esz);
  void download(size_t esz);
  void initComm();
  void printHeader();
  // -d cuda: the device's copy bandwidth, and for an all-reduce whose ranks share one GPU, the
  // busbw its memory traffic allows.
  void printDeviceLimit();
  void allocate(Buffer* b, size_t bytes, const char* what);
  void allocateDevice(DeviceBuffer* b, size_t bytes, const char* what);
  void barrier();
  void setup(size_t bytes, sqzDataType_t type);
  void startColl(sqzDataType_t type, sqzRedOp_t op, bool inPlace);
  void timeTest(sqzDataType_t type, sqzRedOp_t op);
  void benchTime(sqzDataType_t type, sqzRedOp_t op, bool inPlace);
  // -z: the same, through codec_ (see the comment at the top).
  void checkSpecs();
  // The pay-off guard of the -z runs (see bench_codec.cc): the key value each spec gets, and
  // the header's line on where it came from.
  const char* guardValue() const;
  std::string guardLine() const;
  sqzCodec_t createCodec(const char* spec);
  void destroyCodec(sqzCodec_t* codec);
  void initGradient(bool inPlace, uint64_t seed);
  void refreshInPlaceInput();
  double timeCompressed(sqzRedOp_t op, bool inPlace, uint64_t* denseCalls);
  int64_t checkCompressed(sqzRedOp_t op, bool inPlace, double* relErr);
  void benchCompressed(sqzRedOp_t op, bool inPlace);
  void printCodecColumns(size_t firstRow);
  // -J
  void addJsonRow(sqzDataType_t type, sqzRedOp_t op, bool inPlace, double sec, double algBw,
                  double busBw, int64_t wrong);
  void gatherHosts();
  int writeJson();
  void initData(sqzDataType_t type, sqzRedOp_t op, bool inPlace, uint64_t seed);
  int64_t checkData(sqzDataType_t type, sqzRedOp_t op, bool inPlace, size_t bytes);

  const PerfColl& coll_;
  const Options& o_;
  const Gpu& gpu_;
  sqzComm_t comm_ = nullptr;
  int rank_ = -1;
  int nranks_ = 0;
  int root_ = -1;
  Buffer send_, recv_, expected_;
  DeviceBuffer dsend_, drecv_;  // -d cuda only
  CollCounts counts_;           // for the current size
  std::string algo_[2];         // algorithm of the last timed call, [inPlace]
  std::string standinLine_;     // countStop's line for the current size, or empty
  double barrierCell_ = 0;
  uint64_t seed_ = 0;
  int errors_ = 0;  // calls with wrong results, over all ranks
  double bwSum_ = 0;
  int bwCount_ = 0;
  // -z: the specs as run (each -z with the guard's key added, see checkSpecs), the spec of the
  // current sweep, the current size's codec, and what the row reports.
  std::vector<std::string> specs_;
  const char* spec_ = nullptr;
  sqzCodec_t codec_ = nullptr;
  double codecSums_[4] = {};  // this rank's timed calls' wire bytes, dense bytes, calls, and
                              // calls that ran dense
  double relErr_ = -1;        // largest over this size's checked calls; < 0: none
  int codecWidth_ = 5;        // width of the codec column: the longest spec
  // -J: what rank 0 writes at the end.
  JsonFile* json_;
  JsonRunInfo runInfo_;
  std::vector<JsonRow> rows_;
};

}  // namespace squeeze::perf
