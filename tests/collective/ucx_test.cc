// The ucx transport's own cases, with ranks as threads and SQZ_TRANSPORT-style list "ucx".
// meson runs this binary once per UCX lane set (UCX_TLS=tcp and UCX_TLS=sm, UCX_NET_DEVICES=lo);
// every test skips when the build has no ucx. The collective suites run over ucx as well
// (SQZ_TEST_TRANSPORTS=ucx, see tests/collective/meson.build); these add what they do not cover:
//   - a peer aborted in the middle of a call makes the others' calls fail with an error within
//     a few seconds, instead of waiting for the timeout;
//   - a rank waiting for a late peer sleeps on the worker's event fd (the process's CPU time
//     stays far below the wait) and still completes;
//   - point-to-point messages of many sizes to one peer, zero-length included, match in order
//     (each message is a header and a payload under their own tags);
//   - UCX that cannot start (UCX_TLS naming nothing usable) is a clear init error naming the UCX
//     call for "ucx" alone, and a fallback to tcp for "ucx,tcp".
#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "transport_checks.h"

namespace sqztest {
namespace {

#define SQZ_SKIP_WITHOUT_UCX()                                                         \
  do {                                                                                 \
    if (!transportCompiledIn("ucx"))                                                   \
      GTEST_SKIP() << "the ucx transport is not compiled into this build (libucx-dev " \
                      "missing or -Ducx=disabled)";                                    \
  } while (0)

RunOptions ucxOptions(int timeoutMs) {
  RunOptions o;
  o.transports = "ucx";
  o.timeoutMs = timeoutMs;
  o.watchdogSeconds = 120;
  return o;
}

// The checks every transport passes (transport_checks.h).
TEST(UcxTransport, PeerAbortedMidCallFailsTheOthers) {
  SQZ_SKIP_WITHOUT_UCX();
  checkPeerAbortedMidCallFailsTheOthers(ucxOptions(20000));
}

TEST(UcxTransport, WaitingForALatePeerSleeps) {
  SQZ_SKIP_WITHOUT_UCX();
  checkWaitingForALatePeerSleeps(ucxOptions(30000));
}

TEST(UcxTransport, MessagesOfManySizesMatchInOrder) {
  SQZ_SKIP_WITHOUT_UCX();
  checkMessagesOfManySizesMatchInOrder(ucxOptions(30000));
}

// UCX_TLS naming no transport: ucp_init fails. "ucx" alone is an init error that says so;
// "ucx,tcp" falls back to tcp and works.
TEST(UcxTransport, UcxThatCannotStartIsAClearErrorOrAFallback) {
  SQZ_SKIP_WITHOUT_UCX();
  ScopedEnv env;  // read when each communicator creates its ucp context
  env.set("UCX_TLS", "no-such-transport");
  RunOptions opts = ucxOptions(5000);
  RunResult run = runRanks(2, opts, [](sqzComm_t&, int) {});
  ASSERT_EQ(run.initErrors.size(), 2u) << "init over an unusable UCX succeeded";
  for (const std::string& e : run.initErrors) {
    EXPECT_NE(e.find("UCX could not start"), std::string::npos) << e;
    EXPECT_NE(e.find("ucp_init failed"), std::string::npos) << e;
  }

  opts.transports = "ucx,tcp";
  std::vector<std::string> failures;
  std::mutex mu;  // protects failures
  run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {};
    const sqzResult_t rc = sqzAllReduce(a, b, 5, sqzFloat, sqzSum, comm, nullptr);
    std::lock_guard<std::mutex> lock(mu);
    if (rc != sqzSuccess)
      failures.push_back("rank " + std::to_string(rank) + ": " + sqzGetLastError(comm));
    else if (b[4] != 10)
      failures.push_back("rank " + std::to_string(rank) + ": wrong sum " + std::to_string(b[4]));
  });
  for (const std::string& e : run.initErrors) ADD_FAILURE() << "ucx,tcp: init failed: " << e;
  for (const auto& f : failures) ADD_FAILURE() << "ucx,tcp: " << f;
}

const auto* const kLoopback = ::testing::AddGlobalTestEnvironment(new LoopbackEnvironment);

}  // namespace
}  // namespace sqztest
