// Shared driver of the nccl-tests-style benchmarks (sqz-allreduce-perf and friends).
//
// Each benchmark binary is one small file: it fills in a PerfColl (how many elements the
// collective sends and receives, how to make its input and expected output, its bus-bandwidth
// factor, and the call itself) and returns perfMain(argc, argv, coll). The driver parses the
// nccl-tests flags (-b -e -f -i -n -w -c -d -o -r) and -a (force the algorithm through SQZ_ALGO),
// creates the communicator (from the launcher's environment, or a single rank without one),
// sweeps the sizes, times out-of-place and in-place calls, checks the results bit for bit, and
// prints nccl-tests' table on rank 0, with the algorithm the library used as the last column.
// -d cuda puts the send and receive buffers in GPU memory (CUDA builds): the calls are then
// enqueued on a stream (callStream()) and timed up to its synchronization, as in nccl-tests.
// A collective with a compressed variant (all-reduce) also takes -z SPEC: it then times that
// variant through a codec and adds the codec's columns (wire bytes, ratio, relative error).
// -J FILE also writes the printed rows, one JSON object per file (format "squeeze-perf/1"). The
// flags, table lines and JSON that do not depend on the library (sweep_flags.h, table.h,
// perf_json.h) are shared with the peer drivers in perf/compare/, sqz-codec-bench and
// sqz-train-sim. perfMain is perf_main.cc; the runner it starts is bench.h's.
//
// Only the public C API (squeeze/squeeze.h) and, for -d cuda, the CUDA runtime are used, so the
// binaries measure what users get.
#pragma once

#include <squeeze/squeeze.h>

#include <cstddef>
#include <cstdint>

#include "datatypes.h"  // typeSize and the 16-bit conversions, for initData
#include "inputs.h"     // fillInput, fillReduced, fillPattern, fillGradient

namespace squeeze::perf {

/// Element counts of one call, for a "count" that the size sweep chose (size / element size).
/// Mirrors nccl-tests' getCollByteCount.
struct CollCounts {
  size_t sendCount = 0;          ///< elements in each rank's send buffer
  size_t recvCount = 0;          ///< elements in each rank's receive buffer (and expected)
  size_t paramCount = 0;         ///< the count argument of the call (the "count" column)
  size_t sendInplaceOffset = 0;  ///< in place, the send pointer is recvbuf + this * rank elements
  size_t recvInplaceOffset = 0;  ///< in place, the recv pointer is recvbuf + this * rank elements
};

/// What PerfColl::initData fills for one checked call.
struct InitArgs {
  void* input = nullptr;     ///< this rank's input: sendCount elements (send buffer, or in place
                             ///< the receive buffer at the send offset)
  void* expected = nullptr;  ///< recvCount elements this rank must receive
  /// This rank's receive region as the call will see it (recvCount elements, after input was
  /// written; in place it overlaps input). Out of place it holds a poison pattern in checked
  /// calls, so a collective that must leave it alone (reduce on a non-root) copies it to
  /// expected.
  const void* output = nullptr;
  size_t sendCount = 0;
  size_t recvCount = 0;
  sqzDataType_t type = sqzFloat32;
  sqzRedOp_t op = sqzSum;
  int root = 0;
  int rank = 0;
  int nranks = 1;
  uint64_t seed = 0;  ///< changes every checked call, so stale results are caught
};

/// One collective as the driver sees it. Plain function pointers: one constant per binary,
/// best written with designated initializers.
struct PerfColl {
  const char* name;     ///< for messages, e.g. "AllReduce"
  const char* program;  ///< binary name for messages, e.g. "sqz-allreduce-perf"
  /// The collective's name in SQZ_ALGO ("allreduce"): -a NAME sets SQZ_ALGO=<algoColl>:NAME
  /// before the communicator is created. nullptr: the call has no algorithm choice and -a is
  /// rejected.
  const char* algoColl;
  bool usesOp;    ///< false: the redop column shows "none" and -o is ignored
  bool usesRoot;  ///< false: the root column shows -1 and -r is ignored
  bool inPlace;   ///< false: the call cannot run in place; those columns show N/A
  /// Fills *out for `count` elements on `nranks` ranks.
  void (*byteCount)(size_t count, int nranks, CollCounts* out);
  /// Writes this rank's input and the expected output (see fillInput / fillReduced).
  void (*initData)(const InitArgs& args);
  /// busbw = algbw * busFactor(nranks), as nccl-tests' doc/PERFORMANCE.md defines it; algbw is
  /// the size column (max of send and receive bytes) over the time.
  double (*busFactor)(int nranks);
  /// The call under test, on the stream callStream(); the driver reports a non-success result
  /// and exits.
  sqzResult_t (*run)(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                     sqzRedOp_t op, int root, sqzComm_t comm);
  /// The call through a codec (-z), e.g. sqzAllReduceCompressed; nullptr (leave it out of the
  /// initializer): the collective has no compressed variant and -z is rejected.
  sqzResult_t (*runCompressed)(const void* sendbuf, void* recvbuf, size_t count, sqzDataType_t type,
                               sqzRedOp_t op, sqzCodec_t codec, sqzComm_t comm);
};

/// Runs the benchmark; returns the process exit status (0 ok, 1 wrong results or a library
/// error, 2 bad flags, or -d cuda without a usable GPU).
int perfMain(int argc, char** argv, const PerfColl& coll);

/// The stream argument PerfColl::run and runCompressed pass to the library: null for host
/// buffers (-d host), the driver's cudaStream_t for device buffers (-d cuda). A call that passes
/// null with device buffers runs on the legacy default stream, which the driver waits for too.
void* callStream();

}  // namespace squeeze::perf
