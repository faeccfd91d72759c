// sqzAllReduce with ranks as threads in one process, value-parameterized over transport x rank
// count x algorithm (SQZ_ALGO: the tuner's choice, or one algorithm forced for every size). Each
// combination creates ONE communicator (creating communicators is the slow part) and runs every
// case inside it, in the same order on every rank:
//   - every datatype x op x count {0, 1, 7, 1031}, in place and out of place, plus 1031 with both
//     buffers one element past a 64-byte boundary;
//   - a large count (kLargeCount) for float and int32 with sum and max;
//   - count 0 with NULL buffers;
//   - random (inexact) floating-point sums and averages, checked against a tolerance and for
//     bitwise agreement between ranks.
// Exact cases use inputs whose reduction is exact in every type (as nccl-tests does), so the
// output must equal the locally computed expectation bit for bit, on every rank. Out-of-place
// calls must not modify sendbuff, and no call may write past the end of recvbuff.
// See facebookincubator/gloo:gloo/test/allreduce_test.cc for the shape of these tests.
#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "base/crypto.h"
#include "test_util.h"

namespace sqztest {
namespace {

// 262147 floats are 1 MiB: several pipeline chunks per rank at the chunk size used below.
constexpr size_t kLargeCount = 262147;
// A chunk well below the default (512K), so that the large cases (1 MiB) cross chunk boundaries
// inside each rank's segment even at 8 ranks.
constexpr int kChunkBytes = 64 << 10;
constexpr size_t kMaxReportedFailures = 40;

struct Case {
  sqzDataType_t dtype;
  sqzRedOp_t op;
  size_t count;
  bool inPlace;
  size_t offsetElems = 0;  // both buffers start this many elements past a 64-byte boundary
  bool nullBuffers = false;
  bool exact = true;       // false: random floats, checked with a tolerance

  std::string name() const {
    std::string s = std::string(typeName(dtype)) + " " + opName(op) +
                    " count=" + std::to_string(count) + (inPlace ? " in-place" : " out-of-place");
    if (offsetElems) s += " offset=" + std::to_string(offsetElems) + "elem";
    if (nullBuffers) s += " null-buffers";
    if (!exact) s += " random-inputs";
    return s;
  }
  size_t bytes() const { return count * typeSize(dtype); }
};

std::vector<Case> buildCases() {
  std::vector<Case> cases;
  for (sqzDataType_t t : kAllTypes)
    for (sqzRedOp_t op : kAllOps) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1031}})
        for (bool inPlace : {false, true}) cases.push_back({t, op, count, inPlace});
      cases.push_back({t, op, 1031, false, 1});
      cases.push_back({t, op, 1031, true, 1});
    }
  for (sqzDataType_t t : {sqzFloat32, sqzInt32})
    for (sqzRedOp_t op : {sqzSum, sqzMax}) {
      cases.push_back({t, op, kLargeCount, false});
      cases.push_back({t, op, kLargeCount, true});
      cases.push_back({t, op, kLargeCount, false, 1});
    }
  cases.push_back({sqzFloat32, sqzSum, 0, false, 0, /*nullBuffers=*/true});
  for (sqzDataType_t t : {sqzFloat16, sqzBfloat16, sqzFloat32, sqzFloat64})
    for (sqzRedOp_t op : {sqzSum, sqzAvg})
      for (size_t count : {size_t{1031}, size_t{65537}})
        cases.push_back({t, op, count, false, 0, false, /*exact=*/false});
  return cases;
}

// ---- exact inputs (test_util.h) ---------------------------------------------------------------

Wide exactInput(const Case& c, int rank, size_t i) { return exactValue(c.dtype, c.op, rank, i); }

void storeExpected(const Case& c, int nranks, size_t i, void* out) {
  storeExactResult(c.dtype, c.op, nranks, i, out);
}

// ---- random (inexact) inputs ------------------------------------------------------------------

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A value in (-1, 1) with a full mantissa; rounded to the type when stored.
Wide randomInput(int rank, size_t i) {
  uint64_t h = mix(static_cast<uint64_t>(rank) << 40 ^ i);
  Wide w;
  w.f = (static_cast<double>(h >> 11) / 9007199254740992.0) * 2.0 - 1.0;
  return w;
}

void fillInput(const Case& c, int rank, void* buf) {
  for (size_t i = 0; i < c.count; ++i)
    storeElement(c.dtype, buf, i, c.exact ? exactInput(c, rank, i) : randomInput(rank, i));
}

double unitRoundoff(sqzDataType_t t) {
  switch (t) {
    case sqzFloat16: return std::ldexp(1.0, -11);
    case sqzBfloat16: return std::ldexp(1.0, -8);
    case sqzFloat32: return std::ldexp(1.0, -24);
    default: return std::ldexp(1.0, -53);
  }
}

// What the main thread prepares before the ranks start: the exact result bytes, or for random
// cases the reference value and error bound per element (from the inputs as stored).
struct Expectation {
  std::vector<unsigned char> bytes;
  std::vector<double> value, tolerance;
};

Expectation expectationFor(const Case& c, int nranks) {
  Expectation e;
  if (c.exact) {
    e.bytes.resize(c.bytes() + 1);
    for (size_t i = 0; i < c.count; ++i) storeExpected(c, nranks, i, e.bytes.data());
    return e;
  }
  e.value.assign(c.count, 0.0);
  e.tolerance.assign(c.count, 0.0);
  std::vector<unsigned char> in(c.bytes());
  for (int r = 0; r < nranks; ++r) {
    fillInput(c, r, in.data());
    for (size_t i = 0; i < c.count; ++i) {
      double x = loadAsDouble(c.dtype, in.data(), i);
      e.value[i] += x;
      e.tolerance[i] += std::fabs(x);
    }
  }
  const double u = unitRoundoff(c.dtype);
  for (size_t i = 0; i < c.count; ++i) {
    // Each of the nranks-1 combines rounds once (in the element type for 16-bit floats).
    double bound = 2.0 * nranks * u * e.tolerance[i] + 1e-300;
    if (c.op == sqzAvg) {
      e.value[i] /= nranks;
      bound = bound / nranks + 2.0 * u * std::fabs(e.value[i]);
    }
    e.tolerance[i] = bound;
  }
  return e;
}

// ---- per-rank outcome of one case --------------------------------------------------------------

struct Outcome {
  bool ran = false;
  sqzResult_t rc = sqzInternalError;
  std::string error;       // sqzGetLastError after a failed call
  std::string mismatch;    // first wrong element, and how many
  bool sendModified = false;
  bool guardBroken = false;
  squeeze::Digest digest{};
};

std::string checkOutput(const Case& c, const Expectation& e, const unsigned char* out) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < c.count; ++i) {
    bool ok;
    if (c.exact) {
      const size_t es = typeSize(c.dtype);
      ok = std::memcmp(out + i * es, e.bytes.data() + i * es, es) == 0;
    } else {
      double got = loadAsDouble(c.dtype, out, i);
      ok = std::isfinite(got) && std::fabs(got - e.value[i]) <= e.tolerance[i];
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  std::string want = c.exact ? describeElement(c.dtype, e.bytes.data(), first)
                             : std::to_string(e.value[first]) + " +- " +
                                   std::to_string(e.tolerance[first]);
  return std::to_string(bad) + " of " + std::to_string(c.count) + " elements wrong; first at " +
         std::to_string(first) + ": got " + describeElement(c.dtype, out, first) + ", want " +
         want;
}

// Runs every case on one rank.
// `algo`, when not empty: the algorithm every call must have run (a case that ran another fails).
void runCases(sqzComm_t& comm, int rank, int nranks, const std::vector<Case>& cases,
              const std::vector<Expectation>& expect, std::vector<std::vector<Outcome>>& outcomes,
              std::mutex& mu, const std::string& algo) {
  int n = -1, me = -1;
  {
    sqzResult_t r1 = sqzCommCount(comm, &n), r2 = sqzCommUserRank(comm, &me);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(r1, sqzSuccess);
    EXPECT_EQ(r2, sqzSuccess);
    EXPECT_EQ(n, nranks) << "sqzCommCount on rank " << rank;
    EXPECT_EQ(me, rank) << "sqzCommUserRank on rank " << rank;
  }
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    setStatus("case " + std::to_string(k) + ": sqzAllReduce " + c.name());
    const size_t es = typeSize(c.dtype);
    OffsetBuffer send(c.bytes(), c.offsetElems * es), recv(c.bytes(), c.offsetElems * es);
    fillInput(c, rank, send.data());
    std::vector<unsigned char> input(send.data(), send.data() + c.bytes());
    std::memset(recv.data(), 0xcd, c.bytes());
    const void* sb = send.data();
    void* rb = c.inPlace ? send.data() : recv.data();
    if (c.nullBuffers) sb = rb = nullptr;

    Outcome o;
    o.ran = true;
    o.rc = sqzAllReduce(sb, rb, c.count, c.dtype, c.op, comm, nullptr);
    if (o.rc != sqzSuccess) {
      o.error = sqzGetLastError(comm);
      std::lock_guard<std::mutex> lock(mu);
      outcomes[k][rank] = std::move(o);
      // Stop here, and make the peers see it at once instead of waiting for the timeout.
      setStatus("sqzCommAbort after a failed case " + std::to_string(k));
      sqzCommAbort(comm);
      comm = nullptr;
      return;
    }
    const OffsetBuffer& out = c.inPlace ? send : recv;
    o.mismatch = checkOutput(c, expect[k], out.data());
    const char* ran = nullptr;
    if (!algo.empty() && c.count > 0 && sqzCommGetLastAlgorithm(comm, &ran) == sqzSuccess &&
        algo != ran)
      o.mismatch += std::string(o.mismatch.empty() ? "" : "; ") + "ran " + ran + ", not " + algo;
    o.guardBroken = !out.guardIntact();
    o.sendModified = !c.inPlace && c.bytes() > 0 &&
                     std::memcmp(send.data(), input.data(), c.bytes()) != 0;
    o.digest = squeeze::sha256(out.data(), c.bytes());
    std::lock_guard<std::mutex> lock(mu);
    outcomes[k][rank] = std::move(o);
  }
}

// Every rank's outcomes as test failures (see reportOutcomes); all-reduce output is the same on
// every rank.
void report(const std::string& where, const std::vector<Case>& cases,
            const std::vector<std::vector<Outcome>>& outcomes) {
  reportOutcomes(
      where, cases, outcomes, kMaxReportedFailures, [](const Outcome&, auto) {},
      [](size_t) { return true; });
}

// ---- the parameterized test -------------------------------------------------------------------

// The expectations for every case at one rank count. Consecutive instances share the rank count
// (only the algorithm differs), so the last set is kept.
const std::vector<Expectation>& expectationsFor(const std::vector<Case>& cases, int nranks) {
  static int cachedRanks = -1;
  static std::vector<Expectation> cached;
  if (cachedRanks != nranks) {
    cached.clear();
    cached.reserve(cases.size());
    for (const Case& c : cases) cached.push_back(expectationFor(c, nranks));
    cachedRanks = nranks;
  }
  return cached;
}

// transport, nranks, algorithm ("auto": SQZ_ALGO unset, the tuner decides per call size).
using Param = TransportRanksAlgo;

class AllReduceTest : public ::testing::TestWithParam<Param> {};

TEST_P(AllReduceTest, AllTypesOpsAndCounts) {
  const char* transport = std::get<0>(GetParam());
  const int nranks = std::get<1>(GetParam());
  const std::string algo = std::get<2>(GetParam());
  if (!transportCompiledIn(transport))
    GTEST_SKIP() << "transport '" << transport << "' is not compiled into this build";

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Case> cases = buildCases();
  const std::vector<Expectation>& expect = expectationsFor(cases, nranks);
  std::vector<std::vector<Outcome>> outcomes(cases.size(), std::vector<Outcome>(nranks));
  std::mutex mu;  // protects outcomes and gtest assertions from rank threads
  const double prepSeconds = secondsSince(t0);

  RunOptions opts;
  opts.transports = transport;
  opts.chunkBytes = kChunkBytes;
  RunResult run;
  {
    ScopedEnv env;  // read by sqzCommInitRankConfig, before any rank thread runs a collective
    if (algo == "auto")
      env.unset("SQZ_ALGO");
    else
      env.set("SQZ_ALGO", algo.c_str());
    // Direct moves a window's worth per round: 4100 bytes makes the large cases hundreds of
    // rounds, of element counts that do not divide evenly among the ranks.
    if (algo == "direct") env.set("SQZ_SHM_DIRECT_BYTES", "4100");
    run = runRanks(nranks, opts, [&](sqzComm_t& comm, int rank) {
      runCases(comm, rank, nranks, cases, expect, outcomes, mu, algo == "direct" ? algo : "");
    });
  }
  if (run.unknownTransport)
    GTEST_SKIP() << "transport '" << transport << "' is unknown to this build: "
                 << run.initErrors.front();
  if (!run.initErrors.empty() &&
      run.initErrors.front().find("is not an algorithm") != std::string::npos)
    GTEST_SKIP() << "algorithm '" << algo << "' is not in this build: " << run.initErrors.front();
  for (const std::string& e : run.initErrors) ADD_FAILURE() << "init failed: " << e;
  if (!run.initErrors.empty()) return;

  const std::string where =
      std::string(transport) + " nranks=" + std::to_string(nranks) + " algo=" + algo;
  report(where, cases, outcomes);
  std::printf("[  TIMING  ] %s: %zu calls per rank; expectations %.2f s, init %.2f s, "
              "total %.2f s\n",
              where.c_str(), cases.size(), prepSeconds, run.initSeconds, run.totalSeconds);
}

INSTANTIATE_TEST_SUITE_P(Collective, AllReduceTest,
                         ::testing::ValuesIn(transportRanksAlgos(
                             {1, 2, 3, 4, 5, 7, 8},
                             {"auto", "naive", "ps", "ring", "rhd", "tree"})),
                         transportRanksAlgoName);

// Direct runs only where every rank shares one host's memory, so over shm only (the "auto"
// instances above run it too, with the default window, wherever it applies).
INSTANTIATE_TEST_SUITE_P(Direct, AllReduceTest,
                         ::testing::Combine(::testing::Values("shm"),
                                            ::testing::Values(2, 3, 4, 5, 7, 8),
                                            ::testing::Values("direct")),
                         transportRanksAlgoName);

const auto* const kLoopback = ::testing::AddGlobalTestEnvironment(new LoopbackEnvironment);

}  // namespace
}  // namespace sqztest
