// The shm transport between two ranks in one process: pair setup over a socketpair PeerLink,
// messages of every size both ways (including ones far larger than the ring), header checks,
// shutdown, and that nothing is left in /dev/shm. The data tests run three times: every message
// through the ring (SQZ_SHM_SINGLE_COPY_BYTES=0, the default), with single copy from 4 KiB, and
// from 1 MiB. The single-copy tests below them check the threshold, the negotiated
// fallback when the probe fails, buffers another process cannot read, ordering of mixed sizes,
// and that a dead or closed peer ends a pending single-copy send or read with an error.
#include "transports/shm/shm_transport.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/strings.h"
#include "core/config.h"
#include "tests/common/transport_pair.h"
#include "transports/shm/doorbell.h"

namespace squeeze {
namespace {

constexpr int kTimeoutMs = 30000;

using transport_test::expectError;
using transport_test::makeHeader;
using transport_test::randomBytes;
using transport_test::shmFiles;
using transport_test::SocketPairLink;
using transport_test::uniqueHash;

// Drives one connection until done() or the deadline: progress, and sleep on the doorbell when
// nothing moved. Returns false on timeout.
bool driveUntil(Connection& c, const std::function<bool()>& done, int timeoutMs = kTimeoutMs) {
  WaitSources ws;
  c.addWaitSources(ws);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    const uint32_t snap = ws.doorbell->snapshot();
    if (!c.progress()) waitForActivity(ws, snap, 20);
  }
  return true;
}

// Sets the process-wide shm test hooks for one test, and clears them after.
class TestHooks {
 public:
  TestHooks(int failProbeOfRank, bool failCrossReadable) {
    setShmTestHooks(failProbeOfRank, failCrossReadable);
  }
  ~TestHooks() { setShmTestHooks(-1, false); }
};

class ShmTransportTest : public ::testing::Test {
 protected:
  void connectPair(size_t ringBytes, int nranks = 2) {
    hash_ = uniqueHash();
    config_.shmBufferBytes = ringBytes;
    for (int r = 0; r < 2; ++r) {
      rankConfig_[r] = config_;
      if (singleCopyOf_[r] >= 0) rankConfig_[r].shmSingleCopyBytes = size_t(singleCopyOf_[r]);
    }
    for (int r = 0; r < 2; ++r) {
      info_[r].rank = r;
      info_[r].hostId = "testhost";
      info_[r].pid = ::getpid();
      transport_[r] = createShmTransport(TransportContext{r, nranks, hash_, rankConfig_[r]});
      ASSERT_STREQ(transport_[r]->name(), "shm");
    }
    int sv[2], wv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, wv), 0);
    watch0_ = ::dup(wv[0]);  // lets a test end rank 0's "process" without closing its ring
    SocketPairLink link0(sv[0], wv[0]), link1(sv[1], wv[1]);
    PeerLink* const links[2] = {&link0, &link1};
    transport_test::connectPair(transport_, info_, hash_, rankConfig_, links, conn_);
    ASSERT_TRUE(conn_[0] && conn_[1]);
    EXPECT_STREQ(conn_[0]->transportName(), "shm");
  }

  void TearDown() override {
    if (watch0_ >= 0) ::close(watch0_);
    transport_test::closePair(transport_, conn_, hash_);
  }

  // Sends `sizes.size()` messages from `from` to the other rank, all queued at once on both
  // sides, with each side driven by its own thread; checks content and headers.
  void exchange(int from, const std::vector<size_t>& sizes) {
    const int to = 1 - from;
    const size_t n = sizes.size();
    std::vector<std::vector<uint8_t>> src(n), dst(n);
    std::vector<TransferRequest> sreq(n), rreq(n);
    for (size_t i = 0; i < n; ++i) {
      src[i] = randomBytes(sizes[i], static_cast<uint32_t>(i * 31 + sizes[i]));
      dst[i].assign(sizes[i] + 16, 0xEE);
    }
    for (size_t i = 0; i < n; ++i) {
      conn_[from]->isend(makeHeader(hash_, from, 1, uint32_t(i), sizes[i]), src[i].data(),
                         &sreq[i]);
      conn_[to]->irecv(makeHeader(hash_, from, 1, uint32_t(i), 0), dst[i].data(), dst[i].size(),
                       &rreq[i]);
    }
    auto all = [](std::vector<TransferRequest>& v) {
      return [&v] {
        for (auto& r : v)
          if (!r.done) return false;
        return true;
      };
    };
    std::exception_ptr err;
    bool sentOk = false;
    std::thread sender([&] {
      try {
        sentOk = driveUntil(*conn_[from], all(sreq));
      } catch (...) {
        err = std::current_exception();
      }
    });
    bool recvOk = driveUntil(*conn_[to], all(rreq));
    sender.join();
    if (err) std::rethrow_exception(err);
    ASSERT_TRUE(sentOk && recvOk) << "timed out";
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(sreq[i].bytes, sizes[i]);
      EXPECT_EQ(rreq[i].bytes, sizes[i]);
      EXPECT_EQ(rreq[i].header.payloadBytes, sizes[i]);
      EXPECT_EQ(rreq[i].header.step, i);
      EXPECT_EQ(rreq[i].header.srcRank, from);
      if (sizes[i] > 0) {
        ASSERT_EQ(std::memcmp(src[i].data(), dst[i].data(), sizes[i]), 0) << "message " << i;
      }
      EXPECT_EQ(dst[i][sizes[i]], 0xEE) << "wrote past the payload of message " << i;
    }
  }

  ShmConnectionStats stats(int r) const { return shmConnectionStats(*conn_[r]); }

  CommConfig config_;
  CommConfig rankConfig_[2];
  long singleCopyOf_[2] = {-1, -1};  // a rank's own SQZ_SHM_SINGLE_COPY_BYTES (-1: config_'s)
  uint64_t hash_ = 0;
  PeerInfo info_[2];
  std::unique_ptr<Transport> transport_[2];
  std::unique_ptr<Connection> conn_[2];
  int watch0_ = -1;  // a duplicate of rank 0's end of the liveness socket
};

// The data tests, with every message through the ring (0, the default), single copy from 4 KiB,
// and single copy from 1 MiB.
class ShmDataTest : public ShmTransportTest, public ::testing::WithParamInterface<size_t> {
 protected:
  void SetUp() override { config_.shmSingleCopyBytes = GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(SingleCopy, ShmDataTest,
                         ::testing::Values(size_t{0}, size_t{4096}, size_t{1} << 20),
                         [](const ::testing::TestParamInfo<size_t>& p) {
                           return p.param == 0 ? std::string("Ring")
                                               : strCat("From", p.param >> 10, "KiB");
                         });

TEST_F(ShmTransportTest, CanConnectOnlyOnTheSameHost) {
  connectPair(64 << 10);
  PeerInfo other = info_[1];
  EXPECT_TRUE(transport_[0]->canConnect(info_[0], other));
  other.hostId = "elsewhere";
  EXPECT_FALSE(transport_[0]->canConnect(info_[0], other));
}

TEST_F(ShmTransportTest, NamesAreUnlinkedOnceConnected) {
  connectPair(64 << 10);
  EXPECT_TRUE(shmFiles(hash_).empty()) << "still in /dev/shm: " << shmFiles(hash_)[0];
}

TEST_F(ShmTransportTest, DoorbellStaysUntilAllPeersMappedItOrDestroyed) {
  connectPair(64 << 10, /*nranks=*/3);  // rank 2 never connects
  EXPECT_EQ(shmFiles(hash_).size(), 2u);
  // TearDown checks that destroying the transports removes them.
}

TEST_F(ShmTransportTest, WaitSourcesIsTheOwnDoorbell) {
  connectPair(64 << 10);
  WaitSources a, b;
  conn_[0]->addWaitSources(a);
  conn_[1]->addWaitSources(b);
  ASSERT_NE(a.doorbell, nullptr);
  ASSERT_NE(b.doorbell, nullptr);
  EXPECT_NE(a.doorbell, b.doorbell);
  EXPECT_TRUE(a.fds.empty());
}

TEST_P(ShmDataTest, SmallBothWays) {
  connectPair(64 << 10);
  exchange(0, {100});
  exchange(1, {1, 3, 100});
}

TEST_P(ShmDataTest, ZeroLength) {
  connectPair(64 << 10);
  exchange(0, {0});
  exchange(1, {0, 0, 5, 0});
  // A zero-length receive may also post a null buffer.
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, 2, 0, 0), nullptr, &s);
  conn_[1]->irecv(makeHeader(hash_, 0, 2, 0, 0), nullptr, 0, &r);
  ASSERT_TRUE(driveUntil(*conn_[0], [&] { return s.done; }));
  ASSERT_TRUE(driveUntil(*conn_[1], [&] { return r.done; }));
  EXPECT_EQ(r.bytes, 0u);
}

TEST_P(ShmDataTest, LargeStreamsThroughSmallRing) {
  connectPair(64 << 10);
  exchange(0, {20 << 20});
  exchange(1, {(20 << 20) + 13});
}

TEST_P(ShmDataTest, ManyQueuedAcrossWrapsWithOddRingSize) {
  connectPair((64 << 10) + 40);  // not a power of two: headers and payloads straddle the wrap
  std::vector<size_t> sizes;
  for (size_t s : {0, 1, 71, 72, 73, 4095, 4096, 65536 + 3, 200000, 7, 0, 300001})
    sizes.push_back(s);
  for (int i = 0; i < 40; ++i) sizes.push_back((i * 7919) % 5000);
  exchange(0, sizes);
  exchange(1, sizes);
}

TEST_P(ShmDataTest, BothDirectionsAtOnceSingleThread) {
  connectPair(64 << 10);
  const size_t n = 3 << 20;
  auto a = randomBytes(n, 1), b = randomBytes(n, 2);
  std::vector<uint8_t> ra(n), rb(n);
  TransferRequest s0, s1, r0, r1;
  conn_[0]->isend(makeHeader(hash_, 0, 9, 1, n), a.data(), &s0);
  conn_[1]->isend(makeHeader(hash_, 1, 9, 1, n), b.data(), &s1);
  conn_[0]->irecv(makeHeader(hash_, 1, 9, 1, 0), rb.data(), n, &r0);
  conn_[1]->irecv(makeHeader(hash_, 0, 9, 1, 0), ra.data(), n, &r1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!(s0.done && s1.done && r0.done && r1.done) &&
         std::chrono::steady_clock::now() < deadline) {
    conn_[0]->progress();
    conn_[1]->progress();
  }
  ASSERT_TRUE(s0.done && s1.done && r0.done && r1.done);
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
}

TEST_P(ShmDataTest, HeaderMismatchThrows) {
  connectPair(64 << 10);
  std::vector<uint8_t> data(1000, 1), buf(1000);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, /*seq=*/5, 0, data.size()), data.data(), &s);
  conn_[1]->irecv(makeHeader(hash_, 0, /*seq=*/6, 0, 0), buf.data(), buf.size(), &r);
  ASSERT_TRUE(driveUntil(*conn_[0], [&] { return s.done; }));
  expectError(ErrorCode::kInvalidUsage, [&] { driveUntil(*conn_[1], [&] { return r.done; }); },
              "no error for a header with another sequence number");
  EXPECT_FALSE(r.done);
  EXPECT_THROW(conn_[1]->progress(), Error);  // the connection stays failed
}

TEST_P(ShmDataTest, PayloadLargerThanCapacityThrows) {
  connectPair(64 << 10);
  std::vector<uint8_t> data(1000, 1), buf(999);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, data.size()), data.data(), &s);
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  ASSERT_TRUE(driveUntil(*conn_[0], [&] { return s.done; }));
  expectError(ErrorCode::kRemote, [&] { driveUntil(*conn_[1], [&] { return r.done; }); },
              "no error for a payload larger than the buffer");
}

TEST_P(ShmDataTest, ShutdownMakesThePeerThrowRemoteAfterDrainingData) {
  connectPair(64 << 10);
  // Under every threshold tested: a single-copy message does not outlive its sender (see
  // SingleCopyFromASenderThatClosedIsAnError).
  std::vector<uint8_t> data(4000, 7), buf(4000), buf2(10);
  TransferRequest s, r, r2;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, data.size()), data.data(), &s);
  ASSERT_TRUE(driveUntil(*conn_[0], [&] { return s.done; }));
  conn_[0]->shutdown();
  EXPECT_FALSE(conn_[0]->progress());  // the closed side just stops
  // What was sent before the shutdown still arrives.
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  ASSERT_TRUE(driveUntil(*conn_[1], [&] { return r.done; }));
  EXPECT_EQ(buf, data);
  EXPECT_FALSE(conn_[1]->progress());  // nothing pending: no error yet
  conn_[1]->irecv(makeHeader(hash_, 0, 2, 0, 0), buf2.data(), buf2.size(), &r2);
  const std::string what = expectError(ErrorCode::kRemote, [&] { conn_[1]->progress(); },
                                       "no error after the peer closed");
  EXPECT_NE(what.find("rank 0 closed the shared-memory connection"), std::string::npos) << what;
}

TEST_F(ShmTransportTest, ShutdownWakesASleepingPeer) {
  connectPair(64 << 10);
  std::vector<uint8_t> buf(10);
  TransferRequest r;
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    conn_[0]->shutdown();
  });
  const auto start = std::chrono::steady_clock::now();
  WaitSources ws;
  conn_[1]->addWaitSources(ws);
  ErrorCode code = ErrorCode::kInternal;
  try {
    while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
      const uint32_t snap = ws.doorbell->snapshot();
      if (!conn_[1]->progress()) waitForActivity(ws, snap, 5000);
    }
  } catch (const Error& e) {
    code = e.code();
  }
  closer.join();
  EXPECT_EQ(code, ErrorCode::kRemote);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4))
      << "the doorbell did not wake the waiting rank";
}

TEST_P(ShmDataTest, DestroyingAConnectionClosesIt) {
  connectPair(64 << 10);
  std::vector<uint8_t> data(100, 3);
  TransferRequest s;
  // Fill the ring so the send stays pending, then the peer goes away.
  std::vector<uint8_t> big(1 << 20, 1);
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, big.size()), big.data(), &s);
  conn_[0]->progress();
  EXPECT_FALSE(s.done);
  conn_[1].reset();
  EXPECT_THROW(conn_[0]->progress(), Error);
}

// A peer process that dies writes no 'closed' flag: its end of the liveness socket, closed by the
// kernel, is what tells. Simulated here by shutting rank 0's end without touching its ring.
TEST_F(ShmTransportTest, APeerProcessThatDiesIsNoticedWithoutItsClosedFlag) {
  connectPair(64 << 10);
  std::vector<uint8_t> buf(10);
  TransferRequest r;
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  EXPECT_FALSE(conn_[1]->progress());  // rank 0 is alive and silent: no error
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::shutdown(watch0_, SHUT_RDWR);
  });
  const auto start = std::chrono::steady_clock::now();
  WaitSources ws;
  conn_[1]->addWaitSources(ws);
  std::string what;
  try {
    while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
      const uint32_t snap = ws.doorbell->snapshot();
      if (!conn_[1]->progress()) waitForActivity(ws, snap, 20);
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemote);
    what = e.what();
  }
  killer.join();
  EXPECT_NE(what.find("rank 0 exited or was killed"), std::string::npos) << what;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2))
      << "a dead peer was not noticed promptly";
}

// ---- single copy ----

constexpr size_t kThreshold = 64 << 10;

// Drives `c` until it throws; returns the error. Fails the test if it does not throw within 5 s.
Error driveUntilError(Connection& c) {
  WaitSources ws;
  c.addWaitSources(ws);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  try {
    while (std::chrono::steady_clock::now() < deadline) {
      const uint32_t snap = ws.doorbell->snapshot();
      if (!c.progress()) waitForActivity(ws, snap, 20);
    }
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error within 5 s";
  return Error(ErrorCode::kInternal, "no error");
}

TEST_F(ShmTransportTest, SingleCopyIsNegotiatedBothWays) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(stats(r).singleCopyOutBytes, kThreshold);
    EXPECT_EQ(stats(r).singleCopyInBytes, kThreshold);
  }
}

TEST_F(ShmTransportTest, SingleCopyOffWhenEitherSideSaysZero) {
  singleCopyOf_[0] = kThreshold;
  singleCopyOf_[1] = 0;
  connectPair(64 << 10);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(stats(r).singleCopyOutBytes, 0u);
    EXPECT_EQ(stats(r).singleCopyInBytes, 0u);
  }
  exchange(0, {1 << 20});
  exchange(1, {1 << 20});
  EXPECT_EQ(stats(0).singleCopySends + stats(1).singleCopySends, 0u);
}

TEST_F(ShmTransportTest, SingleCopyThresholdIsTheLargerSetting) {
  singleCopyOf_[0] = kThreshold;
  singleCopyOf_[1] = 2 * kThreshold;
  connectPair(64 << 10);
  EXPECT_EQ(stats(0).singleCopyOutBytes, 2 * kThreshold);
  EXPECT_EQ(stats(1).singleCopyInBytes, 2 * kThreshold);
}

TEST_F(ShmTransportTest, SingleCopyThresholdBoundary) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  exchange(0, {kThreshold - 1, kThreshold, kThreshold + 1});
  EXPECT_EQ(stats(0).singleCopySends, 2u);
  EXPECT_EQ(stats(1).singleCopyReceives, 2u);
  EXPECT_EQ(stats(0).ringFallbackSends, 0u);
}

TEST_F(ShmTransportTest, SingleCopyMessagesFarLargerThanTheRing) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  exchange(0, {(24 << 20) + 5});
  exchange(1, {24 << 20, 9 << 20});
  EXPECT_EQ(stats(0).singleCopySends, 1u);
  EXPECT_EQ(stats(1).singleCopySends, 2u);
}

TEST_F(ShmTransportTest, MixedSmallAndLargeArriveInOrder) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair((64 << 10) + 40);  // odd size: headers and descriptors straddle the wrap
  std::vector<size_t> sizes;
  for (int i = 0; i < 30; ++i) {
    sizes.push_back((i * 7919) % 3000);
    if (i % 3 == 0) sizes.push_back(kThreshold + size_t(i) * 4099);
    if (i % 7 == 0) sizes.push_back(0);
    if (i % 10 == 0) sizes.push_back(3 << 20);
  }
  exchange(0, sizes);
  exchange(1, sizes);
  EXPECT_EQ(stats(0).singleCopySends, 13u);
  EXPECT_EQ(stats(1).singleCopySends, 13u);
}

TEST_F(ShmTransportTest, ASendCompletesOnlyAfterThePeerReadIt) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  auto data = randomBytes(1 << 20, 3);
  std::vector<uint8_t> buf(1 << 20);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, data.size()), data.data(), &s);
  for (int i = 0; i < 5; ++i) conn_[0]->progress();
  EXPECT_FALSE(s.done) << "a single-copy send completed before anyone read its buffer";
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  ASSERT_TRUE(driveUntil(*conn_[1], [&] { return r.done; }));
  ASSERT_TRUE(driveUntil(*conn_[0], [&] { return s.done; }));
  EXPECT_EQ(s.bytes, data.size());
  EXPECT_EQ(buf, data);
}

TEST_F(ShmTransportTest, SingleCopyHeaderMismatchLeavesTheBufferUntouched) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  std::vector<uint8_t> data(1 << 20, 1), buf(1 << 20, 0xEE);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, /*seq=*/5, 0, data.size()), data.data(), &s);
  conn_[0]->progress();
  conn_[1]->irecv(makeHeader(hash_, 0, /*seq=*/6, 0, 0), buf.data(), buf.size(), &r);
  expectError(ErrorCode::kInvalidUsage, [&] { driveUntil(*conn_[1], [&] { return r.done; }); },
              "no error for a header with another sequence number");
  EXPECT_EQ(buf, std::vector<uint8_t>(1 << 20, 0xEE)) << "payload landed before the header check";
  EXPECT_FALSE(s.done);
}

// The probe fails for rank 1 reading rank 0 (as under yama ptrace_scope): 0 -> 1 falls back to
// the ring, 1 -> 0 still reads, and both sides agree.
TEST_F(ShmTransportTest, AFailedProbeFallsBackToTheRingForThatDirection) {
  TestHooks hooks(/*failProbeOfRank=*/1, false);
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  EXPECT_EQ(stats(0).singleCopyOutBytes, 0u);
  EXPECT_EQ(stats(1).singleCopyInBytes, 0u);
  EXPECT_EQ(stats(1).singleCopyOutBytes, kThreshold);
  EXPECT_EQ(stats(0).singleCopyInBytes, kThreshold);
  exchange(0, {1 << 20, 10, 3 << 20});
  exchange(1, {1 << 20, 10, 3 << 20});
  EXPECT_EQ(stats(0).singleCopySends, 0u);
  EXPECT_EQ(stats(1).singleCopySends, 2u);
}

TEST_F(ShmTransportTest, AFailedProbeOfTheLowerRankTurnsOffOnlyTheOtherDirection) {
  config_.shmSingleCopyBytes = kThreshold;
  {
    TestHooks hooks(/*failProbeOfRank=*/0, false);
    connectPair(64 << 10);
  }
  EXPECT_EQ(stats(1).singleCopyOutBytes, 0u);
  EXPECT_EQ(stats(0).singleCopyInBytes, 0u);
  EXPECT_EQ(stats(0).singleCopyOutBytes, kThreshold);
  exchange(1, {2 << 20});
  exchange(0, {2 << 20});
  EXPECT_EQ(stats(1).singleCopySends, 0u);
  EXPECT_EQ(stats(0).singleCopySends, 1u);
}

// A buffer that another process cannot read (as device-mapped pinned memory) still gets its
// descriptor, which says the payload follows in the ring.
TEST_F(ShmTransportTest, AnUnreadableBufferGoesThroughTheRing) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  {
    TestHooks hooks(-1, /*failCrossReadable=*/true);
    exchange(0, {kThreshold, 5 << 20, 100});
  }
  exchange(0, {kThreshold});
  EXPECT_EQ(stats(0).ringFallbackSends, 2u);
  EXPECT_EQ(stats(0).singleCopySends, 1u);
}

// Rank 0 dies (its liveness socket closes, its closed flag is never set) while rank 1's
// single-copy send to it waits to be read: rank 1 gets kRemote, not a hang.
TEST_F(ShmTransportTest, AReceiverThatDiesFailsAPendingSingleCopySend) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  std::vector<uint8_t> data(4 << 20, 1);
  TransferRequest s;
  conn_[1]->isend(makeHeader(hash_, 1, 1, 0, data.size()), data.data(), &s);
  conn_[1]->progress();  // the descriptor is in the ring
  EXPECT_FALSE(s.done);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::shutdown(watch0_, SHUT_RDWR);
  });
  const auto start = std::chrono::steady_clock::now();
  const Error e = driveUntilError(*conn_[1]);
  killer.join();
  EXPECT_EQ(e.code(), ErrorCode::kRemote);
  EXPECT_NE(std::string(e.what()).find("rank 0 exited or was killed"), std::string::npos)
      << e.what();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_FALSE(s.done);
}

TEST_F(ShmTransportTest, AReceiverThatClosesFailsAPendingSingleCopySend) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  std::vector<uint8_t> data(4 << 20, 1);
  TransferRequest s;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, data.size()), data.data(), &s);
  conn_[0]->progress();
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    conn_[1]->shutdown();
  });
  const Error e = driveUntilError(*conn_[0]);
  closer.join();
  EXPECT_EQ(e.code(), ErrorCode::kRemote);
  EXPECT_FALSE(s.done);
}

// A sender that shut down (an abort) may let its caller reuse the buffer: the receiver must not
// deliver what it reads from there.
TEST_F(ShmTransportTest, SingleCopyFromASenderThatClosedIsAnError) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  std::vector<uint8_t> data(1 << 20, 1), buf(1 << 20);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, data.size()), data.data(), &s);
  conn_[0]->progress();  // the descriptor is in the ring
  conn_[0]->shutdown();
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  const Error e = driveUntilError(*conn_[1]);
  EXPECT_EQ(e.code(), ErrorCode::kRemote);
  EXPECT_NE(std::string(e.what()).find("rank 0 closed the shared-memory connection"),
            std::string::npos)
      << e.what();
  EXPECT_FALSE(r.done);
}

TEST_F(ShmTransportTest, SingleCopyFromASenderThatDiedIsAnError) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  std::vector<uint8_t> data(1 << 20, 1), buf(1 << 20);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, data.size()), data.data(), &s);
  conn_[0]->progress();
  ::shutdown(watch0_, SHUT_RDWR);  // rank 0's process "ends"; its closed flag stays 0
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  const Error e = driveUntilError(*conn_[1]);
  EXPECT_EQ(e.code(), ErrorCode::kRemote);
  EXPECT_NE(std::string(e.what()).find("rank 0 exited or was killed"), std::string::npos)
      << e.what();
  EXPECT_FALSE(r.done);
}

// An abort from another thread while a large read is in flight: the reader stops promptly
// (progress() moves nothing after its own shutdown) and the sender ends, done or kRemote.
TEST_F(ShmTransportTest, ShutdownDuringASingleCopyReadEndsBothSides) {
  config_.shmSingleCopyBytes = kThreshold;
  connectPair(64 << 10);
  const size_t n = 48 << 20;
  std::vector<uint8_t> data(n, 5), buf(n);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, n), data.data(), &s);
  conn_[0]->progress();
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    try {
      while (!stop.load() && !r.done)
        if (!conn_[1]->progress()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } catch (const Error& e) {
      ADD_FAILURE() << "the reader threw " << e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  conn_[1]->shutdown();
  const auto start = std::chrono::steady_clock::now();
  bool senderEnded = false;
  try {
    senderEnded = driveUntil(*conn_[0], [&] { return s.done; }, 5000);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemote) << e.what();
    senderEnded = true;
  }
  EXPECT_TRUE(senderEnded) << "the sender hung after its reader shut down";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  stop = true;
  reader.join();
}

// Two real processes: the probe across them, a single-copy read of the child's memory, and the
// child's death (SIGKILL, so no closed flag) with a descriptor of its still in the ring: the read
// fails with ESRCH or the liveness socket tells, and either way the parent gets kRemote.
TEST(ShmSingleCopyAcrossProcesses, ReadsAChildsMemoryAndNoticesItsDeath) {
  CommConfig config;
  config.shmBufferBytes = 64 << 10;
  config.shmSingleCopyBytes = kThreshold;
  const uint64_t hash = uniqueHash();
  const size_t n = 8 << 20;
  int sv[2], wv[2], ready[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, wv), 0);
  ASSERT_EQ(::pipe(ready), 0);
  PeerInfo info[2];
  for (int r = 0; r < 2; ++r) {
    info[r].rank = r;
    info[r].hostId = "testhost";
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {  // rank 0: sends two messages, says so, and waits to be killed
    ::close(sv[1]);
    ::close(wv[1]);
    ::close(ready[0]);
    int rc = 0;
    try {
      auto t = createShmTransport(TransportContext{0, 2, hash, config});
      SocketPairLink link(sv[0], wv[0]);
      auto c = t->connect(LinkSetup{0, info[0], info[1], hash, config, link});
      const auto data = randomBytes(n, 7);
      TransferRequest s1, s2;
      c->isend(makeHeader(hash, 0, 1, 0, n), data.data(), &s1);
      if (!driveUntil(*c, [&] { return s1.done; })) rc = 2;
      c->isend(makeHeader(hash, 0, 1, 1, n), data.data(), &s2);
      c->progress();  // the second descriptor is in the ring
      const char byte = 1;
      if (::write(ready[1], &byte, 1) != 1) rc = 4;
      ::pause();
    } catch (...) {
      rc = 3;
    }
    ::_exit(rc);
  }
  // Rank 1, in this process. The child dies with this scope whatever happens.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reaper{child};
  ::close(sv[0]);
  ::close(wv[0]);
  ::close(ready[1]);
  auto t = createShmTransport(TransportContext{1, 2, hash, config});
  SocketPairLink link(sv[1], wv[1]);
  auto c = t->connect(LinkSetup{1, info[1], info[0], hash, config, link});
  ASSERT_EQ(shmConnectionStats(*c).singleCopyInBytes, kThreshold)
      << "the probe of another process failed: is process_vm_readv allowed here?";
  std::vector<uint8_t> buf(n);
  TransferRequest r1, r2;
  c->irecv(makeHeader(hash, 0, 1, 0, 0), buf.data(), n, &r1);
  ASSERT_TRUE(driveUntil(*c, [&] { return r1.done; }));
  EXPECT_EQ(buf, randomBytes(n, 7));
  EXPECT_EQ(shmConnectionStats(*c).singleCopyReceives, 1u);
  pollfd p{ready[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, kTimeoutMs), 1) << "the child never queued its second message";
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  reaper.pid = 0;
  c->irecv(makeHeader(hash, 0, 1, 1, 0), buf.data(), n, &r2);
  const Error e = driveUntilError(*c);
  EXPECT_EQ(e.code(), ErrorCode::kRemote) << e.what();
  EXPECT_NE(std::string(e.what()).find("rank 0 exited or was killed"), std::string::npos)
      << e.what();
  EXPECT_FALSE(r2.done);
  c.reset();
  t.reset();
  EXPECT_TRUE(shmFiles(hash).empty()) << "left in /dev/shm: " << shmFiles(hash)[0];
}

TEST(ShmTransportRegistry, ShmComesBeforeTcp) {
  const auto& names = availableTransports();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "shm");
  CommConfig config;
  const uint64_t hash = uniqueHash();
  auto t = createTransport("shm", TransportContext{0, 1, hash, config});
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name(), "shm");
  EXPECT_TRUE(shmFiles(hash).empty()) << "a one-rank communicator needs no doorbell name";
}

TEST(ShmTransportSetup, RejectsASegmentNameOutsideThePair) {
  CommConfig config;
  const uint64_t hash = uniqueHash();
  auto t = createShmTransport(TransportContext{1, 2, hash, config});
  PeerInfo self, peer;
  self.rank = 1;
  peer.rank = 0;
  self.hostId = peer.hostId = "testhost";
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  SocketPairLink mine(sv[0]), fake(sv[1]);
  fake.sendString("/some-other-segment");
  fake.sendString(strCat("/sqz-", toHex(&hash, sizeof hash), "-0-1-bell"));
  expectError(ErrorCode::kRemote, [&] { t->connect(LinkSetup{1, self, peer, hash, config, mine}); },
              "accepted a foreign segment name");
  t.reset();
  EXPECT_TRUE(shmFiles(hash).empty());
}

}  // namespace
}  // namespace squeeze
