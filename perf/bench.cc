// The sqz-*-perf binaries' timed runner: the dense calls, the table, and -J; see bench.h.
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
// over the ranks so every rank agrees on the outcome. With -z SPEC the same sweep runs through a
// codec (bench_codec.cc).
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
// -d cuda without a usable GPU, or in a build without CUDA, exits 2. -d cuda with -z times the
// compressed all-reduce on device buffers (bench_codec.cc).
//
// With -J FILE, every rank keeps the rows it computed (each printed row is an out-of-place and an
// in-place JSON row), the ranks' host names are gathered once after the header, and at the end
// rank 0 writes the file (see json_file.h). Without -J nothing of this runs, so the printed
// output and the collectives called are what they were.
#include "bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "datatypes.h"
#include "squeeze_config.h"
#include "table.h"
#if SQZ_CUDA_STANDIN
#include "device/standin/standin.h"
#endif

namespace squeeze::perf {
namespace {

// Room for a long host name and a GPU's name in the rank lines.
constexpr int kRankLineBytes = 256;

}  // namespace

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

#if SQZ_CUDA_STANDIN
namespace {
standin::Counters gCountedFrom, gProgressFrom;
}  // namespace

void Bench::countStart() {
  if (!onGpu()) return;
  gCountedFrom = standin::processCounters();
  gProgressFrom = standin::countersOfThreadsNamed("sqz-progress");
}

void Bench::countStop(int calls) {
  if (!onGpu() || calls <= 0) return;
  standin::Counters d = standin::processCounters() - gCountedFrom;
  const standin::Counters progress = standin::countersOfThreadsNamed("sqz-progress") - gProgressFrom;
  d.hostWaits -= std::min<uint64_t>(d.hostWaits, 2);  // the loop's syncCalls (gpuSync's two)
  standinLine_ = "#   stand-in, this process, per call: " +
                 standin::perCall(d, static_cast<uint64_t>(calls)) + "; " +
                 std::to_string(progress.apiCalls) + " CUDA calls on progress threads\n";
}
#else
void Bench::countStart() {}
void Bench::countStop(int) {}
#endif

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

// The limit a call's memory traffic sets when every rank is on one GPU: each rank's input is
// read and its output written at least once, 2 N S bytes a call through the device's memory,
// so algbw <= B / (2 N) for copy bandwidth B (bytes read + written), and busbw that times the
// collective's bus factor. Ranks on several GPUs are bound by the links between them instead.
void Bench::printDeviceLimit() {
  constexpr size_t kKeyBytes = 128;
  char host[64] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  std::vector<unsigned char> keys(static_cast<size_t>(nranks_) * kKeyBytes, 0);
  std::snprintf(reinterpret_cast<char*>(&keys[static_cast<size_t>(rank_) * kKeyBytes]), kKeyBytes,
                "%s/%s", host, gpu_.pciBusId.c_str());
  check(sqzAllReduce(keys.data(), keys.data(), keys.size(), sqzUint8, sqzMax, comm_, nullptr));
  int sharing = 0;
  for (int r = 0; r < nranks_; ++r)
    sharing += std::memcmp(&keys[static_cast<size_t>(r) * kKeyBytes], keys.data(), kKeyBytes) == 0;
  if (rank_ != 0) return;
  constexpr size_t kCopyBytes = size_t(256) << 20;
  double gbps = 0;
  const std::string why = gpuCopyBandwidth(gpu_.stream, kCopyBytes, &gbps);
  if (!why.empty()) {
    std::printf("# device copy bandwidth: not measured: %s\n#\n", why.c_str());
    return;
  }
  std::printf("# device copy bandwidth: %.1f GB/s (cudaMemcpyAsync device to device of 256 MiB, "
              "bytes read + written)\n", gbps);
  if (sharing == nranks_ && std::strcmp(coll_.name, "AllReduce") == 0) {
    const double algbw = gbps / (2.0 * nranks_);
    std::printf("# HBM-traffic limit: %d rank(s) on one GPU read each input and write each "
                "output once (2 N S bytes a call): algbw <= %.2f GB/s, busbw <= %.2f GB/s\n",
                nranks_, algbw, algbw * coll_.busFactor(nranks_));
  } else if (sharing != nranks_) {
    std::printf("# ranks on several GPUs: the links between them bound busbw, not the device's "
                "memory\n");
  }
  printOnRoot(rank_, "#\n");
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
  if (onGpu()) printDeviceLimit();
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
        "#   dense:     timed calls that ran dense (below min_bytes, or the pay-off guard's\n"
        "#              choice) / timed calls, out of place and in place.\n",
        coll_.name, opName(o_.ops[0]));
    printOnRoot(rank_, "%s#\n", guardLine().c_str());
  }
  printOnRoot(rank_, "%s%s", columnGroupLine().c_str(), columnNames().c_str());
  if (o_.codecs.empty()) {
    printOnRoot(rank_, "%s\n", "algo");
  } else {
    printOnRoot(rank_, "%-6s  %-*s  %10s  %7s  %9s  %9s\n", "algo", codecWidth_, "codec",
                "wire/rank", "ratio", "relerr", "dense");
  }
  printOnRoot(rank_, "%s", columnUnits().c_str());
  if (o_.codecs.empty())
    printOnRoot(rank_, "\n");
  else
    printOnRoot(rank_, "  %-6s  %-*s  %10s  %7s  %9s  %9s\n", "", codecWidth_, "", "(B)", "", "",
                "(calls)");
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
  if (!inPlace) countStart();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o_.iters; ++i) startColl(type, op, inPlace);
  syncCalls();
  auto t1 = std::chrono::steady_clock::now();
  if (!inPlace) countStop(o_.iters);
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
    if (!standinLine_.empty()) printOnRoot(rank_, "%s", standinLine_.c_str());
    standinLine_.clear();
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
      for (const std::string& spec : specs_) {
        spec_ = spec.c_str();
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
  if (!json_->commit(perfJsonText(runInfo_, rows_), &why)) {
    std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", coll_.program, o_.jsonPath,
                 why.c_str());
    return 2;
  }
  return 0;
}

}  // namespace squeeze::perf
