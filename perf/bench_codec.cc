// -z for the sqz-*-perf binaries: the Bench members that time and check the compressed call
// (PerfColl::runCompressed) through a codec, and print its codec columns; see bench.h.
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
// results differ. With -d cuda the calls get device buffers (the host buffers' device copies,
// uploaded before and downloaded after, untimed), the codec runs its GPU kernels, and a timed
// loop is the host clock around the enqueued calls and the stream's synchronization, as for
// dense calls; the fresh in-place gradient is a device-to-device copy.
//
// -z measures the codec: its runs have the pay-off guard (compress/payoff_guard.h) off. With the
// guard on, a codec's first four calls alternate compressed and dense, and later calls go dense
// whenever compressing does not pay, so a short run would time dense calls under the codec's
// name (issue 32: top-k 1% at 1 Gbit/s measured 2.4x dense, 11.1x with the guard off). Each
// lossy spec runs with auto_dense=0 added, unless the spec sets auto_dense itself; --guard adds
// auto_dense=1 instead (what a training loop gets by default), and so does
// SQZ_CODEC_AUTO_DENSE=1 without --guard (=0: off, as the default). The key is added rather than
// the environment changed so that the codec column shows what ran. The dense column counts the
// timed calls that ran dense (the codec's denseCalls: below min_bytes, or the guard's choice),
// so a run with the guard on says how many of its timed calls were not the codec's.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench.h"
#include "datatypes.h"
#include "inputs.h"
#include "table.h"

namespace squeeze::perf {

namespace {

// Whether a spec text ("method:key=value,...") sets auto_dense itself.
bool setsAutoDense(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return false;
  for (size_t at = colon + 1; at <= spec.size();) {
    size_t end = std::min(spec.find(',', at), spec.size());
    std::string key = spec.substr(at, std::min(spec.find('=', at), end) - at);
    key.erase(0, key.find_first_not_of(' '));
    key.erase(key.find_last_not_of(' ') + 1);
    if (key == "auto_dense") return true;
    at = end + 1;
  }
  return false;
}

// SQZ_CODEC_AUTO_DENSE when set to 0 or 1, else nullptr (unset; any other value the library has
// already refused when the communicator was created).
const char* autoDenseEnv() {
  const char* v = std::getenv("SQZ_CODEC_AUTO_DENSE");
  if (!v) return nullptr;
  long n = 0;
  if (!parseInt(v, 0, 1, &n)) return nullptr;
  return n ? "1" : "0";
}

}  // namespace

const char* Bench::guardValue() const {
  if (o_.guard) return "1";
  const char* env = autoDenseEnv();
  return env ? env : "0";
}

std::string Bench::guardLine() const {
  const char* why = o_.guard ? "on (auto_dense=1: --guard)"
                    : autoDenseEnv()
                        ? (guardValue()[0] == '1' ? "on (auto_dense=1: SQZ_CODEC_AUTO_DENSE)"
                                                  : "off (auto_dense=0: SQZ_CODEC_AUTO_DENSE)")
                        : "off (auto_dense=0: -z measures the codec; --guard: on)";
  return std::string("# -z: the pay-off guard is ") + why + ",\n" +
         "#   added to each lossy spec without an auto_dense of its own; the codec column\n" +
         "#   shows the spec as it ran.\n";
}

// Resolves each -z spec into specs_ (the guard's key added, see the top) and creates its codec
// once before the header, so a bad spec stops the run with the library's message (on rank 0;
// every rank fails alike, creation being deterministic) instead of halfway through a table.
// Every method but dense is lossy and takes auto_dense; dense refuses it, and runs as given.
void Bench::checkSpecs() {
  size_t count = std::max<size_t>(1, o_.minBytes / sizeof(float));
  for (const char* given : o_.codecs) {
    std::string spec = given;
    const size_t colon = spec.find(':');
    if (spec.substr(0, colon) != "dense" && !setsAutoDense(spec))
      spec += std::string(colon == std::string::npos ? ":" : ",") + "auto_dense=" + guardValue();
    codecWidth_ = std::max(codecWidth_, static_cast<int>(spec.size()));
    specs_.push_back(spec);
    sqzCodec_t codec = nullptr;
    sqzResult_t r = sqzCodecCreate(&codec, spec.c_str(), count, sqzFloat32, comm_);
    if (r != sqzSuccess) {
      if (rank_ == 0) {
        const char* detail = sqzGetLastError(comm_);
        std::fprintf(stderr, "%s: -z '%s'%s%s%s: %s: %s\n", coll_.program, given,
                     spec == given ? "" : " (run as '", spec == given ? "" : spec.c_str(),
                     spec == given ? "" : "')", sqzGetErrorString(r),
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
  if (onGpu()) upload(sizeof(float));
}

// In place: a fresh copy of the gradient (kept in the send buffer) into the receive buffer.
void Bench::refreshInPlaceInput() {
  const size_t bytes = counts_.sendCount * sizeof(float);
  char* to = callRecv() + counts_.sendInplaceOffset * sizeof(float) * rank_;
  if (onGpu())
    checkCuda(gpuCopy(to, callSend(), bytes, gpu_.stream));
  else
    std::memcpy(to, callSend(), bytes);
}

// Seconds per call (this rank's average); adds the timed calls' codec statistics to codecSums_,
// sets *denseCalls to how many of them ran dense, and records the algorithm.
double Bench::timeCompressed(sqzRedOp_t op, bool inPlace, uint64_t* denseCalls) {
  initGradient(inPlace, 0);
  startColl(sqzFloat32, op, inPlace);  // untimed: brings every rank to this call
  syncCalls();
  barrier();

  sqzCodecStats_t before, after;
  check(sqzCodecGetStats(codec_, &before));
  double sec = 0;
  if (!inPlace) {
    countStart();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o_.iters; ++i) startColl(sqzFloat32, op, false);
    syncCalls();
    auto t1 = std::chrono::steady_clock::now();
    countStop(o_.iters);
    sec = std::chrono::duration<double>(t1 - t0).count();
  } else {
    for (int i = 0; i < o_.iters; ++i) {
      refreshInPlaceInput();  // a fresh gradient, untimed
      auto t0 = std::chrono::steady_clock::now();
      startColl(sqzFloat32, op, true);
      syncCalls();
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
  *denseCalls = after.denseCalls - before.denseCalls;
  codecSums_[3] += static_cast<double>(*denseCalls);
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
  if (onGpu()) {
    syncCalls();
    download(sizeof(float));
  }
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
  uint64_t denseCalls = 0;
  double sec = timeCompressed(op, inPlace, &denseCalls);
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
  if (o_.jsonPath) {
    addJsonRow(sqzFloat32, op, inPlace, sec, algBw, busBw, o_.check ? differ : -1);
    rows_.back().denseCalls = static_cast<int64_t>(denseCalls);  // the ranks agree
  }

  printOnRoot(rank_, "%s", timedCells(sec * 1.0e6, algBw, busBw, o_.check ? differ : -1).c_str());
  bwSum_ += busBw;
  ++bwCount_;
}

// codec, wire/rank, ratio, relerr, dense (see printHeader), and the end of the row.
// Also sets the codec members of this size's JSON rows, rows_[firstRow ..].
void Bench::printCodecColumns(size_t firstRow) {
  double sums[4] = {codecSums_[0], codecSums_[1], codecSums_[2], codecSums_[3]};
  check(sqzAllReduce(sums, sums, 4, sqzFloat64, sqzSum, comm_, nullptr));
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
    printOnRoot(rank_, "  %9.2e", relErr_);
  else
    printOnRoot(rank_, "  %9s", "N/A");
  // Dense calls / timed calls of both halves; every rank counts the same calls.
  const std::string dense = std::to_string(std::llround(sums[3] / nranks_)) + "/" +
                            std::to_string(std::llround(sums[2] / nranks_));
  printOnRoot(rank_, "  %9s\n", dense.c_str());
}

}  // namespace squeeze::perf
