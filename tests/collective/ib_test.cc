// The ib transport with ranks as threads (SQZ_TRANSPORT-style lists naming "ib"). Everywhere:
//   - without a usable RDMA port, "ib" alone is an init error on every rank that says why
//     (libibverbs missing, no device, no active port) and what to do, and "shm,ib,tcp" steps
//     over ib and works;
// and on a host with an RDMA device (else each skips, giving the reason):
//   - all-reduce on 4 ranks over ib, counts from 0 to past the ring size, matches the exact sum;
//   - point-to-point messages of many sizes, zero-length included, match in order;
//   - a peer aborted in the middle of a call makes the others fail within seconds, naming a
//     rank, instead of waiting for the timeout;
//   - a rank waiting for a late peer sleeps on the completion channel (its CPU time stays far
//     below the wait) and still completes.
// The whole collective suite can run over ib as well: SQZ_TEST_TRANSPORTS=ib (test_util.h).
#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "squeeze_config.h"
#include "test_util.h"

#if SQZ_HAVE_IBVERBS
namespace squeeze {
// transports/ib/ib_transport.h: why ib cannot run here ("" when it can).
std::string ibUnavailableReason(const std::string& hca, int gidIndex);
}  // namespace squeeze
#endif

namespace sqztest {
namespace {

// "" when the ib transport is compiled in and has a usable port here; else why not.
std::string whyNoIb() {
  if (!transportCompiledIn("ib"))
    return "the ib transport is not compiled into this build (infiniband/verbs.h missing: "
           "libibverbs-dev, or -Dibverbs=disabled)";
#if SQZ_HAVE_IBVERBS
  const char* hca = std::getenv("SQZ_IB_HCA");
  const char* gid = std::getenv("SQZ_IB_GID_INDEX");
  return squeeze::ibUnavailableReason(hca ? hca : "", gid ? std::atoi(gid) : 0);
#else
  return "built without ibverbs";
#endif
}

#define SQZ_SKIP_WITHOUT_IB_DEVICE()                               \
  do {                                                             \
    const std::string why_ = whyNoIb();                            \
    if (!why_.empty()) GTEST_SKIP() << "no RDMA device: " << why_; \
  } while (0)

double processCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

RunOptions ibOptions(int timeoutMs, const char* transports = "ib") {
  RunOptions o;
  o.transports = transports;
  o.timeoutMs = timeoutMs;
  o.watchdogSeconds = 120;
  return o;
}

TEST(IbTransport, UnavailableAloneIsAClearInitErrorAndOthersStepIn) {
  if (!transportCompiledIn("ib"))
    GTEST_SKIP() << "the ib transport is not compiled into this build";
  const std::string why = whyNoIb();
  if (why.empty()) GTEST_SKIP() << "this host has a usable RDMA port: nothing to refuse";
  RunResult run = runRanks(4, ibOptions(10000), [](sqzComm_t&, int) {});
  ASSERT_EQ(run.initErrors.size(), 4u) << "init over ib without a usable port succeeded";
  for (const std::string& e : run.initErrors) {
    EXPECT_NE(e.find("SQZ_TRANSPORT=ib"), std::string::npos) << e;
    EXPECT_NE(e.find(why), std::string::npos) << e;
  }
  EXPECT_LT(run.totalSeconds, 5.0) << "the refusal should be immediate";

  std::vector<std::string> failures;
  std::mutex mu;  // protects failures
  run = runRanks(4, ibOptions(10000, "shm,ib,tcp"), [&](sqzComm_t& comm, int rank) {
    int32_t a[3] = {rank, 1, -rank}, b[3] = {};
    const sqzResult_t rc = sqzAllReduce(a, b, 3, sqzInt32, sqzSum, comm, nullptr);
    std::lock_guard<std::mutex> lock(mu);
    if (rc != sqzSuccess)
      failures.push_back("rank " + std::to_string(rank) + ": " + sqzGetLastError(comm));
    else if (b[0] != 6 || b[1] != 4 || b[2] != -6)
      failures.push_back("rank " + std::to_string(rank) + ": wrong sums");
  });
  for (const std::string& e : run.initErrors) ADD_FAILURE() << "shm,ib,tcp: init failed: " << e;
  for (const auto& f : failures) ADD_FAILURE() << "shm,ib,tcp: " << f;
}

TEST(IbTransport, AllReduceOnFourRanks) {
  SQZ_SKIP_WITHOUT_IB_DEVICE();
  // The ring is 4 MiB per peer: the largest count streams through it in pieces.
  const std::vector<size_t> counts = {0, 1, 7, 1000, 65537, (3 << 20) + 5};
  std::vector<std::string> failures;
  std::mutex mu;  // protects failures
  RunResult run = runRanks(4, ibOptions(60000), [&](sqzComm_t& comm, int rank) {
    for (size_t count : counts) {
      std::vector<int32_t> a(count), b(count, -1);
      for (size_t i = 0; i < count; ++i) a[i] = static_cast<int32_t>((i * 7 + rank * 13) % 1001);
      setStatus("sqzAllReduce of " + std::to_string(count));
      const sqzResult_t rc =
          sqzAllReduce(a.data(), b.data(), count, sqzInt32, sqzSum, comm, nullptr);
      std::lock_guard<std::mutex> lock(mu);
      if (rc != sqzSuccess) {
        failures.push_back("rank " + std::to_string(rank) + ", count " + std::to_string(count) +
                           ": " + sqzGetLastError(comm));
        return;
      }
      for (size_t i = 0; i < count; ++i) {
        int32_t want = 0;
        for (int r = 0; r < 4; ++r) want += static_cast<int32_t>((i * 7 + r * 13) % 1001);
        if (b[i] != want) {
          failures.push_back("rank " + std::to_string(rank) + ", count " + std::to_string(count) +
                             ": element " + std::to_string(i) + " is " + std::to_string(b[i]) +
                             ", want " + std::to_string(want));
          return;
        }
      }
    }
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors.front();
  for (const auto& f : failures) ADD_FAILURE() << f;
}

TEST(IbTransport, MessagesOfManySizesMatchInOrder) {
  SQZ_SKIP_WITHOUT_IB_DEVICE();
  const std::vector<size_t> counts = {0, 1, 3, 1000, 0, 65536, 7, (1 << 20) + 3, 2, 4 << 20};
  std::vector<std::string> failures;
  std::mutex mu;  // protects failures
  RunResult run = runRanks(2, ibOptions(30000), [&](sqzComm_t& comm, int rank) {
    std::vector<std::vector<int32_t>> bufs;
    for (size_t m = 0; m < counts.size(); ++m) {
      bufs.emplace_back(counts[m]);
      for (size_t i = 0; i < counts[m]; ++i)
        bufs[m][i] = rank == 0 ? static_cast<int32_t>(m * 1000003 + i) : -1;
    }
    sqzResult_t rc = sqzGroupStart();
    for (size_t m = 0; m < counts.size() && rc == sqzSuccess; ++m)
      rc = rank == 0 ? sqzSend(bufs[m].data(), counts[m], sqzInt32, 1, comm, nullptr)
                     : sqzRecv(bufs[m].data(), counts[m], sqzInt32, 0, comm, nullptr);
    const sqzResult_t end = sqzGroupEnd();
    if (rc == sqzSuccess) rc = end;
    std::lock_guard<std::mutex> lock(mu);
    if (rc != sqzSuccess) {
      failures.push_back("rank " + std::to_string(rank) + ": " + sqzGetErrorString(rc) + ": " +
                         sqzGetLastError(comm));
      return;
    }
    if (rank == 0) return;
    for (size_t m = 0; m < counts.size(); ++m)
      for (size_t i = 0; i < counts[m]; ++i)
        if (bufs[m][i] != static_cast<int32_t>(m * 1000003 + i)) {
          failures.push_back("message " + std::to_string(m) + " (" + std::to_string(counts[m]) +
                             " ints): element " + std::to_string(i) + " is " +
                             std::to_string(bufs[m][i]));
          break;
        }
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors.front();
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// Rank 2 is aborted from another thread 0.3 s into an all-reduce that ranks 0 and 2 are in
// (rank 1 joins only after the abort, so the call cannot have finished): ranks 0 and 1 must get
// an error well before the 20 s timeout.
TEST(IbTransport, PeerAbortedMidCallFailsTheOthers) {
  SQZ_SKIP_WITHOUT_IB_DEVICE();
  constexpr size_t kCount = 4 << 20;
  std::atomic<bool> inCall{false};
  std::atomic<bool> aborted{false};
  std::atomic<int64_t> abortedAtNs{0};
  std::mutex mu;  // protects rcs, msgs, afterAbort
  sqzResult_t rcs[3] = {sqzSuccess, sqzSuccess, sqzSuccess};
  std::string msgs[3];
  double afterAbort[3] = {0, 0, 0};
  auto nowNs = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  RunResult run = runRanks(3, ibOptions(20000), [&](sqzComm_t& comm, int rank) {
    std::vector<float> a(kCount, 1.0f), b(kCount);
    std::thread aborter;
    if (rank == 2) {
      sqzComm_t mine = comm;
      aborter = std::thread([&, mine] {
        while (!inCall) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        abortedAtNs = nowNs();
        sqzCommAbort(mine);
        aborted = true;
      });
    }
    if (rank == 1) {
      setStatus("waiting for rank 2's abort");
      while (!aborted) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    setStatus("sqzAllReduce while rank 2 is aborted");
    if (rank == 2) inCall = true;
    const sqzResult_t rc =
        sqzAllReduce(a.data(), b.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
    const double after = (nowNs() - abortedAtNs.load()) * 1e-9;
    {
      std::lock_guard<std::mutex> lock(mu);
      rcs[rank] = rc;
      msgs[rank] = rank == 2 ? "" : sqzGetLastError(comm);
      afterAbort[rank] = after;
    }
    if (rank == 2) {
      aborter.join();
      comm = nullptr;  // sqzCommAbort freed it
    }
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors.front();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(rcs[r] == sqzRemoteError || rcs[r] == sqzSystemError)
        << "rank " << r << " returned " << sqzGetErrorString(rcs[r]) << ": " << msgs[r];
    EXPECT_NE(msgs[r].find("rank"), std::string::npos)
        << "rank " << r << ": '" << msgs[r] << "' names no rank";
    EXPECT_LT(afterAbort[r], 5.0) << "rank " << r << " returned " << afterAbort[r]
                                  << " s after rank 2 was aborted (timeout 20 s)";
  }
  EXPECT_NE(rcs[2], sqzSuccess) << "rank 2's call finished although it was aborted";
}

// Rank 1 joins 1.5 s late. Rank 0 waits inside the call; a spinning wait would burn about as
// much CPU as it waits.
TEST(IbTransport, WaitingForALatePeerSleeps) {
  SQZ_SKIP_WITHOUT_IB_DEVICE();
  constexpr size_t kCount = 1 << 20;
  constexpr double kLateSeconds = 1.5;
  double wall0 = 0, cpu = 0;
  std::vector<std::string> failures;
  std::mutex mu;  // protects failures, wall0, cpu
  RunResult run = runRanks(2, ibOptions(30000), [&](sqzComm_t& comm, int rank) {
    std::vector<float> a(kCount), b(kCount, -1.0f);
    for (size_t i = 0; i < kCount; ++i) a[i] = static_cast<float>((i + rank) % 7);
    if (sqzAllReduce(a.data(), b.data(), 16, sqzFloat, sqzSum, comm, nullptr) != sqzSuccess) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back("warm-up: " + std::string(sqzGetLastError(comm)));
      return;
    }
    if (rank == 1) {
      setStatus("sleeping before the call");
      std::this_thread::sleep_for(std::chrono::duration<double>(kLateSeconds));
    }
    setStatus("sqzAllReduce");
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = processCpuSeconds();
    const sqzResult_t rc =
        sqzAllReduce(a.data(), b.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
    std::lock_guard<std::mutex> lock(mu);
    if (rank == 0) {
      wall0 = secondsSince(t0);
      cpu = processCpuSeconds() - c0;
    }
    if (rc != sqzSuccess) {
      failures.push_back("rank " + std::to_string(rank) + ": " + sqzGetLastError(comm));
      return;
    }
    for (size_t i = 0; i < kCount; ++i) {
      const float want = static_cast<float>(i % 7 + (i + 1) % 7);
      if (b[i] != want) {
        failures.push_back("rank " + std::to_string(rank) + ": element " + std::to_string(i) +
                           " is " + std::to_string(b[i]) + ", want " + std::to_string(want));
        break;
      }
    }
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors.front();
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(wall0, kLateSeconds - 0.3) << "rank 0 returned before its peer joined";
  EXPECT_LT(cpu, 0.5 * wall0) << "rank 0 waited " << wall0 << " s and the process used " << cpu
                              << " s of CPU: the wait spins";
}

const auto* const kLoopback = ::testing::AddGlobalTestEnvironment(new LoopbackEnvironment);

}  // namespace
}  // namespace sqztest
