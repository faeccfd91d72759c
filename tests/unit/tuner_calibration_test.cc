// Tests of init-time tuner calibration (src/core/calibrate.h) over real communicators: ranks as
// threads over loopback (tests/collective/test_util.h's runRanks), a few ranks, a few calls each.
// Every rank must end with the same cost model bit for bit (or they would pick different
// algorithms and hang); SQZ_TUNER_CALIBRATE=0 and SQZ_ALGO keep the configured constants; a
// tuner file's rows replace the built-in ones; rows that differ between ranks fail on every
// rank; and the measurement is bounded (a generous hang guard, not a speed claim).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "api/api_guard.h"
#include "core/calibrate.h"
#include "tests/collective/test_util.h"

namespace squeeze {
namespace {

using sqztest::RunOptions;
using sqztest::RunResult;
using sqztest::ScopedEnv;

constexpr double kHangGuardSeconds = 10;  // init of a few ranks with calibration, many times over

// The model's numbers, flattened for a bitwise comparison across ranks.
std::vector<double> flatten(const CostModel& m) {
  std::vector<double> v = {m.alpha, m.beta, m.gamma, m.cacheBytes, double(m.cores)};
  for (const AlgoEfficiency& e : m.allReduce)
    v.insert(v.end(), {e.lat, e.latShared, e.bw, e.bwCold});
  return v;
}

bool sameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

bool sameCalibration(const Calibration& a, const Calibration& b) {
  if (a.probe != b.probe || a.links.size() != b.links.size() ||
      std::memcmp(&a.terms, &b.terms, sizeof a.terms) != 0)
    return false;
  for (size_t i = 0; i < a.links.size(); ++i)
    if (std::memcmp(&a.links[i], &b.links[i], sizeof a.links[i]) != 0) return false;
  return true;
}

struct PerRank {
  std::vector<double> model;       // the tuner's model after init
  std::vector<double> configured;  // the config's model for the communicator's transport
  std::string lastAlgorithm;       // right after init
};

// Creates `nranks` ranks over `transport` and records each rank's model; fails the test on any
// init error.
std::vector<PerRank> modelsAfterInit(const char* transport, int nranks, RunResult* run = nullptr) {
  std::vector<PerRank> out(nranks);
  RunOptions opts;
  opts.transports = transport;
  opts.timeoutMs = 20000;
  RunResult r = sqztest::runRanks(nranks, opts, [&](sqzComm_t& comm, int rank) {
    const Communicator& c = *comm->impl;
    const char* name = nullptr;
    sqzCommGetLastAlgorithm(comm, &name);
    out[rank].lastAlgorithm = name ? name : "(null)";
    out[rank].model = flatten(c.tuner().model());
    out[rank].configured = flatten(std::string(transport) == "shm" ? c.config().shmModel
                                                                   : c.config().tcpModel);
    float x = float(rank), y = 0;  // the communicator still works, and agrees
    sqzAllReduce(&x, &y, 1, sqzFloat32, sqzSum, comm, nullptr);
    EXPECT_EQ(y, float(nranks * (nranks - 1) / 2)) << "rank " << rank;
  });
  for (const std::string& e : r.initErrors) ADD_FAILURE() << transport << ": " << e;
  if (run) *run = r;
  return out;
}

class TunerCalibration : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!sqztest::transportCompiledIn(GetParam()))
      GTEST_SKIP() << GetParam() << " is not compiled into this build";
    env_.unset("SQZ_ALGO");
    env_.unset("SQZ_TUNER_FILE");
    env_.set("SQZ_TUNER_CALIBRATE", "1");
  }
  ScopedEnv env_;
};

TEST_P(TunerCalibration, EveryRankEndsWithTheSameMeasuredModel) {
  for (int nranks : {2, 3}) {
    RunResult run;
    std::vector<PerRank> ranks = modelsAfterInit(GetParam(), nranks, &run);
    EXPECT_LT(run.initSeconds, kHangGuardSeconds);
    for (int r = 0; r < nranks; ++r) {
      EXPECT_TRUE(sameBits(ranks[r].model, ranks[0].model)) << "rank " << r << " of " << nranks;
      EXPECT_EQ(ranks[r].lastAlgorithm, "") << "calibration's calls must leave no trace";
    }
    // Calibration ran: the measured alpha is never exactly the configured constant.
    EXPECT_NE(ranks[0].model[0], ranks[0].configured[0]);
    // ... and only alpha, beta and gamma moved: the rows and the cores are the configured ones.
    EXPECT_TRUE(std::equal(ranks[0].model.begin() + 3, ranks[0].model.end(),
                           ranks[0].configured.begin() + 3));
  }
}

TEST_P(TunerCalibration, CalibrateZeroKeepsTheConfiguredConstants) {
  env_.set("SQZ_TUNER_CALIBRATE", "0");
  for (const PerRank& r : modelsAfterInit(GetParam(), 3))
    EXPECT_TRUE(sameBits(r.model, r.configured));
}

TEST_P(TunerCalibration, AnAlgoRuleSkipsIt) {
  env_.set("SQZ_ALGO", "allreduce:0-64K=naive");
  for (const PerRank& r : modelsAfterInit(GetParam(), 3))
    EXPECT_TRUE(sameBits(r.model, r.configured));
}

TEST_P(TunerCalibration, ATunerFileReplacesTheBuiltInRows) {
  const std::string t = GetParam();
  char path[] = "/tmp/sqz-tuner-calibration-test-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string text = "sqz-tuner 1\nreference " + t + " 10 5 50\n";
  for (const char* a : {"naive", "ps", "ring", "rhd", "tree"})
    text += "row " + t + " " + a + " 7 0.5 0.25 0.125\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), ssize_t(text.size()));
  close(fd);
  env_.set("SQZ_TUNER_FILE", path);
  for (const char* calibrate : {"0", "1"}) {
    env_.set("SQZ_TUNER_CALIBRATE", calibrate);
    std::vector<PerRank> ranks = modelsAfterInit(t.c_str(), 3);
    for (const PerRank& r : ranks) {
      EXPECT_TRUE(sameBits(r.model, ranks[0].model));
      for (int a = 0; a < kAllReduceAlgos; ++a) {
        EXPECT_EQ(r.model[5 + 4 * a], 7);
        EXPECT_EQ(r.model[5 + 4 * a + 3], 0.125);
      }
    }
    EXPECT_EQ(ranks[0].model[0] == ranks[0].configured[0], calibrate == std::string("0"));
  }
  unlink(path);
}

// measureCostTerms directly: the same numbers on every rank, bounded, and ranks whose rows differ
// all fail saying so.
TEST_P(TunerCalibration, MeasurementAgreesAndRowsMustMatch) {
  env_.set("SQZ_TUNER_CALIBRATE", "0");  // the test calls it itself
  const int nranks = 4;
  std::vector<Calibration> got(nranks);
  std::vector<std::string> errors(nranks);
  RunOptions opts;
  opts.transports = GetParam();
  opts.timeoutMs = 20000;
  RunResult run = sqztest::runRanks(nranks, opts, [&](sqzComm_t& comm, int rank) {
    got[rank] = measureCostTerms(*comm->impl, Probe::kPair, 1, 42);
    try {
      measureCostTerms(*comm->impl, Probe::kNone, 0, rank == 2 ? 43 : 42);
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (const std::string& e : run.initErrors) ADD_FAILURE() << e;
  for (int r = 0; r < nranks; ++r) {
    EXPECT_TRUE(sameCalibration(got[r], got[0])) << "rank " << r;
    EXPECT_NE(errors[r].find("rows differ between rank 0 and rank 2"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
  const MeasuredTerms& t = got[0].terms;
  EXPECT_GT(t.alpha, 0);
  EXPECT_GT(t.beta, 0);
  EXPECT_GT(t.gamma, 0);
  EXPECT_GT(t.seconds, 0);
  EXPECT_LT(t.seconds, kHangGuardSeconds);
  ASSERT_EQ(got[0].links.size(), 1u);  // the pair: rank 0 and its partner
  EXPECT_EQ(got[0].links[0].a, 0);
  EXPECT_EQ(got[0].links[0].b, 1);
  EXPECT_EQ(got[0].links[0].alpha, t.alpha);
}

// Probe::kRingLinks (ranks on several hosts; here over loopback, since one process cannot span
// hosts): every ring link measured once, in phases that keep each rank in one pair at a time
// (two for an even rank count, three for an odd one, one link for two ranks), the same result on
// every rank, and the slowest link's alpha and beta as the terms.
TEST_P(TunerCalibration, RingLinksMeasureEveryNeighbourPair) {
  env_.set("SQZ_TUNER_CALIBRATE", "0");  // the test calls it itself
  for (int nranks : {2, 3, 4}) {
    std::vector<Calibration> got(nranks);
    RunOptions opts;
    opts.transports = GetParam();
    opts.timeoutMs = 20000;
    RunResult run = sqztest::runRanks(nranks, opts, [&](sqzComm_t& comm, int rank) {
      got[rank] = measureCostTerms(*comm->impl, Probe::kRingLinks, 0, 42);
    });
    for (const std::string& e : run.initErrors) ADD_FAILURE() << e;
    for (int r = 0; r < nranks; ++r)
      EXPECT_TRUE(sameCalibration(got[r], got[0])) << "rank " << r << " of " << nranks;
    const Calibration& c = got[0];
    ASSERT_EQ(c.links.size(), size_t(nranks == 2 ? 1 : nranks)) << nranks << " ranks";
    double slowestAlpha = 0, slowestBeta = 0;
    for (size_t i = 0; i < c.links.size(); ++i) {
      EXPECT_EQ(c.links[i].a, int(i));
      EXPECT_EQ(c.links[i].b, int(i + 1) % nranks);
      EXPECT_GT(c.links[i].alpha, 0);
      EXPECT_GT(c.links[i].beta, 0);
      slowestAlpha = std::max(slowestAlpha, c.links[i].alpha);
      slowestBeta = std::max(slowestBeta, c.links[i].beta);
    }
    EXPECT_EQ(c.terms.alpha, slowestAlpha);
    EXPECT_EQ(c.terms.beta, slowestBeta);
    EXPECT_GT(c.terms.gamma, 0);
    EXPECT_LT(c.terms.seconds, kHangGuardSeconds);
    EXPECT_NE(describeLinks(c).find("0<->1 "), std::string::npos) << describeLinks(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, TunerCalibration, ::testing::Values("shm", "tcp"));

const auto* const kLoopback =
    ::testing::AddGlobalTestEnvironment(new sqztest::LoopbackEnvironment);

}  // namespace
}  // namespace squeeze

