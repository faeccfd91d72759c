// Shared driver of the nccl-tests-style benchmarks; see common.h.
//
// Flow, as in NVIDIA/nccl-tests src/common.cu: parse flags, create the communicator, print the
// header and one line per rank (gathered to rank 0), allocate send/receive/expected buffers for
// the largest size once, then for each datatype and op: warm up at the largest and smallest
// size, and for every size time `iters` out-of-place calls, then `iters` in-place calls. The time
// of a call is this rank's average over the loop, and the reported time is the maximum over the
// ranks. Right after each timed loop the driver asks sqzCommGetLastAlgorithm which algorithm the
// library ran (before its own all-reduces for the timing and checks replace it), and prints it
// as the row's last column, where nccl-tests parsers, which read the leading numeric columns, do
// not trip over it. With -c N, each timed loop is followed by N checked calls on fresh data,
// compared bit for bit with locally computed expected values; the wrong-element counts are summed
// over the ranks so every rank agrees on the outcome.
//
// With -z SPEC (collectives with a compressed variant: all-reduce), the sweep is repeated per
// codec spec through PerfColl::runCompressed. Each size creates one codec, and its warm-up calls
// (out of place, -w of them) and both timed loops reuse it, as a training loop reuses a bucket's
// codec; the codec's statistics before and after the timed loops give the wire bytes. Inputs are
// gradient-like floats (gradientValue), since the small integers of the bitwise checks are exact
// in fp16 and would hide every codec's error. In place, each call starts from a fresh copy of
// the input, as a training step brings a fresh gradient (the sum of the previous result would
// grow n-fold per call and soon overflow); the copies are not timed. Checked calls use a fresh
// codec on fresh data and measure ||out - exact|| / ||exact|| against the float64 sum (or avg)
// of every rank's input, computed locally; the lossy result is not counted as wrong, but the
// replicas must agree bit for bit (DESIGN.md), so #wrong counts the elements on which the ranks'
// results differ.
//
// With -d cuda (CUDA builds), the send and receive buffers are device memory of GPU
// SQZ_LOCAL_RANK % deviceCount, made current before the communicator is created so that the
// communicator takes it. Inputs and expected values are still computed on the host, in the host
// buffers, and copied to the device before a checked call; results are copied back and compared
// by the same code as host runs. The calls are enqueued on one stream the driver creates
// (callStream()) and return at once, so a timed loop enqueues `iters` calls back to back and
// then synchronizes the stream, as nccl-tests does: the time is the host clock around both. The
// driver's own host-buffer calls (its barrier, the timing and #wrong reductions) come after a
// synchronization too, so none starts while device calls are still queued.
// -d cuda without a usable GPU, or in a build without CUDA, exits 2; -d cuda with -z is refused:
// the codec columns (relative error) are computed on host buffers only in this driver, although
// the library's compressed all-reduce takes device buffers too.
//
// With -J FILE, every rank keeps the rows it computed (each printed row is an out-of-place and an
// in-place JSON row), the ranks' host names are gathered once after the header, and at the end
// rank 0 writes the file (see JsonFile in common.h). Without -J nothing of this runs, so the
// printed output and the collectives called are what they were.
#include "common.h"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace squeeze::perf {
namespace {

// Room for a long host name and a GPU's name in the rank lines.
constexpr int kRankLineBytes = 256;
constexpr unsigned char kPoison = 0xA5;  // never an expected byte pattern (see common.h)

struct TypeName {
  sqzDataType_t type;
  const char* name;
};
// nccl-tests' names and order (used by -d all).
constexpr TypeName kTypes[] = {
    {sqzInt8, "int8"},      {sqzUint8, "uint8"},       {sqzInt32, "int32"},  {sqzUint32, "uint32"},
    {sqzInt64, "int64"},    {sqzUint64, "uint64"},     {sqzFloat16, "half"}, {sqzFloat32, "float"},
    {sqzFloat64, "double"}, {sqzBfloat16, "bfloat16"},
};
// Other spellings accepted by -d.
constexpr TypeName kTypeAliases[] = {
    {sqzInt8, "char"},       {sqzInt32, "int"},       {sqzFloat16, "fp16"},
    {sqzFloat16, "float16"}, {sqzFloat32, "fp32"},    {sqzFloat32, "float32"},
    {sqzFloat64, "fp64"},    {sqzFloat64, "float64"}, {sqzBfloat16, "bf16"},
};

struct OpName {
  sqzRedOp_t op;
  const char* name;
};
constexpr OpName kOps[] = {
    {sqzSum, "sum"}, {sqzProd, "prod"}, {sqzMax, "max"}, {sqzMin, "min"}, {sqzAvg, "avg"},
};

const char* typeName(sqzDataType_t t) {
  for (const TypeName& n : kTypes)
    if (n.type == t) return n.name;
  return "?";
}

const char* opName(sqzRedOp_t op) {
  for (const OpName& n : kOps)
    if (n.op == op) return n.name;
  return "?";
}

bool isFloating(sqzDataType_t t) {
  return t == sqzFloat16 || t == sqzFloat32 || t == sqzFloat64 || t == sqzBfloat16;
}

bool isUnsigned(sqzDataType_t t) { return t == sqzUint8 || t == sqzUint32 || t == sqzUint64; }

// ---- Input values ------------------------------------------------------------------------------

// The inputs repeat with this period (a prime, so it lines up with no chunk size): the pattern
// of one period is computed element by element and then copied, so filling 256 MB stays cheap
// even when the expected value sums over many ranks.
constexpr size_t kPeriod = 65521;

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash3(uint64_t j, uint64_t rank, uint64_t seed) {
  return mix(j * 0x100000001b3ull ^ mix(rank + 0x51ed27ull * seed));
}

// Whether `rank` gives a non-zero value to element j of a sum: all ranks up to 8, else 8 of them,
// rotating with j, so sums stay within [-40, 40] (exact in int8 and bfloat16).
bool sumContributes(int rank, int nranks, size_t j) {
  return nranks <= 8 || (static_cast<size_t>(rank) + j) % static_cast<size_t>(nranks) < 8;
}

int64_t inputValue(sqzRedOp_t op, bool unsignedType, int rank, int nranks, size_t j,
                   uint64_t seed) {
  switch (op) {
    case sqzSum:
    case sqzAvg: {
      if (!sumContributes(rank, nranks, j)) return 0;
      int64_t v = static_cast<int64_t>(hash3(j, rank, seed) % 11);  // 0..10
      return unsignedType ? v : v - 5;
    }
    case sqzProd: {
      // Up to 3 ranks (rotating with j) give 2, the others 1 (or -1 for signed types).
      size_t m = static_cast<size_t>(std::max(nranks, 3));
      size_t twos = mix(j ^ (seed << 20)) % 4;
      if ((static_cast<size_t>(rank) + j) % m < twos) return 2;
      if (!unsignedType && hash3(j, rank, seed) % 7 == 0) return -1;
      return 1;
    }
    case sqzMax:
    case sqzMin:
    default: {
      int64_t v = static_cast<int64_t>(hash3(j, rank, seed) % 41);  // 0..40
      return unsignedType ? v : v - 20;
    }
  }
}

void storeInt(sqzDataType_t t, void* buf, size_t i, int64_t v) {
  switch (t) {
    case sqzInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      break;
    case sqzUint8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case sqzInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      break;
    case sqzUint32:
      static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(v);
      break;
    case sqzInt64:
      static_cast<int64_t*>(buf)[i] = v;
      break;
    case sqzUint64:
      static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(v);
      break;
    case sqzFloat16:
      static_cast<uint16_t*>(buf)[i] = floatToHalf(static_cast<float>(v));
      break;
    case sqzFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case sqzFloat64:
      static_cast<double*>(buf)[i] = static_cast<double>(v);
      break;
    case sqzBfloat16:
      static_cast<uint16_t*>(buf)[i] = floatToBfloat16(static_cast<float>(v));
      break;
    default:
      break;
  }
}

// A floating type's value from the exactly rounded double q. Going through float first is still
// one correct rounding: float has more than 2p+2 bits for half's and bfloat16's p.
void storeReal(sqzDataType_t t, void* buf, size_t i, double q) {
  switch (t) {
    case sqzFloat16:
      static_cast<uint16_t*>(buf)[i] = floatToHalf(static_cast<float>(q));
      break;
    case sqzFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(q);
      break;
    case sqzFloat64:
      static_cast<double*>(buf)[i] = q;
      break;
    case sqzBfloat16:
      static_cast<uint16_t*>(buf)[i] = floatToBfloat16(static_cast<float>(q));
      break;
    default:
      break;
  }
}

// Fills buf[0 .. count) with value(j) for j = (first + i) % kPeriod: one period computed, the
// rest copied.
template <typename ValueFn>
void fillPeriodic(void* buf, size_t count, size_t first, sqzDataType_t type, ValueFn value) {
  size_t esz = typeSize(type);
  size_t n = std::min(count, kPeriod);
  for (size_t i = 0; i < n; ++i) value(buf, i, (first + i) % kPeriod);
  char* base = static_cast<char*>(buf);
  for (size_t done = n; done < count;) {
    size_t chunk = std::min(done, count - done);
    std::memcpy(base + done * esz, base, chunk * esz);
    done += chunk;
  }
}

// ---- Options -----------------------------------------------------------------------------------

// -d host / -d cuda: where the send and receive buffers live.
enum class Memory { kHost, kCuda };

struct Options : SweepOptions {
  Memory memory = Memory::kHost;
  std::vector<sqzDataType_t> types{sqzFloat32};
  std::vector<sqzRedOp_t> ops{sqzSum};
  int root = 0;
  const char* algo = nullptr;       // -a: the SQZ_ALGO value after "<coll>:"
  std::vector<const char*> codecs;  // -z: codec specs, each a sweep through runCompressed
};

// The launcher rank from the environment, before the communicator exists (for deciding who
// prints a flag error), or -1.
int launcherRank() {
  static const char* const kRankVars[] = {"SQZ_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                          "SLURM_PROCID"};
  for (const char* var : kRankVars) {
    const char* v = std::getenv(var);
    if (v && *v) return std::atoi(v);
  }
  return -1;
}

// True when a launcher describes this process (the variables sqzCommInitFromEnv reads).
bool haveLauncherEnv() {
  static const char* const kPairs[][2] = {{"SQZ_RANK", "SQZ_WORLD_SIZE"},
                                          {"RANK", "WORLD_SIZE"},
                                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"PMI_RANK", "PMI_SIZE"},
                                          {"SLURM_PROCID", "SLURM_NTASKS"}};
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v;
  };
  if (set("SQZ_UNIQUE_ID")) return true;  // let the library say what else is missing
  for (const auto& pair : kPairs)
    if (set(pair[0]) && set(pair[1])) return true;
  return false;
}

void usage(FILE* out, const PerfColl& coll) {
  const char* program = coll.program;
  std::fprintf(out,
               "Usage: %s [options]\n"
               "%s"
               "  -d, --datatype <type>     int8 uint8 int32 uint32 int64 uint64 half float\n"
               "                            double bfloat16, or all (default float)\n"
               "  -d cuda, -d host          not datatypes: where the buffers live. cuda: memory\n"
               "                            of GPU SQZ_LOCAL_RANK %% count, the calls enqueued on\n"
               "                            a stream and timed to its synchronization; host:\n"
               "                            host memory (default). -d takes a datatype and a\n"
               "                            memory both, e.g. -d cuda -d half\n"
               "  -o, --op <op>             sum prod max min avg, or all (default sum)\n"
               "  -r, --root <rank>         root rank of rooted collectives (default 0)\n",
               program, kSweepUsage);
  if (coll.algoColl)
    std::fprintf(
        out,
        "  -a, --algo <name>         force the algorithm: a name (e.g. ring), or rules by\n"
        "                            bytes per rank (e.g. 0-64K=naive,64K-inf=ring); sets\n"
        "                            SQZ_ALGO=%s:<name>, replacing any SQZ_ALGO\n",
        coll.algoColl);
  else
    std::fprintf(out, "  -a, --algo <name>         not here: %s has no algorithm choice\n",
                 coll.name);
  if (coll.runCompressed)
    std::fprintf(
        out,
        "  -z, --codec <spec>        time the compressed call through a codec, e.g.\n"
        "                            fp16, int8, topk:ratio=0.01 (sqz-info lists them);\n"
        "                            float only, sum or avg; adds the columns codec,\n"
        "                            wire/rank, ratio and relerr; repeat -z for several\n");
  std::fprintf(out,
               "  -J, --json <file>         also write the rows as JSON (format squeeze-perf/1)\n"
               "                            to <file>, from rank 0; plot them with perf/plot.py\n"
               "  -h, --help                this text\n"
               "Run under sqzrun (sqzrun -n 4 %s ...), mpirun, srun or torchrun for several\n"
               "ranks; without a launcher it runs as a single rank.\n",
               program);
}

// Returns -1 when the flags are fine, else the exit status (0 for -h, 2 for errors).
int parseOptions(int argc, char** argv, const PerfColl& coll, Options* o) {
  const bool speak = launcherRank() <= 0;
  auto bad = [&](const std::string& msg) {
    if (speak) {
      std::fprintf(stderr, "%s: %s\n", coll.program, msg.c_str());
      usage(stderr, coll);
    }
    return 2;
  };
  FlagReader flags(argc, argv, "d:o:r:a:z:h",
                   {
                       {"datatype", required_argument, nullptr, 'd'},
                       {"op", required_argument, nullptr, 'o'},
                       {"root", required_argument, nullptr, 'r'},
                       {"algo", required_argument, nullptr, 'a'},
                       {"codec", required_argument, nullptr, 'z'},
                       {"help", no_argument, nullptr, 'h'},
                   },
                   o);
  long v;
  for (int c; (c = flags.next()) != -1;) {
    switch (c) {
      case 'd': {
        if (std::strcmp(optarg, "host") == 0 || std::strcmp(optarg, "cuda") == 0) {
          o->memory = optarg[0] == 'c' ? Memory::kCuda : Memory::kHost;
          break;
        }
        o->types.clear();
        if (std::strcmp(optarg, "all") == 0) {
          for (const TypeName& t : kTypes) o->types.push_back(t.type);
          break;
        }
        for (const TypeName& t : kTypes)
          if (std::strcmp(optarg, t.name) == 0) o->types.push_back(t.type);
        for (const TypeName& t : kTypeAliases)
          if (std::strcmp(optarg, t.name) == 0) o->types.push_back(t.type);
        if (o->types.empty())
          return bad(std::string("unknown datatype '") + optarg +
                     "' for -d (int8 uint8 int32 uint32 int64 uint64 half float double "
                     "bfloat16 all; or cuda, host for the buffers' memory)");
        break;
      }
      case 'o': {
        o->ops.clear();
        for (const OpName& op : kOps)
          if (std::strcmp(optarg, "all") == 0 || std::strcmp(optarg, op.name) == 0)
            o->ops.push_back(op.op);
        if (o->ops.empty())
          return bad(std::string("unknown op '") + optarg + "' for -o (sum prod max min avg all)");
        break;
      }
      case 'r':
        if (!parseInt(optarg, 0, 1 << 24, &v))
          return bad(std::string("invalid root '") + optarg + "' for -r (need a rank >= 0)");
        o->root = static_cast<int>(v);
        break;
      case 'a':
        if (!coll.algoColl)
          return bad(std::string(coll.name) +
                     " has no algorithm choice (it is plain point-to-point); drop -a");
        if (*optarg == '\0') return bad("-a needs an algorithm name, e.g. -a ring");
        o->algo = optarg;
        break;
      case 'z':
        if (!coll.runCompressed)
          return bad(std::string(coll.name) +
                     " has no compressed variant; drop -z (it is for "
                     "sqz-allreduce-perf)");
        if (*optarg == '\0')
          return bad("-z needs a codec spec, e.g. -z fp16 or -z topk:ratio=0.01");
        o->codecs.push_back(optarg);
        break;
      case 'h':
        if (speak) usage(stdout, coll);
        return 0;
      default:
        return bad(flags.error());
    }
  }
  if (o->stepFactor > 1 && o->minBytes == 0)
    return bad("-b 0 never grows with -f; start at -b 1 or more, or step with -i");
  if (!coll.usesOp) o->ops.assign(1, sqzSum);
  if (!o->codecs.empty() && o->memory == Memory::kCuda)
    return bad(
        "-z with -d cuda: this driver times compressed calls on host buffers only (its codec "
        "columns are computed there); drop -d cuda to time -z on host memory");
  if (!o->codecs.empty()) {
    if (o->types.size() != 1 || o->types[0] != sqzFloat32)
      return bad("-z compresses float32 gradients: drop -d or pass -d float");
    for (sqzRedOp_t op : o->ops)
      if (op != sqzSum && op != sqzAvg)
        return bad(std::string("-z reduces with sum or avg, not ") + opName(op) +
                   ": pass -o sum or -o avg");
  }
  return -1;
}

// ---- -d cuda: every CUDA runtime call of the driver -------------------------------------------
// Each returns "" on success, else what failed: "<call>: <CUDA's message> (<error name>)".
// Without CUDA in the build only setUpGpu is reached, and it says so.

// The GPU of a -d cuda run.
struct Gpu {
  int ordinal = -1;  // < 0: host memory (-d host)
  std::string name;
  void* stream = nullptr;  // the cudaStream_t the calls are enqueued on
};

void* gCallStream = nullptr;  // callStream(); set once, before the communicator exists

#if SQZ_HAVE_CUDA
// This process's index among the ranks on its host, from the launcher (sqzrun, torchrun, Open
// MPI, MPICH or Slurm), 0 without one.
int localRank() {
  static const char* const kVars[] = {"SQZ_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "MPI_LOCALRANKID", "SLURM_LOCALID"};
  for (const char* var : kVars) {
    const char* v = std::getenv(var);
    if (v && *v) return std::max(0, std::atoi(v));
  }
  return 0;
}

std::string cudaFailure(const char* call, cudaError_t rc) {
  return std::string(call) + ": " + cudaGetErrorString(rc) + " (" + cudaGetErrorName(rc) + ")";
}
#endif

// Makes GPU localRank() % count current, so that the communicator created next takes it, and
// creates the stream. Returns "", or why no GPU can be used.
std::string setUpGpu(Gpu* gpu) {
#if SQZ_HAVE_CUDA
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) return "no usable GPU: " + cudaFailure("cudaGetDeviceCount", rc);
  if (count <= 0) return "no usable GPU: cudaGetDeviceCount found none";
  const int ordinal = localRank() % count;
  const std::string which =
      "GPU " + std::to_string(ordinal) + " (of " + std::to_string(count) + ")";
  if ((rc = cudaSetDevice(ordinal)) != cudaSuccess)
    return which + " is not usable: " + cudaFailure("cudaSetDevice", rc);
  cudaDeviceProp prop{};
  if ((rc = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess)
    return which + " is not usable: " + cudaFailure("cudaGetDeviceProperties", rc);
  // Non-blocking, as nccl-tests' streams: no implicit ordering with the legacy default stream.
  cudaStream_t stream = nullptr;
  if ((rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess)
    return which + " is not usable: " + cudaFailure("cudaStreamCreateWithFlags", rc);
  gpu->ordinal = ordinal;
  gpu->name = prop.name;
  gpu->stream = stream;
  return "";
#else
  (void)gpu;
  return "this build has no CUDA (configure it with -Dcuda=enabled where the CUDA toolkit is "
         "installed)";
#endif
}

// Device memory, zeroed (so that no timed call is the first to touch it), rounded up like the
// host buffers so that a zero-byte buffer still has an address.
struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
#if SQZ_HAVE_CUDA
    if (ptr) cudaFree(ptr);
#endif
  }
  std::string allocate(size_t bytes) {
#if SQZ_HAVE_CUDA
    const size_t rounded = AlignedBuffer::roundedBytes(bytes);
    cudaError_t rc = cudaMalloc(&ptr, rounded);
    if (rc != cudaSuccess) {
      ptr = nullptr;
      return cudaFailure("cudaMalloc", rc);
    }
    rc = cudaMemset(ptr, 0, rounded);
    return rc == cudaSuccess ? "" : cudaFailure("cudaMemset", rc);
#else
    (void)bytes;
    return "no CUDA in this build";
#endif
  }
};

// Copies bytes between host and device memory on `stream` and waits for the copy.
std::string gpuCopy(void* dst, const void* src, size_t bytes, void* stream) {
#if SQZ_HAVE_CUDA
  if (bytes == 0) return "";
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
  if (rc != cudaSuccess) return cudaFailure("cudaMemcpyAsync", rc);
  rc = cudaStreamSynchronize(s);
  return rc == cudaSuccess ? "" : cudaFailure("cudaStreamSynchronize after a copy", rc);
#else
  (void)dst, (void)src, (void)bytes, (void)stream;
  return "no CUDA in this build";
#endif
}

// Waits for everything enqueued on `stream`, and on the legacy default stream, where the calls of
// a PerfColl that passes a null stream run.
std::string gpuSync(void* stream) {
#if SQZ_HAVE_CUDA
  cudaError_t rc = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (rc != cudaSuccess) return cudaFailure("cudaStreamSynchronize", rc);
  rc = cudaStreamSynchronize(cudaStreamLegacy);
  return rc == cudaSuccess ? "" : cudaFailure("cudaStreamSynchronize(cudaStreamLegacy)", rc);
#else
  (void)stream;
  return "no CUDA in this build";
#endif
}

// ---- Running -----------------------------------------------------------------------------------

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
  // send_ and the whole of recv_ (the current size) to the device copies; recv_ back.
  void upload(size_t esz);
  void download(size_t esz);
  void initComm();
  void printHeader();
  void allocate(Buffer* b, size_t bytes, const char* what);
  void allocateDevice(DeviceBuffer* b, size_t bytes, const char* what);
  void barrier();
  void setup(size_t bytes, sqzDataType_t type);
  void startColl(sqzDataType_t type, sqzRedOp_t op, bool inPlace);
  void timeTest(sqzDataType_t type, sqzRedOp_t op);
  void benchTime(sqzDataType_t type, sqzRedOp_t op, bool inPlace);
  // -z: the same, through codec_ (see the comment at the top).
  void checkSpecs();
  sqzCodec_t createCodec(const char* spec);
  void destroyCodec(sqzCodec_t* codec);
  void initGradient(bool inPlace, uint64_t seed);
  double timeCompressed(sqzRedOp_t op, bool inPlace);
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
  double barrierCell_ = 0;
  uint64_t seed_ = 0;
  int errors_ = 0;  // calls with wrong results, over all ranks
  double bwSum_ = 0;
  int bwCount_ = 0;
  // -z: the spec of the current sweep, the current size's codec, and what the row reports.
  const char* spec_ = nullptr;
  sqzCodec_t codec_ = nullptr;
  double codecSums_[3] = {};  // this rank's timed calls' wire bytes, dense bytes, calls
  double relErr_ = -1;        // largest over this size's checked calls; < 0: none
  int codecWidth_ = 5;        // width of the codec column: the longest spec
  // -J: what rank 0 writes at the end.
  JsonFile* json_;
  JsonRunInfo runInfo_;
  std::vector<JsonRow> rows_;
};

void Bench::libraryError(sqzResult_t r) const {
  const char* detail = sqzGetLastError(comm_);
  int shown = rank_ >= 0 ? rank_ : haveLauncherEnv() ? launcherRank() : 0;
  std::string who = shown >= 0 ? std::to_string(shown) : "?";
  std::fflush(stdout);
  std::fprintf(stderr, "%s: rank %s: %s: %s\n", coll_.program, who.c_str(), sqzGetErrorString(r),
               detail && *detail ? detail : "(no details)");
  std::fflush(stderr);
  exitNow(1);
}

void Bench::checkCuda(const std::string& why) const {
  if (why.empty()) return;
  std::fflush(stdout);
  std::fprintf(stderr, "%s: rank %d: cuda:%d: %s\n", coll_.program, rank_, gpu_.ordinal,
               why.c_str());
  exitNow(1);
}

void Bench::syncCalls() {
  if (!onGpu()) return;
  checkCuda(gpuSync(gpu_.stream));
  sqzResult_t async = sqzSuccess;
  check(sqzCommGetAsyncError(comm_, &async));
  check(async);
}

void Bench::upload(size_t esz) {
  const size_t recvBytes = std::max(counts_.recvCount, counts_.sendCount) * esz;
  checkCuda(gpuCopy(dsend_.ptr, send_.ptr, counts_.sendCount * esz, gpu_.stream));
  checkCuda(gpuCopy(drecv_.ptr, recv_.ptr, recvBytes, gpu_.stream));
}

void Bench::download(size_t esz) {
  const size_t recvBytes = std::max(counts_.recvCount, counts_.sendCount) * esz;
  checkCuda(gpuCopy(recv_.ptr, drecv_.ptr, recvBytes, gpu_.stream));
}

void Bench::exitNow(int status) const {
  if (json_) json_->discard();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status);
}

void Bench::initComm() {
  if (haveLauncherEnv()) {
    check(sqzCommInitFromEnv(&comm_, nullptr));
  } else {
    sqzUniqueId id;
    check(sqzGetUniqueId(&id));
    check(sqzCommInitRank(&comm_, 1, id, 0));
  }
  check(sqzCommUserRank(comm_, &rank_));
  check(sqzCommCount(comm_, &nranks_));
}

void Bench::allocate(Buffer* b, size_t bytes, const char* what) {
  if (!b->allocate(bytes)) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "%s: rank %d: cannot allocate %zu bytes for the %s buffer: out of memory "
                 "(lower -e)\n",
                 coll_.program, rank_, AlignedBuffer::roundedBytes(bytes), what);
    exitNow(1);
  }
}

void Bench::allocateDevice(DeviceBuffer* b, size_t bytes, const char* what) {
  std::string why = b->allocate(bytes);
  if (why.empty()) return;
  std::fflush(stdout);
  std::fprintf(stderr,
               "%s: rank %d: cannot allocate %zu bytes of GPU memory on cuda:%d for the %s "
               "buffer: %s (lower -e)\n",
               coll_.program, rank_, AlignedBuffer::roundedBytes(bytes), gpu_.ordinal, what,
               why.c_str());
  exitNow(1);
}

void Bench::barrier() {
  check(sqzAllReduce(&barrierCell_, &barrierCell_, 1, sqzFloat64, sqzMax, comm_, nullptr));
}

void Bench::printHeader() {
  printOnRoot(rank_, "%s", headerLines(o_).c_str());

  // One line per rank, gathered to rank 0: each rank writes its slot, the others stay zero, and
  // a byte-wise max all-reduce assembles the table.
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  std::vector<unsigned char> lines(static_cast<size_t>(nranks_) * kRankLineBytes, 0);
  std::string mine = rankLine(rank_, std::to_string(getpid()).c_str(), host);
  if (onGpu()) {
    // table.h's rank line knows host memory only (the peer drivers share it): name the GPU
    // where nccl-tests names its device.
    const std::string hostMemory = "[host memory]";
    size_t at = mine.rfind(hostMemory);
    if (at != std::string::npos)
      mine.replace(at, hostMemory.size(),
                   "[cuda:" + std::to_string(gpu_.ordinal) + " " + gpu_.name + "]");
  }
  std::snprintf(reinterpret_cast<char*>(&lines[static_cast<size_t>(rank_) * kRankLineBytes]),
                kRankLineBytes, "%s", mine.c_str());
  check(sqzAllReduce(lines.data(), lines.data(), lines.size(), sqzUint8, sqzMax, comm_, nullptr));
  for (int r = 0; r < nranks_; ++r) {
    char* line = reinterpret_cast<char*>(&lines[static_cast<size_t>(r) * kRankLineBytes]);
    line[kRankLineBytes - 1] = '\0';
    printOnRoot(rank_, "%s", line);
  }
  printOnRoot(rank_, "#\n");
  if (!o_.codecs.empty()) {
    printOnRoot(
        rank_,
        "# -z: %s through a codec, one per size, reused by the warm-up and timed calls; inputs\n"
        "#   are gradient-like floats; in place, each call starts from a fresh copy of the input\n"
        "#   (untimed). time, algbw and busbw count the dense bytes, as without -z.\n"
        "#   #wrong:    elements on which the ranks' results differ (replicas must agree bit\n"
        "#              for bit); the lossy result itself is not counted as wrong.\n"
        "#   wire/rank: payload bytes a rank sent per call over the timed calls (codec stats),\n"
        "#              averaged over the ranks.\n"
        "#   ratio:     dense bytes / wire bytes over the same calls, all ranks.\n"
        "#   relerr:    ||out - exact|| / ||exact||, exact = the float64 %s of every rank's\n"
        "#              input, the largest over the checked calls (each with a fresh codec).\n"
        "#\n",
        coll_.name, opName(o_.ops[0]));
  }
  printOnRoot(rank_, "%s%s", columnGroupLine().c_str(), columnNames().c_str());
  if (o_.codecs.empty()) {
    printOnRoot(rank_, "%s\n", "algo");
  } else {
    printOnRoot(rank_, "%-6s  %-*s  %10s  %7s  %9s\n", "algo", codecWidth_, "codec", "wire/rank",
                "ratio", "relerr");
  }
  printOnRoot(rank_, "%s", columnUnits().c_str());
  if (o_.codecs.empty())
    printOnRoot(rank_, "\n");
  else
    printOnRoot(rank_, "  %-6s  %-*s  %10s  %7s  %9s\n", "", codecWidth_, "", "(B)", "", "");
}

void Bench::setup(size_t bytes, sqzDataType_t type) {
  coll_.byteCount(bytes / typeSize(type), nranks_, &counts_);
}

void Bench::startColl(sqzDataType_t type, sqzRedOp_t op, bool inPlace) {
  size_t esz = typeSize(type);
  char* recv = callRecv();
  const void* sendPtr = inPlace ? recv + counts_.sendInplaceOffset * esz * rank_ : callSend();
  void* recvPtr = recv + (inPlace ? counts_.recvInplaceOffset * esz * rank_ : 0);
  if (codec_)
    check(coll_.runCompressed(sendPtr, recvPtr, counts_.paramCount, type, op, codec_, comm_));
  else
    check(coll_.run(sendPtr, recvPtr, counts_.paramCount, type, op, root_, comm_));
}

// Writes this rank's input (and the expected output) through the collective's initData.
void Bench::initData(sqzDataType_t type, sqzRedOp_t op, bool inPlace, uint64_t seed) {
  size_t esz = typeSize(type);
  char* recv = static_cast<char*>(recv_.ptr);
  InitArgs a;
  a.input = inPlace ? recv + counts_.sendInplaceOffset * esz * rank_ : send_.ptr;
  a.expected = expected_.ptr;
  a.output = recv + (inPlace ? counts_.recvInplaceOffset * esz * rank_ : 0);
  a.sendCount = counts_.sendCount;
  a.recvCount = counts_.recvCount;
  a.type = type;
  a.op = op;
  a.root = root_;
  a.rank = rank_;
  a.nranks = nranks_;
  a.seed = seed;
  coll_.initData(a);
  if (onGpu()) upload(esz);
}

int64_t Bench::checkData(sqzDataType_t type, sqzRedOp_t op, bool inPlace, size_t bytes) {
  size_t esz = typeSize(type);
  char* recv = static_cast<char*>(recv_.ptr);
  // The whole receive buffer: in place, the send region may extend past recvCount elements.
  std::memset(recv, kPoison, std::max(counts_.recvCount, counts_.sendCount) * esz);
  initData(type, op, inPlace, ++seed_);
  startColl(type, op, inPlace);
  if (onGpu()) {
    syncCalls();
    download(esz);
  }

  const char* got = recv + (inPlace ? counts_.recvInplaceOffset * esz * rank_ : 0);
  const char* want = static_cast<const char*>(expected_.ptr);
  size_t n = counts_.recvCount;
  int64_t wrong = 0;
  if (std::memcmp(got, want, n * esz) != 0) {
    size_t first = n;
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(got + i * esz, want + i * esz, esz) != 0) {
        if (first == n) first = i;
        ++wrong;
      }
    }
    uint64_t w = 0, g = 0;
    std::memcpy(&w, want + first * esz, esz);
    std::memcpy(&g, got + first * esz, esz);
    std::fprintf(stderr,
                 "%s: rank %d: %zu B %s %s %s: %" PRId64
                 " wrong elements, first at %zu: "
                 "expected 0x%0*" PRIx64 " got 0x%0*" PRIx64 "\n",
                 coll_.program, rank_, bytes, typeName(type), coll_.usesOp ? opName(op) : "none",
                 inPlace ? "in-place" : "out-of-place", wrong, first, static_cast<int>(2 * esz), w,
                 static_cast<int>(2 * esz), g);
  }
  return wrong;
}

void Bench::benchTime(sqzDataType_t type, sqzRedOp_t op, bool inPlace) {
  size_t esz = typeSize(type);
  size_t bytes = std::max(counts_.sendCount, counts_.recvCount) * esz;
  if (inPlace && !coll_.inPlace) {
    printOnRoot(rank_, "%s", naCells().c_str());
    algo_[inPlace].clear();
    return;
  }
  if (o_.check) initData(type, op, inPlace, 0);  // sane data for the timed calls too
  startColl(type, op, inPlace);                  // untimed: brings every rank to this call
  syncCalls();
  barrier();

  // Device buffers: the calls only enqueue, so the loop ends when the stream has run them all.
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o_.iters; ++i) startColl(type, op, inPlace);
  syncCalls();
  auto t1 = std::chrono::steady_clock::now();
  // Now, before the all-reduces below make it theirs. A call with count 0 runs nothing and
  // leaves the name of the call before it (the barrier's all-reduce), so it shows "-".
  const char* algo = nullptr;
  check(sqzCommGetLastAlgorithm(comm_, &algo));
  algo_[inPlace] = counts_.paramCount > 0 && algo && *algo ? algo : "-";
  double sec = std::chrono::duration<double>(t1 - t0).count() / o_.iters;
  check(sqzAllReduce(&sec, &sec, 1, sqzFloat64, sqzMax, comm_, nullptr));

  double algBw = sec > 0 ? static_cast<double>(bytes) / 1.0e9 / sec : 0.0;
  double busBw = algBw * coll_.busFactor(nranks_);

  int64_t wrong = 0;
  for (int c = 0; c < o_.check; ++c) {
    wrong = checkData(type, op, inPlace, bytes);
    check(sqzAllReduce(&wrong, &wrong, 1, sqzInt64, sqzSum, comm_, nullptr));
    if (wrong) break;
  }
  if (wrong) ++errors_;
  if (o_.jsonPath) addJsonRow(type, op, inPlace, sec, algBw, busBw, o_.check ? wrong : -1);

  printOnRoot(rank_, "%s", timedCells(sec * 1.0e6, algBw, busBw, o_.check ? wrong : -1).c_str());
  bwSum_ += busBw;
  ++bwCount_;
}

// ---- -z: the compressed call -------------------------------------------------------------------

// Creates every -z codec once before the header, so a bad spec stops the run with the library's
// message (on rank 0; every rank fails alike, creation being deterministic) instead of halfway
// through a table.
void Bench::checkSpecs() {
  size_t count = std::max<size_t>(1, o_.minBytes / sizeof(float));
  for (const char* spec : o_.codecs) {
    codecWidth_ = std::max(codecWidth_, static_cast<int>(std::strlen(spec)));
    sqzCodec_t codec = nullptr;
    sqzResult_t r = sqzCodecCreate(&codec, spec, count, sqzFloat32, comm_);
    if (r != sqzSuccess) {
      if (rank_ == 0) {
        const char* detail = sqzGetLastError(comm_);
        std::fprintf(stderr, "%s: -z '%s': %s: %s\n", coll_.program, spec, sqzGetErrorString(r),
                     detail && *detail ? detail : "(no details)");
      }
      exitNow(2);
    }
    check(sqzCodecDestroy(codec));
  }
}

sqzCodec_t Bench::createCodec(const char* spec) {
  sqzCodec_t codec = nullptr;
  check(sqzCodecCreate(&codec, spec, counts_.paramCount, sqzFloat32, comm_));
  return codec;
}

void Bench::destroyCodec(sqzCodec_t* codec) {
  check(sqzCodecDestroy(*codec));
  *codec = nullptr;
}

// This rank's gradient-like input into the send buffer, which also keeps it for in place, where
// it is copied into the receive buffer before each call.
void Bench::initGradient(bool inPlace, uint64_t seed) {
  fillGradient(static_cast<float*>(send_.ptr), counts_.sendCount, 0, rank_, seed);
  if (inPlace)
    std::memcpy(static_cast<char*>(recv_.ptr) + counts_.sendInplaceOffset * sizeof(float) * rank_,
                send_.ptr, counts_.sendCount * sizeof(float));
}

// Seconds per call (this rank's average); adds the timed calls' codec statistics to codecSums_
// and records the algorithm.
double Bench::timeCompressed(sqzRedOp_t op, bool inPlace) {
  const size_t bytes = counts_.sendCount * sizeof(float);
  char* inPlaceInput =
      static_cast<char*>(recv_.ptr) + counts_.sendInplaceOffset * sizeof(float) * rank_;
  initGradient(inPlace, 0);
  startColl(sqzFloat32, op, inPlace);  // untimed: brings every rank to this call
  barrier();

  sqzCodecStats_t before, after;
  check(sqzCodecGetStats(codec_, &before));
  double sec = 0;
  if (!inPlace) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o_.iters; ++i) startColl(sqzFloat32, op, false);
    auto t1 = std::chrono::steady_clock::now();
    sec = std::chrono::duration<double>(t1 - t0).count();
  } else {
    for (int i = 0; i < o_.iters; ++i) {
      std::memcpy(inPlaceInput, send_.ptr, bytes);  // a fresh gradient, untimed
      auto t0 = std::chrono::steady_clock::now();
      startColl(sqzFloat32, op, true);
      auto t1 = std::chrono::steady_clock::now();
      sec += std::chrono::duration<double>(t1 - t0).count();
    }
  }
  const char* algo = nullptr;
  check(sqzCommGetLastAlgorithm(comm_, &algo));
  algo_[inPlace] = counts_.paramCount > 0 && algo && *algo ? algo : "-";
  check(sqzCodecGetStats(codec_, &after));
  codecSums_[0] += static_cast<double>(after.wireBytes - before.wireBytes);
  codecSums_[1] += static_cast<double>(after.denseBytes - before.denseBytes);
  codecSums_[2] += static_cast<double>(after.calls - before.calls);
  return sec / o_.iters;
}

// One call with a fresh codec on fresh data. Sets *relErr to ||out - exact|| / ||exact|| (0 when
// exact is all zeros and out matches) and returns the number of elements on which the ranks'
// results are not bitwise equal (the same on every rank).
int64_t Bench::checkCompressed(sqzRedOp_t op, bool inPlace, double* relErr) {
  const size_t n = counts_.recvCount;
  char* recv = static_cast<char*>(recv_.ptr);
  sqzCodec_t timed = codec_;
  codec_ = createCodec(spec_);
  std::memset(recv, kPoison, std::max(counts_.recvCount, counts_.sendCount) * sizeof(float));
  const uint64_t seed = ++seed_;
  initGradient(inPlace, seed);
  startColl(sqzFloat32, op, inPlace);
  destroyCodec(&codec_);
  codec_ = timed;

  const size_t outOffset = inPlace ? counts_.recvInplaceOffset * rank_ : 0;
  const float* got = reinterpret_cast<const float*>(recv) + outOffset;
  double errSq = 0, exactSq = 0;
  for (size_t i = 0; i < n; ++i) {
    double exact = 0;
    for (int r = 0; r < nranks_; ++r) exact += static_cast<double>(gradientValue(i, r, seed));
    if (op == sqzAvg) exact /= nranks_;
    double d = static_cast<double>(got[i]) - exact;
    errSq += d * d;
    exactSq += exact * exact;
  }
  *relErr = exactSq > 0 ? std::sqrt(errSq / exactSq) : std::sqrt(errSq);
  check(sqzAllReduce(relErr, relErr, 1, sqzFloat64, sqzMax, comm_, nullptr));

  // Bitwise agreement: the max and min over the ranks of each result's bits, as int32 (the
  // expected and send buffers are free now; each holds n floats).
  int32_t* hi = static_cast<int32_t*>(expected_.ptr);
  int32_t* lo = static_cast<int32_t*>(send_.ptr);
  check(sqzAllReduce(got, hi, n, sqzInt32, sqzMax, comm_, nullptr));
  check(sqzAllReduce(got, lo, n, sqzInt32, sqzMin, comm_, nullptr));
  int64_t differ = 0;
  size_t first = n;
  for (size_t i = 0; i < n; ++i) {
    if (hi[i] != lo[i]) {
      if (first == n) first = i;
      ++differ;
    }
  }
  if (differ && rank_ == 0)
    std::fprintf(stderr,
                 "%s: %zu B float %s %s -z %s: the ranks' results differ on %" PRId64
                 " elements, first at %zu (bits 0x%08x .. 0x%08x)\n",
                 coll_.program, n * sizeof(float), opName(op),
                 inPlace ? "in-place" : "out-of-place", spec_, differ, first,
                 static_cast<unsigned>(lo[first]), static_cast<unsigned>(hi[first]));
  return differ;
}

void Bench::benchCompressed(sqzRedOp_t op, bool inPlace) {
  const size_t bytes = std::max(counts_.sendCount, counts_.recvCount) * sizeof(float);
  double sec = timeCompressed(op, inPlace);
  check(sqzAllReduce(&sec, &sec, 1, sqzFloat64, sqzMax, comm_, nullptr));
  double algBw = sec > 0 ? static_cast<double>(bytes) / 1.0e9 / sec : 0.0;
  double busBw = algBw * coll_.busFactor(nranks_);

  int64_t differ = 0;
  for (int c = 0; c < o_.check; ++c) {
    double err = 0;
    differ += checkCompressed(op, inPlace, &err);
    if (!std::isnan(relErr_) && !(err <= relErr_)) relErr_ = err;  // NaN sticks
  }
  if (differ) ++errors_;
  if (o_.jsonPath) addJsonRow(sqzFloat32, op, inPlace, sec, algBw, busBw, o_.check ? differ : -1);

  printOnRoot(rank_, "%s", timedCells(sec * 1.0e6, algBw, busBw, o_.check ? differ : -1).c_str());
  bwSum_ += busBw;
  ++bwCount_;
}

// codec, wire/rank, ratio, relerr (see printHeader), and the end of the row.
// Also sets the codec members of this size's JSON rows, rows_[firstRow ..].
void Bench::printCodecColumns(size_t firstRow) {
  double sums[3] = {codecSums_[0], codecSums_[1], codecSums_[2]};
  check(sqzAllReduce(sums, sums, 3, sqzFloat64, sqzSum, comm_, nullptr));
  for (size_t i = firstRow; i < rows_.size(); ++i) {
    JsonRow& row = rows_[i];
    row.codec = spec_;
    if (sums[2] > 0) row.wirePerRank = sums[0] / sums[2];
    if (sums[0] > 0) row.ratio = sums[1] / sums[0];
    if (relErr_ >= 0) row.relErr = relErr_;  // NaN (printed "nan") stays NaN: null
  }
  printOnRoot(rank_, "  %-*s", codecWidth_, spec_);
  if (sums[2] > 0)
    printOnRoot(rank_, "  %10.0f", sums[0] / sums[2]);
  else
    printOnRoot(rank_, "  %10s", "N/A");
  if (sums[0] > 0)
    printOnRoot(rank_, "  %7.2f", sums[1] / sums[0]);
  else
    printOnRoot(rank_, "  %7s", "N/A");  // one rank sends nothing
  if (relErr_ >= 0 || std::isnan(relErr_))
    printOnRoot(rank_, "  %9.2e\n", relErr_);
  else
    printOnRoot(rank_, "  %9s\n", "N/A");
}

void Bench::timeTest(sqzDataType_t type, sqzRedOp_t op) {
  barrier();
  // Warm up at the largest, then the smallest size (out of place), as nccl-tests does; with -z
  // through a codec made for the purpose (each size also warms up its own codec below).
  for (size_t bytes : {o_.maxBytes, o_.minBytes}) {
    setup(bytes, type);
    if (spec_) {
      codec_ = createCodec(spec_);
      initGradient(false, 0);
    }
    for (int i = 0; i < o_.warmup; ++i) startColl(type, op, false);
    syncCalls();
    if (spec_) destroyCodec(&codec_);
  }
  for (size_t size = o_.minBytes; size <= o_.maxBytes;) {
    setup(size, type);
    size_t esz = typeSize(type);
    if (spec_) {
      codec_ = createCodec(spec_);
      initGradient(false, 0);
      for (int i = 0; i < o_.warmup; ++i) startColl(type, op, false);
      std::fill(std::begin(codecSums_), std::end(codecSums_), 0.0);
      relErr_ = -1;
    }
    const size_t firstRow = rows_.size();
    printOnRoot(rank_, "%s",
                rowStart(std::max(counts_.sendCount, counts_.recvCount) * esz, counts_.paramCount,
                         typeName(type), coll_.usesOp ? opName(op) : "none", root_)
                    .c_str());
    if (spec_) {
      benchCompressed(op, false);
      benchCompressed(op, true);
      destroyCodec(&codec_);
    } else {
      benchTime(type, op, false);
      benchTime(type, op, true);
    }
    // One word; "out-of-place/in-place" in the unlikely case that the two differ.
    std::string algo =
        algo_[1].empty() || algo_[1] == algo_[0] ? algo_[0] : algo_[0] + "/" + algo_[1];
    if (spec_) {
      printOnRoot(rank_, "  %-6s", algo.c_str());
      printCodecColumns(firstRow);
    } else {
      printOnRoot(rank_, "  %s\n", algo.c_str());
    }
    if (!nextSize(o_, &size)) break;
  }
}

int Bench::run() {
  initComm();
  if (coll_.usesRoot) {
    if (o_.root >= nranks_) {
      if (rank_ == 0)
        std::fprintf(stderr, "%s: root %d is not a rank (there are %d ranks)\n", coll_.program,
                     o_.root, nranks_);
      exitNow(2);
    }
    root_ = o_.root;
  }
  if (!o_.codecs.empty()) checkSpecs();
  printHeader();
  if (o_.jsonPath) gatherHosts();

  // Buffers for the largest size of any datatype (counts of 1-byte elements are byte counts).
  CollCounts maxCounts;
  coll_.byteCount(o_.maxBytes, nranks_, &maxCounts);
  allocate(&send_, maxCounts.sendCount, "send");
  // In place, the send region lives in the receive buffer too (reduce-scatter's is larger).
  allocate(&recv_, std::max(maxCounts.recvCount, maxCounts.sendCount), "receive");
  if (o_.check) allocate(&expected_, maxCounts.recvCount, "expected");
  if (onGpu()) {
    allocateDevice(&dsend_, maxCounts.sendCount, "send");
    allocateDevice(&drecv_, std::max(maxCounts.recvCount, maxCounts.sendCount), "receive");
  }

  for (sqzDataType_t type : o_.types)
    for (sqzRedOp_t op : o_.ops) {
      if (o_.codecs.empty()) timeTest(type, op);
      for (const char* spec : o_.codecs) {
        spec_ = spec;
        timeTest(type, op);
      }
      spec_ = nullptr;
    }

  check(sqzCommDestroy(comm_));
  comm_ = nullptr;
  printOnRoot(rank_, "%s", summaryLines(errors_, bwSum_, bwCount_).c_str());
  std::fflush(stdout);
  if (o_.jsonPath && rank_ == 0) {
    int status = writeJson();
    if (status) return status;
  }
  return errors_ ? 1 : 0;
}

// ---- -J: the rows as JSON ----------------------------------------------------------------------

void Bench::addJsonRow(sqzDataType_t type, sqzRedOp_t op, bool inPlace, double sec, double algBw,
                       double busBw, int64_t wrong) {
  JsonRow row;
  row.size = std::max(counts_.sendCount, counts_.recvCount) * typeSize(type);
  row.count = counts_.paramCount;
  row.type = typeName(type);
  row.redop = coll_.usesOp ? opName(op) : "none";
  row.root = root_;
  row.inPlace = inPlace;
  row.timeUs = sec * 1.0e6;
  row.algBw = algBw;
  row.busBw = busBw;
  row.wrong = wrong;
  row.algo = algo_[inPlace];
  rows_.push_back(std::move(row));
}

// Every rank's host name into runInfo_.hosts, gathered as the header's rank lines are: each rank
// writes its slot and a byte-wise max all-reduce assembles them.
void Bench::gatherHosts() {
  constexpr size_t kHostBytes = 256;
  std::vector<unsigned char> names(static_cast<size_t>(nranks_) * kHostBytes, 0);
  std::string host = hostName().substr(0, kHostBytes - 1);
  std::memcpy(&names[static_cast<size_t>(rank_) * kHostBytes], host.data(), host.size());
  check(sqzAllReduce(names.data(), names.data(), names.size(), sqzUint8, sqzMax, comm_, nullptr));
  runInfo_.nranks = nranks_;
  runInfo_.hosts.clear();
  for (int r = 0; r < nranks_; ++r)
    runInfo_.hosts.emplace_back(reinterpret_cast<const char*>(&names[r * kHostBytes]));
}

// Rank 0, at the end: returns 0, or 2 (with a message) when the file cannot be written.
int Bench::writeJson() {
  std::string why;
  if (!json_->isOpen() && !json_->open(o_.jsonPath, &why)) {
    std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", coll_.program, o_.jsonPath,
                 why.c_str());
    return 2;
  }
  JsonWriter w;
  writeJsonPreamble(w, runInfo_);
  writeJsonRows(w, rows_);
  w.endObject();
  if (!json_->commit(w.text(), &why)) {
    std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", coll_.program, o_.jsonPath,
                 why.c_str());
    return 2;
  }
  return 0;
}

}  // namespace

// ---- Public helpers ------------------------------------------------------------------------

size_t typeSize(sqzDataType_t type) {
  switch (type) {
    case sqzInt8:
    case sqzUint8:
      return 1;
    case sqzFloat16:
    case sqzBfloat16:
      return 2;
    case sqzInt32:
    case sqzUint32:
    case sqzFloat32:
      return 4;
    case sqzInt64:
    case sqzUint64:
    case sqzFloat64:
      return 8;
    default:
      return 0;
  }
}

void fillInput(void* buf, size_t count, size_t first, sqzDataType_t type, sqzRedOp_t op, int rank,
               int nranks, uint64_t seed) {
  bool uns = isUnsigned(type);
  fillPeriodic(buf, count, first, type, [&](void* b, size_t i, size_t j) {
    storeInt(type, b, i, inputValue(op, uns, rank, nranks, j, seed));
  });
}

void fillReduced(void* buf, size_t count, size_t first, sqzDataType_t type, sqzRedOp_t op,
                 int nranks, uint64_t seed) {
  bool uns = isUnsigned(type);
  fillPeriodic(buf, count, first, type, [&](void* b, size_t i, size_t j) {
    int64_t acc = inputValue(op, uns, 0, nranks, j, seed);
    for (int r = 1; r < nranks; ++r) {
      int64_t v = inputValue(op, uns, r, nranks, j, seed);
      switch (op) {
        case sqzProd:
          acc *= v;
          break;
        case sqzMax:
          acc = std::max(acc, v);
          break;
        case sqzMin:
          acc = std::min(acc, v);
          break;
        default:
          acc += v;
          break;  // sum, avg
      }
    }
    if (op != sqzAvg) {
      storeInt(type, b, i, acc);
    } else if (isFloating(type)) {
      storeReal(type, b, i, static_cast<double>(acc) / nranks);
    } else {
      storeInt(type, b, i, acc / nranks);  // truncates toward zero
    }
  });
}

float gradientValue(size_t j, int rank, uint64_t seed) {
  // Four 16-bit uniforms summed: mean 2, variance 1/3, so (sum - 2) * sqrt(3) is roughly
  // standard normal (and bounded by 2 sqrt(3), so no outlier dominates a norm by chance).
  auto normal = [](uint64_t h) {
    double sum = 0;
    for (int k = 0; k < 4; ++k) sum += static_cast<double>((h >> (16 * k)) & 0xffffu) / 65536.0;
    return (sum - 2.0) * 1.7320508075688772;
  };
  constexpr uint64_t kShared = 0x9d1c3f27a5b4e681ull;  // not a rank: the ranks' common part
  uint64_t shared = hash3(j, kShared, seed);
  double scale = std::exp2(-8.0 * static_cast<double>(shared >> 40) / 16777216.0);
  double common = normal(mix(shared));
  double noise = normal(hash3(j, static_cast<uint64_t>(rank) + 1, seed ^ 0x6a09e667f3bcc909ull));
  return static_cast<float>(scale * (0.5 * common + noise));
}

void fillGradient(float* buf, size_t count, size_t first, int rank, uint64_t seed) {
  for (size_t i = 0; i < count; ++i) buf[i] = gradientValue(first + i, rank, seed);
}

uint16_t floatToHalf(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: keep it quiet and keep the top payload bits
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (a >= 0x38800000u) {                                              // normal half (>= 2^-14)
    uint32_t h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry bumps the exponent
    return static_cast<uint16_t>(sign | h);
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (the tie goes to even 0)
  // Subnormal half: units of 2^-24. a's value is m * 2^(e-23) with e in [-25, -15].
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  int e = static_cast<int>(a >> 23) - 127;
  int shift = -e - 1;  // 14 .. 24
  uint32_t h = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t floatToBfloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; overflow carries into inf
  return static_cast<uint16_t>(x >> 16);
}

float bfloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

void fillPattern(void* buf, size_t count, size_t first, sqzDataType_t type, int rank,
                 uint64_t seed) {
  // The max/min values of a lone rank: 41 small integers, exact in every datatype.
  fillInput(buf, count, first, type, sqzMax, rank, 1, seed);
}

int perfMain(int argc, char** argv, const PerfColl& coll) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // one line at a time, so progress shows
  Options o;
  int status = parseOptions(argc, argv, coll, &o);
  if (status >= 0) return status;
  Gpu gpu;
  if (o.memory == Memory::kCuda) {
    std::string why = setUpGpu(&gpu);
    if (!why.empty()) {
      // Every rank says it: whether a GPU is usable can differ between hosts.
      std::string who = haveLauncherEnv() && launcherRank() >= 0
                            ? "rank " + std::to_string(launcherRank()) + ": "
                            : "";
      std::fprintf(stderr, "%s: %s-d cuda: %s\n", coll.program, who.c_str(), why.c_str());
      return 2;
    }
    gCallStream = gpu.stream;
  }
  if (o.algo) {
    // Read by the library when the communicator is created; it rejects unknown names there,
    // with a message naming the valid ones.
    std::string spec = std::string(coll.algoColl) + ":" + o.algo;
    if (setenv("SQZ_ALGO", spec.c_str(), 1) != 0) {
      std::fprintf(stderr, "%s: cannot set SQZ_ALGO: %s\n", coll.program, std::strerror(errno));
      return 1;
    }
  }
  // -J: opened now, on the rank that writes it, so a path that cannot be written stops the run
  // before any collective (the other ranks are stopped by the launcher when this one exits).
  JsonFile json;
  JsonRunInfo runInfo;
  if (o.jsonPath) {
    if (launcherRank() <= 0) {
      std::string why;
      if (!json.open(o.jsonPath, &why)) {
        std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", coll.program, o.jsonPath,
                     why.c_str());
        return 2;
      }
    }
    // "sqz-allreduce-perf" -> "allreduce"
    std::string_view name = coll.program;
    if (name.rfind("sqz-", 0) == 0) name.remove_prefix(4);
    if (name.size() > 5 && name.substr(name.size() - 5) == "-perf") name.remove_suffix(5);
    runInfo.program = coll.program;
    runInfo.collective = name;
    // What the library was told: SQZ_TRANSPORT, else its default (base/params.h).
    const char* transport = std::getenv("SQZ_TRANSPORT");
    runInfo.transport = transport && *transport ? transport : "cuda_ipc,shm,tcp";
    runInfo.argc = argc;
    runInfo.argv = argv;
    runInfo.started = std::time(nullptr);
  }
  Bench bench(coll, o, gpu, &json, runInfo);
  return bench.run();
}

void* callStream() { return gCallStream; }

}  // namespace squeeze::perf
