// The adaptive methods and the pay-off guard through the public API, ranks as threads over shm:
//   - gravac: every rank, each with its own gradients, uses the same CF at every call (the
//     decision is taken from all-reduced figures), with the guard on as well as off, and every
//     rank ends each call with bitwise the same result;
//   - gravac: save on every rank mid-exploration, load into fresh codecs, and the next calls give
//     the same results, CFs and state as the codecs that went on (bit for bit);
//   - accordion: the CF switches at the interval ends a scripted gradient norm calls for;
//   - the guard: with SQZ_CODEC_DELAY_US making every compressed call 100 ms slower, every call
//     after the four warm-up calls runs dense (and with auto_dense=0 none does).
// The figures and the other rules are checked on scripted inputs in unit/adaptive_policy_test.cc.
#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

namespace sqztest {
namespace {

RunOptions shm() {
  RunOptions o;
  o.transports = "shm";
  return o;
}

// Gradient-like values with a heavy tail (a few large, many small), different on every rank and
// call; scale multiplies the whole call's gradient.
std::vector<float> gradient(int rank, int call, size_t n, float scale = 1.0f) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t h = static_cast<uint32_t>(i * 2654435761u) ^
                 static_cast<uint32_t>(rank * 40503 + call * 7919 + 1);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float u = (static_cast<float>(h % 20000) + 0.5f) / 20000.0f;  // (0, 1)
    const float sign = (h >> 20) & 1 ? 1.0f : -1.0f;
    g[i] = scale * sign * std::pow(u, 8.0f);  // most values tiny, a few near 1
  }
  return g;
}

struct CallRecord {
  std::vector<float> out;
  double cf = 0, cfMin = 0, residualNorm = 0;
  int phase = 0;
};

// Runs `calls` compressed all-reduces of each rank's gradients through `codec` and records them.
void runCalls(sqzComm_t comm, sqzCodec_t codec, int rank, int first, int calls, size_t n,
              std::vector<CallRecord>& out, float (*scaleOf)(int) = nullptr) {
  for (int c = first; c < first + calls; ++c) {
    std::vector<float> g = gradient(rank, c, n, scaleOf ? scaleOf(c) : 1.0f);
    CallRecord r;
    r.out.resize(n);
    ASSERT_EQ(sqzAllReduceCompressed(g.data(), r.out.data(), n, sqzFloat32, sqzAvg, codec, comm,
                                     nullptr),
              sqzSuccess)
        << sqzGetLastError(comm);
    sqzCodecStats_t st;
    ASSERT_EQ(sqzCodecGetStats(codec, &st), sqzSuccess);
    r.cf = st.cf;
    r.cfMin = st.cfMin;
    r.phase = st.phase;
    r.residualNorm = st.residualNorm;
    out.push_back(std::move(r));
  }
}

sqzCodec_t create(sqzComm_t comm, const std::string& spec, size_t n) {
  sqzCodec_t c = nullptr;
  EXPECT_EQ(sqzCodecCreate(&c, spec.c_str(), n, sqzFloat32, comm), sqzSuccess)
      << spec << ": " << sqzGetLastError(comm);
  return c;
}

// Rank r's records against rank 0's: same CFs, phases and bitwise the same results.
void expectRanksAgree(const std::vector<std::vector<CallRecord>>& byRank, const std::string& what) {
  for (size_t r = 1; r < byRank.size(); ++r) {
    ASSERT_EQ(byRank[r].size(), byRank[0].size()) << what;
    for (size_t c = 0; c < byRank[0].size(); ++c) {
      const CallRecord &a = byRank[0][c], &b = byRank[r][c];
      EXPECT_EQ(a.cf, b.cf) << what << ": rank " << r << " call " << c;
      EXPECT_EQ(a.cfMin, b.cfMin) << what << ": rank " << r << " call " << c;
      EXPECT_EQ(a.phase, b.phase) << what << ": rank " << r << " call " << c;
      EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)), 0)
          << what << ": rank " << r << " call " << c << " result differs";
    }
  }
}

constexpr int kRanks = 4;
constexpr size_t kCount = 20000;

TEST(Gravac, EveryRankUsesTheSameCfAtEveryCall) {
  for (const char* guard : {"0", "1"}) {
    // A window of 2 and a loose omega: the run explores several pairs within 24 calls.
    const std::string spec = std::string("gravac:cf_min=4,cf_max=256,window=2,eps=0.3,") +
                             "omega=0.3,min_bytes=0,auto_dense=" + guard;
    std::vector<std::vector<CallRecord>> byRank(kRanks);
    RunResult res = runRanks(kRanks, shm(), [&](sqzComm_t& comm, int rank) {
      sqzCodec_t c = create(comm, spec, kCount);
      if (!c) return;
      runCalls(comm, c, rank, 0, 24, kCount, byRank[rank]);
      sqzCodecDestroy(c);
    });
    ASSERT_TRUE(res.initErrors.empty()) << res.initErrors[0];
    expectRanksAgree(byRank, spec);
    // The run did adapt: more than one CF was used, and cf_min went up from 4.
    std::vector<double> cfs;
    for (const auto& r : byRank[0]) {
      EXPECT_TRUE(r.phase == SQZ_CODEC_PHASE_EXPLORING || r.phase == SQZ_CODEC_PHASE_SETTLED);
      if (std::find(cfs.begin(), cfs.end(), r.cf) == cfs.end()) cfs.push_back(r.cf);
    }
    EXPECT_GE(cfs.size(), 2u) << spec;
    EXPECT_GT(byRank[0].back().cfMin, 4) << spec;
  }
}

TEST(Gravac, SaveLoadResumesBitForBit) {
  // omega=0.6: exploration goes on through all 16 calls (cf_max far), so no step time (which
  // differs between two runs) enters a decision and the two runs must match exactly.
  const std::string spec =
      "gravac:cf_min=4,cf_max=1000000,window=3,eps=0.2,omega=0.6,min_bytes=0,auto_dense=0";
  std::vector<std::vector<CallRecord>> went(kRanks), resumed(kRanks);
  std::vector<std::vector<char>> wentState(kRanks), resumedState(kRanks);
  RunResult res = runRanks(kRanks, shm(), [&](sqzComm_t& comm, int rank) {
    sqzCodec_t a = create(comm, spec, kCount);
    if (!a) return;
    std::vector<CallRecord> first;
    runCalls(comm, a, rank, 0, 4, kCount, first);  // mid-window: 4 = 1 window + 1
    size_t bytes = 0;
    ASSERT_EQ(sqzCodecSaveState(a, nullptr, &bytes), sqzSuccess);
    std::vector<char> saved(bytes);
    ASSERT_EQ(sqzCodecSaveState(a, saved.data(), &bytes), sqzSuccess);
    runCalls(comm, a, rank, 4, 12, kCount, went[rank]);
    sqzCodec_t b = create(comm, spec, kCount);
    ASSERT_EQ(sqzCodecLoadState(b, saved.data(), saved.size()), sqzSuccess)
        << sqzGetLastError(comm);
    runCalls(comm, b, rank, 4, 12, kCount, resumed[rank]);
    for (auto [codec, state] : {std::pair{a, &wentState[rank]}, std::pair{b, &resumedState[rank]}}) {
      ASSERT_EQ(sqzCodecSaveState(codec, nullptr, &bytes), sqzSuccess);
      state->resize(bytes);
      ASSERT_EQ(sqzCodecSaveState(codec, state->data(), &bytes), sqzSuccess);
    }
    sqzCodecDestroy(a);
    sqzCodecDestroy(b);
  });
  ASSERT_TRUE(res.initErrors.empty()) << res.initErrors[0];
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(went[r].size(), resumed[r].size());
    for (size_t c = 0; c < went[r].size(); ++c) {
      EXPECT_EQ(went[r][c].cf, resumed[r][c].cf) << "rank " << r << " call " << 4 + c;
      EXPECT_EQ(went[r][c].cfMin, resumed[r][c].cfMin) << "rank " << r << " call " << 4 + c;
      EXPECT_EQ(went[r][c].residualNorm, resumed[r][c].residualNorm)
          << "rank " << r << " call " << 4 + c << ": the error-feedback residual differs";
      EXPECT_EQ(std::memcmp(went[r][c].out.data(), resumed[r][c].out.data(),
                            kCount * sizeof(float)),
                0)
          << "rank " << r << " call " << 4 + c << ": the resumed codec's result differs";
    }
    // The same layout (the policy's step times differ between the runs, so not the bytes).
    EXPECT_EQ(wentState[r].size(), resumedState[r].size());
  }
  std::vector<double> cfs;
  for (const auto& rec : went[0]) cfs.push_back(rec.cf);
  std::string trace;
  for (double cf : cfs) {
    trace += ' ';  // appended piecewise: g++ 12 warns (-Wrestrict) on " " + std::to_string
    trace += std::to_string(int(cf));
  }
  EXPECT_NE(cfs.front(), cfs.back()) << "the resumed span should cross a scale-up; CFs:" << trace;
}

float accordionScale(int call) { return call < 8 ? 1.0f : 0.05f; }

TEST(Accordion, SwitchesAtTheIntervalEndsOnEveryRank) {
  const std::string spec = "accordion:cf_low=10,cf_high=100,interval=4,eta=0.5,min_bytes=0,"
                           "auto_dense=0";
  std::vector<std::vector<CallRecord>> byRank(kRanks);
  RunResult res = runRanks(kRanks, shm(), [&](sqzComm_t& comm, int rank) {
    sqzCodec_t c = create(comm, spec, kCount);
    if (!c) return;
    runCalls(comm, c, rank, 0, 20, kCount, byRank[rank], accordionScale);
    sqzCodecDestroy(c);
  });
  ASSERT_TRUE(res.initErrors.empty()) << res.initErrors[0];
  expectRanksAgree(byRank, spec);
  // Intervals of 4 calls, norms about equal within each of the first two (1) and the rest (0.05):
  // calls 0-7 low (first interval, then no change); 8-11 high (interval 2 was stable); the norm
  // falls 20x in interval 3 -> 12-15 low (critical); interval 4 stable again -> 16-19 high.
  const std::vector<double> expected = {10,  10,  10,  10,  10, 10, 10, 10, 100, 100,
                                        100, 100, 10,  10,  10, 10, 100, 100, 100, 100};
  for (size_t c = 0; c < expected.size(); ++c)
    EXPECT_EQ(byRank[0][c].cf, expected[c]) << "call " << c;
}

TEST(PayoffGuard, SendsAnArtificiallySlowCodecDense) {
  for (const char* autoDense : {"1", "0"}) {
    ScopedEnv env;
    env.set("SQZ_CODEC_DELAY_US", "100000");  // 100 ms per compressed call; dense takes < 1 ms
    const std::string spec = std::string("topk:ratio=0.01,min_bytes=0,auto_dense=") + autoDense;
    std::vector<sqzCodecStats_t> stats(2);
    std::vector<std::vector<CallRecord>> byRank(2);
    RunResult res = runRanks(2, shm(), [&](sqzComm_t& comm, int rank) {
      sqzCodec_t c = create(comm, spec, 65536);
      if (!c) return;
      runCalls(comm, c, rank, 0, 10, 65536, byRank[rank]);
      ASSERT_EQ(sqzCodecGetStats(c, &stats[rank]), sqzSuccess);
      sqzCodecDestroy(c);
    });
    ASSERT_TRUE(res.initErrors.empty()) << res.initErrors[0];
    expectRanksAgree(byRank, spec);
    if (autoDense[0] == '1') {
      // Warm-up: compressed, dense, compressed, dense; then dense: 2 + 6 of 10 calls.
      EXPECT_EQ(stats[0].guardDenseCalls, 8u);
      EXPECT_EQ(stats[0].denseCalls, 8u);
      EXPECT_GT(stats[0].codecPerByte, stats[0].linkDensePerByte);
    } else {
      EXPECT_EQ(stats[0].guardDenseCalls, 0u);
      EXPECT_EQ(stats[0].denseCalls, 0u);
    }
  }
}

}  // namespace
}  // namespace sqztest
