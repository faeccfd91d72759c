// Recovery after a lost rank, with ranks as threads (sqzCommRevoke, sqzCommShrink, sqzCommGrow):
// bad input is refused and changes nothing; a revoke ends a call in flight and reaches the other
// ranks; the survivors of a rank that is gone (it aborts its communicator, which closes its
// connections as a dead process's would) shrink, carry on exactly with their codecs, and grow
// back with a joining thread. tests/fault's `recover` case does the same with killed processes.
#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace sqztest {
namespace {

constexpr size_t kCount = 1 << 16;

// Element i of rank r's input to call c: small integers, so every sum is exact.
float inputValue(int rank, int call, size_t i) {
  return static_cast<float>((i + 31u * static_cast<unsigned>(call)) % 97 + rank);
}

// One all-reduce of every rank's input to `call`; returns "" or what went wrong.
std::string exactAllReduce(sqzComm_t comm, int call) {
  int rank = -1, size = 0;
  sqzCommUserRank(comm, &rank);
  sqzCommCount(comm, &size);
  std::vector<float> send(kCount), recv(kCount);
  for (size_t i = 0; i < kCount; ++i) send[i] = inputValue(rank, call, i);
  const sqzResult_t rc =
      sqzAllReduce(send.data(), recv.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
  if (rc != sqzSuccess)
    return std::string("call ") + std::to_string(call) + ": " + sqzGetErrorString(rc) + ": " +
           sqzGetLastError(comm);
  for (size_t i = 0; i < kCount; ++i) {
    float want = 0;
    for (int r = 0; r < size; ++r) want += inputValue(r, call, i);
    if (recv[i] != want)
      return "call " + std::to_string(call) + ": element " + std::to_string(i) + " is " +
             std::to_string(recv[i]) + ", expected " + std::to_string(want);
  }
  return "";
}

bool mentions(const char* text, const char* what) {
  return text && std::strstr(text, what) != nullptr;
}

class ShrinkTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!transportCompiledIn(GetParam()))
      GTEST_SKIP() << "transport '" << GetParam() << "' is not compiled into this build";
  }
  void run(int nranks, int timeoutMs, const std::function<void(sqzComm_t& comm, int rank)>& fn) {
    RunOptions o;
    o.transports = GetParam();
    o.timeoutMs = timeoutMs;
    o.watchdogSeconds = 120;
    RunResult r = runRanks(nranks, o, fn);
    for (const std::string& e : r.initErrors) ADD_FAILURE() << "init failed: " << e;
  }
};

TEST_P(ShrinkTest, BadInputIsRefusedAndChangesNothing) {
  run(4, 10000, [&](sqzComm_t& comm, int rank) {
    sqzComm_t out = reinterpret_cast<sqzComm_t>(&out);  // must come back NULL
    const int self[] = {rank}, all[] = {0, 1, 2, 3}, outside[] = {7}, twice[] = {3, 3};
    SQZ_EXPECT_ERROR(sqzCommShrink(comm, self, 1, &out, nullptr), sqzInvalidArgument, comm);
    EXPECT_TRUE(mentions(sqzGetLastError(comm), "excludes itself")) << sqzGetLastError(comm);
    EXPECT_EQ(out, nullptr);
    SQZ_EXPECT_ERROR(sqzCommShrink(comm, all, 4, &out, nullptr), sqzInvalidArgument, comm);
    EXPECT_TRUE(mentions(sqzGetLastError(comm), "every rank")) << sqzGetLastError(comm);
    SQZ_EXPECT_ERROR(sqzCommShrink(comm, outside, 1, &out, nullptr), sqzInvalidArgument, comm);
    if (rank != 3)
      SQZ_EXPECT_ERROR(sqzCommShrink(comm, twice, 2, &out, nullptr), sqzInvalidArgument, comm);
    SQZ_EXPECT_ERROR(sqzCommShrink(comm, nullptr, 1, &out, nullptr), sqzInvalidArgument, comm);
    SQZ_EXPECT_ERROR(sqzCommShrink(comm, self, 1, nullptr, nullptr), sqzInvalidArgument, comm);
    EXPECT_EQ(exactAllReduce(comm, 0), "");
    // Lists that differ: ranks 0 and 1 leave out rank 3, rank 2 leaves out rank 1; rank 3 takes
    // no part. Rank 0 leads (lowest kept rank in both lists), sees the difference and fails all.
    if (rank < 3) {
      const int mine[] = {rank == 2 ? 1 : 3};
      SQZ_EXPECT_ERROR(sqzCommShrink(comm, mine, 1, &out, nullptr), sqzInvalidUsage, comm);
      EXPECT_TRUE(mentions(sqzGetLastError(comm), "differ")) << sqzGetLastError(comm);
      EXPECT_TRUE(mentions(sqzGetLastError(comm), "nothing was changed")) << sqzGetLastError(comm);
      EXPECT_EQ(out, nullptr);
    }
    // A grow whose ranks pass different ids (each its own) fails on all, before anyone waits
    // for a joining process; a count below 1 is refused.
    sqzUniqueId own{};
    ASSERT_EQ(sqzGetUniqueId(&own), sqzSuccess);
    SQZ_EXPECT_ERROR(sqzCommGrow(comm, 1, &own, &out, nullptr), sqzInvalidUsage, comm);
    EXPECT_TRUE(mentions(sqzGetLastError(comm), "different unique ids")) << sqzGetLastError(comm);
    SQZ_EXPECT_ERROR(sqzCommGrow(comm, 0, &own, &out, nullptr), sqzInvalidArgument, comm);
    // Nothing changed: the four go on.
    EXPECT_EQ(exactAllReduce(comm, 1), "");
  });
}

TEST_P(ShrinkTest, RevokeEndsACallInFlightAndReachesThePeers) {
  std::atomic<bool> revoked{false};
  run(4, 20000, [&](sqzComm_t& comm, int rank) {
    if (rank == 0) {
      // A call nobody else joins; shrinking is refused while it is in flight, then a revoke
      // ends it at once.
      std::vector<float> buf(kCount, 1.0f);
      sqzResult_t callRc = sqzSuccess;
      std::string callText;
      std::chrono::steady_clock::time_point returned;
      std::thread blocked([&] {
        callRc = sqzAllReduce(buf.data(), buf.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
        returned = std::chrono::steady_clock::now();
        callText = sqzGetLastError(nullptr);
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      sqzComm_t out = nullptr;
      const int lost[] = {3};
      SQZ_EXPECT_ERROR(sqzCommShrink(comm, lost, 1, &out, nullptr), sqzInvalidUsage, comm);
      EXPECT_TRUE(mentions(sqzGetLastError(comm), "sqzCommRevoke")) << sqzGetLastError(comm);
      const auto revokedAt = std::chrono::steady_clock::now();
      EXPECT_EQ(sqzCommRevoke(comm), sqzSuccess) << sqzGetLastError(comm);
      blocked.join();
      revoked = true;
      EXPECT_EQ(callRc, sqzRemoteError);
      EXPECT_TRUE(mentions(callText.c_str(), "rank 0 revoked")) << callText;
      EXPECT_LT(std::chrono::duration<double>(returned - revokedAt).count(), 2.0);
    } else {
      while (!revoked) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      // This rank's next call finds rank 0's connections closed and reads why. It may first
      // complete on what rank 0's ended call had sent before the revoke (a revoked call need not
      // fail everywhere, as in MPI's ULFM), and then exactly: every rank's 1s, summed.
      std::vector<float> buf(kCount, 1.0f);
      sqzResult_t rc = sqzAllReduce(buf.data(), buf.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
      if (rc == sqzSuccess) {
        EXPECT_EQ(buf, std::vector<float>(kCount, 4.0f)) << "a call completed with wrong data";
        std::fill(buf.begin(), buf.end(), 1.0f);
        rc = sqzAllReduce(buf.data(), buf.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
      }
      EXPECT_NE(rc, sqzSuccess);
      EXPECT_TRUE(mentions(sqzGetLastError(comm), "revoked")) << sqzGetLastError(comm);
    }
    // Every rank alive: a shrink that keeps them all makes a working communicator again.
    sqzComm_t fresh = nullptr;
    ASSERT_EQ(sqzCommShrink(comm, nullptr, 0, &fresh, nullptr), sqzSuccess) << sqzGetLastError(comm);
    sqzCommDestroy(comm);
    comm = fresh;
    EXPECT_EQ(exactAllReduce(comm, 2), "");
  });
}

// Rank 3 is lost in the middle of a loop of calls (dense, top-k and int8 with error feedback);
// the survivors revoke, shrink, make 50 more calls of each kind with the codecs they had, then
// grow back to 4 with a joining thread and make 50 more dense calls.
TEST_P(ShrinkTest, SurvivorsShrinkCarryOnAndGrowBack) {
  constexpr int kLost = 3, kAfter = 50;
  std::mutex mu;
  // The survivors' compressed results after the shrink, by (call, codec) then rank.
  std::vector<std::vector<std::vector<float>>> results(2 * kAfter,
                                                       std::vector<std::vector<float>>(3));
  sqzUniqueId growId{};
  std::atomic<bool> haveGrowId{false};
  std::string joinerProblem;
  std::thread joiner([&] {
    while (!haveGrowId) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    sqzConfig_t cfg = SQZ_CONFIG_INITIALIZER;
    cfg.transports = effectiveTransports(GetParam());
    cfg.timeoutMs = 10000;
    sqzComm_t c = nullptr;
    std::string problem;
    if (sqzCommInitRankConfig(&c, 4, growId, 3, &cfg) != sqzSuccess)
      problem = std::string("join: ") + sqzGetLastError(nullptr);
    for (int call = 0; problem.empty() && call < kAfter; ++call)
      problem = exactAllReduce(c, 1000 + call);
    // Its codec is new; the survivors' came through the shrink and the grow.
    sqzCodec_t topk = nullptr;
    std::vector<float> send(kCount, 1.0f), recv(kCount);
    if (problem.empty() &&
        (sqzCodecCreate(&topk, "topk:ratio=0.01,auto_dense=0", kCount, sqzFloat, c) != sqzSuccess ||
         sqzAllReduceCompressed(send.data(), recv.data(), kCount, sqzFloat, sqzSum, topk, c,
                                nullptr) != sqzSuccess))
      problem = std::string("compressed call: ") + sqzGetLastError(c);
    sqzCodecDestroy(topk);
    sqzCommDestroy(c);
    std::lock_guard<std::mutex> lock(mu);
    joinerProblem = problem;
  });
  run(4, 5000, [&](sqzComm_t& comm, int rank) {
    sqzCodec_t topk = nullptr, int8 = nullptr;
    ASSERT_EQ(sqzCodecCreate(&topk, "topk:ratio=0.01,auto_dense=0", kCount, sqzFloat, comm),
              sqzSuccess) << sqzGetLastError(comm);
    ASSERT_EQ(sqzCodecCreate(&int8, "int8:auto_dense=0", kCount, sqzFloat, comm), sqzSuccess)
        << sqzGetLastError(comm);
    std::vector<float> send(kCount), recv(kCount);
    auto compressed = [&](sqzComm_t c, sqzCodec_t codec, int call) {
      for (size_t i = 0; i < kCount; ++i) send[i] = 0.001f * inputValue(rank, call, i);
      return sqzAllReduceCompressed(send.data(), recv.data(), kCount, sqzFloat, sqzSum, codec, c,
                                    nullptr);
    };
    bool failed = false;
    for (int call = 0; call < 200 && !failed; ++call) {
      if (rank == kLost && call == 5) {  // gone: its connections close as a dead process's do
        sqzCodecDestroy(topk);
        sqzCodecDestroy(int8);
        sqzCommAbort(comm);
        comm = nullptr;
        return;
      }
      failed = !exactAllReduce(comm, call).empty() || compressed(comm, topk, call) != sqzSuccess ||
               compressed(comm, int8, call) != sqzSuccess;
    }
    ASSERT_TRUE(failed) << "rank " << rank << " never saw rank 3 go";
    EXPECT_EQ(sqzCommRevoke(comm), sqzSuccess);
    const int lost[] = {kLost};
    sqzComm_t small = nullptr;
    ASSERT_EQ(sqzCommShrink(comm, lost, 1, &small, nullptr), sqzSuccess) << sqzGetLastError(comm);
    sqzCommDestroy(comm);
    comm = small;
    int newRank = -1, size = 0;
    sqzCommUserRank(comm, &newRank);
    sqzCommCount(comm, &size);
    EXPECT_EQ(newRank, rank);
    EXPECT_EQ(size, 3);
    for (int call = 0; call < kAfter; ++call) {
      EXPECT_EQ(exactAllReduce(comm, 500 + call), "") << "after the shrink";
      for (int k = 0; k < 2; ++k) {
        ASSERT_EQ(compressed(comm, k ? int8 : topk, 500 + call), sqzSuccess)
            << sqzGetLastError(comm);
        std::lock_guard<std::mutex> lock(mu);
        results[2 * call + k][rank] = recv;
      }
    }
    // Grow back: rank 0 makes the id and hands it to the others over the communicator.
    if (rank == 0) {
      ASSERT_EQ(sqzGetUniqueId(&growId), sqzSuccess);
    }
    ASSERT_EQ(sqzBroadcast(&growId, &growId, sizeof growId, sqzUint8, 0, comm, nullptr),
              sqzSuccess);
    if (rank == 0) haveGrowId = true;
    sqzComm_t big = nullptr;
    ASSERT_EQ(sqzCommGrow(comm, 1, &growId, &big, nullptr), sqzSuccess) << sqzGetLastError(comm);
    sqzCommDestroy(comm);
    comm = big;
    sqzCommUserRank(comm, &newRank);
    EXPECT_EQ(newRank, rank);
    for (int call = 0; call < kAfter; ++call)
      EXPECT_EQ(exactAllReduce(comm, 1000 + call), "") << "after the grow";
    // The codecs moved with the communicator twice.
    EXPECT_EQ(compressed(comm, topk, 2000), sqzSuccess) << sqzGetLastError(comm);
    sqzCodecDestroy(topk);
    sqzCodecDestroy(int8);
  });
  haveGrowId = true;  // a failed survivor never set it: the joiner's init then fails and ends
  joiner.join();
  EXPECT_EQ(joinerProblem, "");
  for (size_t c = 0; c < results.size(); ++c)
    for (int r = 1; r < 3; ++r)
      ASSERT_TRUE(results[c][r] == results[c][0])
          << (c % 2 ? "int8" : "top-k") << " call " << c / 2 << " after the shrink: rank " << r
          << "'s result differs from rank 0's";
}

INSTANTIATE_TEST_SUITE_P(Transports, ShrinkTest, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace sqztest
