// Checks every transport must pass, shared by the transports' own tests (ucx_test.cc,
// ib_test.cc): each takes the RunOptions naming the transport (and its timeout) and reports
// through gtest's EXPECT/ADD_FAILURE, so a test is one line after its skip.
#pragma once

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

namespace sqztest {

inline double processCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Rank 2 is aborted from another thread 0.3 s into an all-reduce that ranks 0 and 2 are in
// (rank 1 joins only after the abort, so the call cannot have finished): ranks 0 and 1 must get
// an error naming a rank within 5 s, well before opts.timeoutMs.
inline void checkPeerAbortedMidCallFailsTheOthers(const RunOptions& opts) {
  constexpr size_t kCount = 4 << 20;  // 16 MiB of floats: rendezvous-sized pieces
  std::atomic<bool> inCall{false};    // rank 2 is about to enter the call
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
  RunResult run = runRanks(3, opts, [&](sqzComm_t& comm, int rank) {
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
                                  << " s after rank 2 was aborted (timeout " << opts.timeoutMs / 1000 << " s)";
  }
  EXPECT_NE(rcs[2], sqzSuccess) << "rank 2's call finished although it was aborted";
}

// Rank 1 joins 1.5 s late. Rank 0 waits inside the call; a spinning wait would burn about as
// much CPU as it waits.
inline void checkWaitingForALatePeerSleeps(const RunOptions& opts) {
  constexpr size_t kCount = 1 << 20;
  constexpr double kLateSeconds = 1.5;
  double wall0 = 0, cpu = 0;
  std::vector<std::string> failures;
  std::mutex mu;  // protects failures
  RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
    std::vector<float> a(kCount), b(kCount, -1.0f);
    for (size_t i = 0; i < kCount; ++i) a[i] = static_cast<float>((i + rank) % 7);
    // Warm the endpoints, so the measured wait is only the late peer.
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
  std::printf(
      "[  TIMING  ] rank 0 waited %.2f s for its late peer; the process used %.3f s of CPU\n",
      wall0, cpu);
  EXPECT_GT(wall0, kLateSeconds - 0.3) << "rank 0 returned before its peer joined";
  // Both ranks' threads and UCX's own threads count; the reduction itself takes milliseconds.
  EXPECT_LT(cpu, 0.5 * wall0) << "rank 0 waited " << wall0 << " s and the process used " << cpu
                              << " s of CPU: the wait spins";
}

// Rank 0 sends rank 1 messages of many sizes in one group; rank 1 receives them in order. A
// payload under the wrong tag or ring offset, or a header matched to the wrong message, shows as
// wrong data or a size error.
inline void checkMessagesOfManySizesMatchInOrder(const RunOptions& opts) {
  const std::vector<size_t> counts = {0, 1, 3, 1000, 0, 65536, 7, (1 << 20) + 3, 2, 4 << 20};
  std::vector<std::string> failures;
  std::mutex mu;  // protects failures
  RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
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

}  // namespace sqztest
