// The shared-memory window (transports/shm/window.h) of two ranks in one process, set up by the
// shm transport over a socketpair PeerLink: each sees the other's buffers and counters, and every
// way a wait can end (ready, the peer closed, this rank aborted, the timeout) ends it promptly.
// A peer whose process dies is the fault harness's case (fault-kill-shm).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "base/error.h"
#include "core/config.h"
#include "tests/common/transport_pair.h"
#include "transports/shm/shm_transport.h"
#include "transports/shm/window.h"

namespace squeeze {
namespace {

using transport_test::SocketPairLink;
using transport_test::uniqueHash;

constexpr size_t kWindowBytes = 64 << 10;

class ShmWindowTest : public ::testing::Test {
 protected:
  // Connects ranks 0 and 1 with the given window capacities and ends setup on both.
  void connect(size_t window0, size_t window1) {
    hash_ = uniqueHash();
    const size_t windows[2] = {window0, window1};
    for (int r = 0; r < 2; ++r) {
      config_[r].shmDirectBytes = windows[r];
      info_[r].rank = r;
      info_[r].hostId = "testhost";
      info_[r].pid = ::getpid();
      transport_[r] = createShmTransport(TransportContext{r, 2, hash_, config_[r]});
    }
    int sv[2], wv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, wv), 0);
    SocketPairLink link0(sv[0], wv[0]), link1(sv[1], wv[1]);
    PeerLink* const links[2] = {&link0, &link1};
    transport_test::connectPair(transport_, info_, hash_, config_, links, conn_);
    for (int r = 0; r < 2; ++r) {
      transport_[r]->setupDone();
      window_[r] = shmWindow(*transport_[r]);
    }
  }

  void TearDown() override {
    window_[0].reset();
    window_[1].reset();
    transport_test::closePair(transport_, conn_, hash_);
  }

  WindowWait waitOf(int timeoutMs) const { return WindowWait{timeoutMs, 50, &aborted_}; }

  uint64_t hash_ = 0;
  CommConfig config_[2];
  PeerInfo info_[2];
  std::unique_ptr<Transport> transport_[2];
  std::unique_ptr<Connection> conn_[2];
  std::shared_ptr<ShmWindow> window_[2];
  std::atomic<bool> aborted_{false};
};

TEST_F(ShmWindowTest, EachRankSeesTheOthersBuffersAndCounters) {
  connect(kWindowBytes, kWindowBytes);
  ASSERT_TRUE(window_[0] && window_[1]);
  EXPECT_EQ(window_[0]->capacity(), kWindowBytes);
  for (int s = 0; s < 2; ++s) {
    std::memset(window_[0]->input(0, s), 0x10 + s, kWindowBytes);
    std::memset(window_[1]->result(1, s), 0x20 + s, 16);
    window_[0]->header(0, s)->seq = 7 + s;
  }
  window_[0]->publish(WindowCounter::kPublished, 3);
  EXPECT_EQ(window_[1]->waitFor(0, WindowCounter::kPublished, 3, waitOf(1000)), WaitResult::kReady);
  EXPECT_EQ(window_[1]->counter(0, WindowCounter::kPublished), 3u);
  EXPECT_EQ(window_[1]->counter(0, WindowCounter::kReduced), 0u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(window_[1]->input(0, s)[kWindowBytes - 1], 0x10 + s);
    EXPECT_EQ(window_[0]->result(1, s)[15], 0x20 + s);
    EXPECT_EQ(window_[1]->header(0, s)->seq, uint64_t(7 + s));
  }
  // Each rank maps the segment itself: the same bytes, not the same address.
  EXPECT_NE(window_[1]->input(0, 0), window_[0]->input(0, 0));
}

TEST_F(ShmWindowTest, WaitsAcrossThreadsUntilThePeerPublishes) {
  connect(kWindowBytes, kWindowBytes);
  ASSERT_TRUE(window_[0] && window_[1]);
  std::thread peer([&] {
    for (uint64_t t = 1; t <= 200; ++t) {
      ASSERT_EQ(window_[1]->waitFor(0, WindowCounter::kPublished, t, waitOf(10000)),
                WaitResult::kReady);
      window_[1]->publish(WindowCounter::kReduced, t);
    }
  });
  for (uint64_t t = 1; t <= 200; ++t) {
    window_[0]->publish(WindowCounter::kPublished, t);
    ASSERT_EQ(window_[0]->waitFor(1, WindowCounter::kReduced, t, waitOf(10000)),
              WaitResult::kReady);
  }
  peer.join();
}

TEST_F(ShmWindowTest, APeerThatNeverPublishesIsATimeout) {
  connect(kWindowBytes, kWindowBytes);
  ASSERT_TRUE(window_[0]);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(window_[0]->waitFor(1, WindowCounter::kPublished, 1, waitOf(150)),
            WaitResult::kTimeout);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ms, 150);
  EXPECT_LT(ms, 5000) << "a 150 ms wait took " << ms << " ms";
}

TEST_F(ShmWindowTest, APeerThatShutsDownEndsTheWaitButWhatItPublishedStands) {
  connect(kWindowBytes, kWindowBytes);
  ASSERT_TRUE(window_[0] && window_[1]);
  window_[1]->publish(WindowCounter::kPublished, 1);
  std::thread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    window_[1]->shutdown();
  });
  EXPECT_EQ(window_[0]->waitFor(1, WindowCounter::kPublished, 2, waitOf(30000)),
            WaitResult::kPeerClosed);
  peer.join();
  EXPECT_EQ(window_[0]->waitFor(1, WindowCounter::kPublished, 1, waitOf(30000)),
            WaitResult::kReady);
}

TEST_F(ShmWindowTest, AbortOrOwnShutdownEndsTheWait) {
  connect(kWindowBytes, kWindowBytes);
  ASSERT_TRUE(window_[0]);
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    aborted_ = true;
  });
  EXPECT_EQ(window_[0]->waitFor(1, WindowCounter::kConsumed, 1, waitOf(30000)),
            WaitResult::kAborted);
  other.join();
  aborted_ = false;
  std::thread self([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    window_[0]->shutdown();  // Communicator::fail, from another thread
  });
  EXPECT_EQ(window_[0]->waitFor(1, WindowCounter::kConsumed, 1, waitOf(30000)),
            WaitResult::kAborted);
  self.join();
}

TEST_F(ShmWindowTest, TheSmallerCapacityIsEveryonesAndNoneMeansNoWindow) {
  connect(kWindowBytes, 2 * kWindowBytes);
  ASSERT_TRUE(window_[0] && window_[1]);
  EXPECT_EQ(window_[0]->capacity(), kWindowBytes);
  EXPECT_EQ(window_[1]->capacity(), kWindowBytes);
  TearDown();
  connect(kWindowBytes, 0);
  EXPECT_EQ(window_[0], nullptr) << "rank 1 has no window, so rank 0 must not use one";
  EXPECT_EQ(window_[1], nullptr);
}

}  // namespace
}  // namespace squeeze
