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
#include "transport_checks.h"

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

// The checks every transport passes (transport_checks.h).
TEST(IbTransport, MessagesOfManySizesMatchInOrder) {
  SQZ_SKIP_WITHOUT_IB_DEVICE();
  checkMessagesOfManySizesMatchInOrder(ibOptions(30000));
}

TEST(IbTransport, PeerAbortedMidCallFailsTheOthers) {
  SQZ_SKIP_WITHOUT_IB_DEVICE();
  checkPeerAbortedMidCallFailsTheOthers(ibOptions(20000));
}

TEST(IbTransport, WaitingForALatePeerSleeps) {
  SQZ_SKIP_WITHOUT_IB_DEVICE();
  checkWaitingForALatePeerSleeps(ibOptions(30000));
}

const auto* const kLoopback = ::testing::AddGlobalTestEnvironment(new LoopbackEnvironment);

}  // namespace
}  // namespace sqztest
