// The ib transport's Connection (transports/ib/ib_connection.h) without hardware: two
// connections in one process over an in-memory fake of an RC queue pair pair, whose "wire"
// thread executes posted work requests in order after random delays, copying from the sender's
// staging buffer only then (as an HCA reads memory when it transmits), consuming one posted
// receive per immediate-carrying message, and raising completion-channel events only when the
// completion queue is armed. Checked:
//   - messages of every size both ways (far larger than the ring, and rings of odd sizes)
//     arrive intact, in order, with their headers; no message ever finds the peer's receive
//     queue empty; the send queue never overflows;
//   - a header that disagrees, or a payload larger than the buffer, fails before a payload byte
//     lands in the caller's buffer;
//   - a peer whose process goes away (its liveness socket closes) fails a pending receive with
//     Error(kRemote) naming it, quickly; an idle connection to a closed peer is not an error;
//   - error completions (the HCA gave up) fail with Error(kRemote) naming the peer;
//   - an immediate that does not fit the protocol is Error(kRemote);
//   - shutdown() from another thread while progress() runs; afterwards the peer fails;
//   - with nothing to do the driver sleeps in poll() on the wait sources (no busy spin).
#include "transports/ib/ib_connection.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "base/error.h"
#include "tests/common/transport_pair.h"
#include "transports/ib/ib_credits.h"

namespace squeeze {
namespace {

using transport_test::makeHeader;
using transport_test::randomBytes;

constexpr int kTimeoutMs = 30000;
constexpr uint64_t kHash = 0x1b1b1b1b00000001ull;

// ---- the fake fabric ----------------------------------------------------------------------

class FakeFabric {
 public:
  struct Options {
    uint64_t ringBytes[2] = {4096, 4096};  // each side's receive ring
    uint32_t recvDepth = kIbRecvQueueDepth;
    uint32_t sendDepth = kIbSendQueueDepth;
    uint32_t seed = 1;
    int maxDelayUs = 200;
  };

  explicit FakeFabric(const Options& o) : opt_(o), rng_(o.seed) {
    for (int s = 0; s < 2; ++s) {
      side_[s].ring.assign(o.ringBytes[s], 0);
      side_[s].staging.assign(o.ringBytes[1 - s], 0);
      side_[s].recvsPosted = o.recvDepth;  // posted before RTR, as connect() does
      side_[s].efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    }
    wire_ = std::thread([this] { run(); });
  }

  ~FakeFabric() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    wire_.join();
    for (auto& s : side_) ::close(s.efd);
  }

  std::unique_ptr<IbQp> qp(int side);

  // From now on every work request fails at its sender, as when the HCA's retries run out.
  void breakLink() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

  // Makes side s's completion queue report a write of n bytes that nobody sent.
  void injectArrival(int s, uint32_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    complete(s,
             IbCompletion{IbCompletion::Kind::kRecvWrite, true, kIbRecvWrId, n, "success", false});
  }

  // Violations of the verbs rules the connection must keep.
  uint64_t rnrWaits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rnrWaits_;
  }
  uint64_t violations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }
  uint32_t maxRecvsInUse() const {
    std::lock_guard<std::mutex> lock(mu_);
    return maxRecvsInUse_;
  }

 private:
  friend class FakeQp;
  struct Op {
    bool credit;
    uint64_t offset;
    uint32_t len;
    uint32_t imm;
  };
  struct Side {
    std::vector<uint8_t> ring;
    std::vector<uint8_t> staging;
    std::deque<IbCompletion> cq;
    std::deque<Op> outgoing;
    uint32_t recvsPosted = 0;
    uint32_t sendsOutstanding = 0;  // posted, completion not yet polled
    bool armed = false;
    bool error = false;
    int efd = -1;
  };

  // mu_ held.
  void complete(int s, const IbCompletion& c) {
    side_[s].cq.push_back(c);
    if (side_[s].armed) {
      side_[s].armed = false;
      const uint64_t one = 1;
      ssize_t rc = ::write(side_[s].efd, &one, sizeof one);
      (void)rc;
    }
  }

  // mu_ held: executes side s's oldest outgoing work request; false when it must wait.
  bool deliver(int s) {
    Side& me = side_[s];
    Side& peer = side_[1 - s];
    const Op op = me.outgoing.front();
    if (broken_ || peer.error) {
      me.outgoing.pop_front();
      complete(s, IbCompletion{IbCompletion::Kind::kSendDone, false,
                               op.credit ? kIbCreditWrId : kIbWriteWrId, 0,
                               "transport retry counter exceeded", false});
      return true;
    }
    if (peer.recvsPosted == 0) {  // an RNR NAK on a real fabric: retried later
      ++rnrWaits_;
      return false;
    }
    me.outgoing.pop_front();
    if (!op.credit) {
      if (op.offset + op.len > peer.ring.size() || op.offset + op.len > me.staging.size()) {
        ++violations_;
      } else {
        std::memcpy(peer.ring.data() + op.offset, me.staging.data() + op.offset, op.len);
      }
    }
    --peer.recvsPosted;
    maxRecvsInUse_ = std::max(maxRecvsInUse_, opt_.recvDepth - peer.recvsPosted);
    complete(1 - s, IbCompletion{op.credit ? IbCompletion::Kind::kRecvCredit
                                           : IbCompletion::Kind::kRecvWrite,
                                 true, kIbRecvWrId, op.imm, "success", false});
    complete(s, IbCompletion{IbCompletion::Kind::kSendDone, true,
                             op.credit ? kIbCreditWrId : kIbWriteWrId, 0, "success", false});
    return true;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (side_[0].outgoing.empty() && side_[1].outgoing.empty()) {
        cv_.wait_for(lock, std::chrono::milliseconds(5));
        continue;
      }
      for (int s : {int(rng_() % 2), 0, 1}) {
        int n = 1 + int(rng_() % 8);
        while (n-- > 0 && !side_[s].outgoing.empty() && deliver(s)) {
        }
      }
      const int delayUs = opt_.maxDelayUs ? int(rng_() % uint32_t(opt_.maxDelayUs + 1)) : 0;
      lock.unlock();
      if (delayUs) std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
      lock.lock();
    }
  }

  const Options opt_;
  mutable std::mutex mu_;  // protects everything below
  std::condition_variable cv_;
  std::mt19937 rng_;
  Side side_[2];
  bool stop_ = false;
  bool broken_ = false;
  uint64_t rnrWaits_ = 0;
  uint64_t violations_ = 0;
  uint32_t maxRecvsInUse_ = 0;
  std::thread wire_;
};

class FakeQp final : public IbQp {
 public:
  FakeQp(FakeFabric& f, int s) : f_(f), s_(s) {}

  void postWrite(uint64_t offset, uint32_t len, uint32_t imm) override {
    post(FakeFabric::Op{false, offset, len, imm});
  }
  void postCredit(uint32_t imm) override { post(FakeFabric::Op{true, 0, 0, imm}); }
  void postRecvs(uint32_t n) override {
    std::lock_guard<std::mutex> lock(f_.mu_);
    me().recvsPosted += n;
    if (me().recvsPosted > f_.opt_.recvDepth) ++f_.violations_;
  }
  int poll(IbCompletion* out, int max) override {
    std::lock_guard<std::mutex> lock(f_.mu_);
    int n = 0;
    while (n < max && !me().cq.empty()) {
      out[n] = me().cq.front();
      me().cq.pop_front();
      if (out[n].kind == IbCompletion::Kind::kSendDone) --me().sendsOutstanding;
      ++n;
    }
    return n;
  }
  void armNotify() override {
    std::lock_guard<std::mutex> lock(f_.mu_);
    me().armed = true;  // for the next completion, not for those already queued
  }
  bool takeEvents() override {
    uint64_t n = 0;
    return ::read(me().efd, &n, sizeof n) == sizeof n && n > 0;
  }
  int eventFd() const override { return f_.side_[s_].efd; }
  void toError() override {
    std::lock_guard<std::mutex> lock(f_.mu_);
    me().error = true;
    while (!me().outgoing.empty()) {
      const auto op = me().outgoing.front();
      me().outgoing.pop_front();
      f_.complete(s_, IbCompletion{IbCompletion::Kind::kSendDone, false,
                                   op.credit ? kIbCreditWrId : kIbWriteWrId, 0,
                                   "Work Request Flushed Error", true});
    }
  }
  uint8_t* sendStaging() override { return me().staging.data(); }
  const uint8_t* recvRing() const override { return f_.side_[s_].ring.data(); }
  uint64_t sendRingBytes() const override { return f_.side_[s_].staging.size(); }
  uint64_t recvRingBytes() const override { return f_.side_[s_].ring.size(); }

 private:
  FakeFabric::Side& me() { return f_.side_[s_]; }
  void post(const FakeFabric::Op& op) {
    std::lock_guard<std::mutex> lock(f_.mu_);
    if (me().error) {
      f_.complete(s_, IbCompletion{IbCompletion::Kind::kSendDone, false,
                                   op.credit ? kIbCreditWrId : kIbWriteWrId, 0,
                                   "Work Request Flushed Error", true});
      return;
    }
    if (++me().sendsOutstanding > f_.opt_.sendDepth) ++f_.violations_;
    me().outgoing.push_back(op);
    f_.cv_.notify_all();
  }
  FakeFabric& f_;
  const int s_;
};

std::unique_ptr<IbQp> FakeFabric::qp(int side) { return std::make_unique<FakeQp>(*this, side); }

// ---- the pair -----------------------------------------------------------------------------

// Drives one connection until done() or the timeout: progress, and sleep on its wait sources
// when nothing moved. Returns false on timeout.
bool driveUntil(Connection& c, const std::function<bool()>& done, int timeoutMs = kTimeoutMs,
                uint64_t* progressCalls = nullptr, int waitMs = 50) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (progressCalls) ++*progressCalls;
    if (!c.progress()) {
      WaitSources ws;
      c.addWaitSources(ws);
      waitForActivity(ws, 0, waitMs);
    }
  }
  return true;
}

class IbConnectionTest : public ::testing::Test {
 protected:
  void connect(const FakeFabric::Options& o, uint32_t maxWrites = kIbMaxWrites,
               uint32_t sendDepth = kIbSendQueueDepth) {
    fabric_ = std::make_unique<FakeFabric>(o);
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    for (int r = 0; r < 2; ++r) {
      IbConnectionParams p;
      p.myRank = r;
      p.peerRank = 1 - r;
      p.maxWrites = maxWrites;
      p.sendQueueDepth = sendDepth;
      conn_[r] = makeIbConnection(fabric_->qp(r), p, Socket(sv[r]));
    }
    EXPECT_STREQ(conn_[0]->transportName(), "ib");
  }

  void TearDown() override {
    conn_[0].reset();
    conn_[1].reset();
    if (fabric_) {
      EXPECT_EQ(fabric_->rnrWaits(), 0u) << "a message found the peer's receive queue empty";
      EXPECT_EQ(fabric_->violations(), 0u) << "queue depth or ring bounds exceeded";
    }
    fabric_.reset();
  }

  // Sends sizes.size() messages each way at once, both sides queued up front and driven by a
  // thread each; checks content and headers.
  void exchange(const std::vector<size_t>& sizes) {
    const size_t n = sizes.size();
    std::vector<uint8_t> src[2][64], dst[2][64];
    ASSERT_LE(n, 64u);
    std::vector<TransferRequest> sreq[2], rreq[2];
    for (int r = 0; r < 2; ++r) {
      sreq[r].resize(n);
      rreq[r].resize(n);
      for (size_t i = 0; i < n; ++i) {
        src[r][i] = randomBytes(sizes[i], static_cast<uint32_t>(r * 1000 + i * 31 + sizes[i]));
        dst[r][i].assign(sizes[i] + 16, 0xEE);
      }
    }
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < n; ++i) {
        conn_[r]->isend(makeHeader(kHash, r, 1, uint32_t(i), sizes[i]), src[r][i].data(),
                        &sreq[r][i]);
        conn_[r]->irecv(makeHeader(kHash, 1 - r, 1, uint32_t(i), 0), dst[r][i].data(),
                        dst[r][i].size(), &rreq[r][i]);
      }
    std::exception_ptr err[2];
    bool ok[2] = {false, false};
    auto drive = [&](int r) {
      try {
        ok[r] = driveUntil(*conn_[r], [&] {
          for (size_t i = 0; i < n; ++i)
            if (!sreq[r][i].done || !rreq[r][i].done) return false;
          return true;
        });
      } catch (...) {
        err[r] = std::current_exception();
      }
    };
    std::thread t0(drive, 0), t1(drive, 1);
    t0.join();
    t1.join();
    for (auto& e : err)
      if (e) std::rethrow_exception(e);
    ASSERT_TRUE(ok[0] && ok[1]) << "the exchange did not finish in " << kTimeoutMs << " ms";
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < n; ++i) {
        const int from = 1 - r;
        EXPECT_EQ(sreq[from][i].bytes, sizes[i]);
        ASSERT_EQ(rreq[r][i].bytes, sizes[i]) << "message " << i;
        EXPECT_EQ(rreq[r][i].header.srcRank, from);
        EXPECT_EQ(rreq[r][i].header.step, i);
        EXPECT_EQ(rreq[r][i].header.payloadBytes, sizes[i]);
        EXPECT_TRUE(std::equal(src[from][i].begin(), src[from][i].end(), dst[r][i].begin()))
            << "payload of message " << i << " (" << sizes[i] << " bytes) to rank " << r;
        EXPECT_EQ(dst[r][i][sizes[i]], 0xEE) << "wrote past the payload of message " << i;
      }
  }

  std::unique_ptr<FakeFabric> fabric_;
  std::unique_ptr<Connection> conn_[2];
};

const std::vector<size_t> kMixedSizes = {0,     1,     7,       72, 1000, 4095,   4096, 4097,
                                         10000, 65536, 1 << 20, 3,  0,    123457, 9};

TEST_F(IbConnectionTest, MessagesOfEverySizeBothWays) {
  FakeFabric::Options o;
  connect(o);
  exchange(kMixedSizes);
  exchange({5, 50000, 0});  // the connection keeps working after a first batch
}

TEST_F(IbConnectionTest, OddRingSizesAndFewWritesInFlight) {
  FakeFabric::Options o;
  o.ringBytes[0] = 1000;  // writes of 250 bytes: headers split across writes and the wrap
  o.ringBytes[1] = 4099;
  o.seed = 7;
  o.recvDepth = 3 * 2;
  o.sendDepth = 3;
  connect(o, /*maxWrites=*/2, /*sendDepth=*/3);
  exchange(kMixedSizes);
  EXPECT_LE(fabric_->maxRecvsInUse(), 2u * 2) << "more unpolled messages than the proof allows";
}

TEST_F(IbConnectionTest, ManySmallMessagesWithOneWriteInFlight) {
  FakeFabric::Options o;
  o.ringBytes[0] = o.ringBytes[1] = 512;
  o.seed = 3;
  o.recvDepth = 3;
  o.sendDepth = 2;
  o.maxDelayUs = 20;
  connect(o, /*maxWrites=*/1, /*sendDepth=*/2);
  std::vector<size_t> sizes(64);
  for (size_t i = 0; i < sizes.size(); ++i) sizes[i] = i % 5 == 0 ? 700 : i % 3;
  exchange(sizes);
}

TEST_F(IbConnectionTest, HeaderMismatchFailsBeforeAnyPayloadByte) {
  connect(FakeFabric::Options{});
  std::vector<uint8_t> src = randomBytes(3000, 1), dst(3000, 0xEE);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(kHash, 0, /*seq=*/1, 0, src.size()), src.data(), &s);
  conn_[1]->irecv(makeHeader(kHash, 0, /*seq=*/2, 0, 0), dst.data(), dst.size(), &r);
  std::atomic<bool> failed{false};
  std::thread sender([&] { driveUntil(*conn_[0], [&] { return s.done || failed; }); });
  try {
    driveUntil(*conn_[1], [&] { return r.done; });
    ADD_FAILURE() << "a header with another sequence number was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  failed = true;
  sender.join();
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t b) { return b == 0xEE; }))
      << "payload bytes were copied before the header was checked";
  // The error sticks.
  EXPECT_THROW(conn_[1]->progress(), Error);
}

TEST_F(IbConnectionTest, PayloadLargerThanTheBufferFailsBeforeCopying) {
  connect(FakeFabric::Options{});
  std::vector<uint8_t> src = randomBytes(5000, 2), dst(4000, 0xEE);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(kHash, 0, 1, 0, src.size()), src.data(), &s);
  conn_[1]->irecv(makeHeader(kHash, 0, 1, 0, 0), dst.data(), dst.size(), &r);
  std::atomic<bool> failed{false};
  std::thread sender([&] { driveUntil(*conn_[0], [&] { return s.done || failed; }); });
  EXPECT_THROW(driveUntil(*conn_[1], [&] { return r.done; }), Error);
  failed = true;
  sender.join();
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t b) { return b == 0xEE; }));
}

TEST_F(IbConnectionTest, PeerThatGoesAwayFailsAPendingReceiveNamingIt) {
  connect(FakeFabric::Options{});
  std::vector<uint8_t> dst(100);
  TransferRequest r;
  conn_[1]->irecv(makeHeader(kHash, 0, 1, 0, 0), dst.data(), dst.size(), &r);
  EXPECT_FALSE(conn_[1]->progress());
  const auto t0 = std::chrono::steady_clock::now();
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    conn_[0].reset();  // rank 0's process "exits": its end of the liveness socket closes
  });
  try {
    driveUntil(
        *conn_[1], [&] { return r.done; }, 10000);
    ADD_FAILURE() << "the receive did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemote) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  killer.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0)
      << "the executor slept through the peer's exit";
}

TEST_F(IbConnectionTest, IdleConnectionToAClosedPeerIsNotAnError) {
  connect(FakeFabric::Options{});
  exchange({10, 20});
  conn_[0].reset();
  // Late completions (rank 1's last credit) may still move; nothing may throw.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < until) conn_[1]->progress();
  EXPECT_FALSE(conn_[1]->progress());
  WaitSources ws;
  conn_[1]->addWaitSources(ws);
  EXPECT_EQ(ws.fds.size(), 1u) << "only the completion channel: the closed socket would spin";
}

TEST_F(IbConnectionTest, DataSentBeforeThePeerLeftIsStillReceived) {
  connect(FakeFabric::Options{});
  std::vector<uint8_t> src = randomBytes(20000, 5), dst(20000);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(kHash, 0, 1, 0, src.size()), src.data(), &s);
  // With nobody receiving yet, the ring (4 KiB) takes part of it; the sender waits for credits.
  conn_[1]->irecv(makeHeader(kHash, 0, 1, 0, 0), dst.data(), dst.size(), &r);
  std::thread sender([&] {
    driveUntil(*conn_[0], [&] { return s.done; });
    conn_[0].reset();  // finished, then gone
  });
  driveUntil(*conn_[1], [&] { return r.done; });
  sender.join();
  ASSERT_TRUE(r.done);
  EXPECT_EQ(dst, src);
}

TEST_F(IbConnectionTest, ErrorCompletionFailsNamingThePeer) {
  connect(FakeFabric::Options{});
  fabric_->breakLink();
  std::vector<uint8_t> src(100, 1);
  TransferRequest s;
  conn_[0]->isend(makeHeader(kHash, 0, 1, 0, src.size()), src.data(), &s);
  try {
    driveUntil(
        *conn_[0], [&] { return s.done; }, 10000);
    ADD_FAILURE() << "the send did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemote) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("retry counter exceeded"), std::string::npos) << m;
  }
  EXPECT_FALSE(s.done);
}

TEST_F(IbConnectionTest, ImmediateThatDoesNotFitIsAProtocolError) {
  FakeFabric::Options o;
  connect(o);
  fabric_->injectArrival(1, uint32_t(o.ringBytes[1] + 1));
  std::vector<uint8_t> dst(10);
  TransferRequest r;
  conn_[1]->irecv(makeHeader(kHash, 0, 1, 0, 0), dst.data(), dst.size(), &r);
  try {
    conn_[1]->progress();
    ADD_FAILURE() << "a write larger than the ring was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemote);
    EXPECT_NE(std::string(e.what()).find("ring protocol"), std::string::npos) << e.what();
  }
}

TEST_F(IbConnectionTest, ShutdownFromAnotherThreadWhileProgressRuns) {
  connect(FakeFabric::Options{});
  // Rank 0 keeps sending while another thread aborts it.
  std::vector<uint8_t> src = randomBytes(1 << 20, 9);
  std::vector<TransferRequest> sreq(16);
  for (size_t i = 0; i < sreq.size(); ++i)
    conn_[0]->isend(makeHeader(kHash, 0, 1, uint32_t(i), src.size()), src.data(), &sreq[i]);
  std::atomic<bool> stop{false};
  std::exception_ptr err;
  std::thread driver([&] {
    try {
      driveUntil(
          *conn_[0], [&] { return stop.load(); }, 10000);
    } catch (...) {
      err = std::current_exception();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  conn_[0]->shutdown();
  conn_[0]->shutdown();  // idempotent
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  stop = true;
  driver.join();
  EXPECT_FALSE(err) << "progress() after a local shutdown must not throw";
  EXPECT_FALSE(conn_[0]->progress());
  // The peer, waiting for a message that will never come, fails naming rank 0.
  std::vector<uint8_t> big(1 << 20);
  std::vector<TransferRequest> rreq(sreq.size());
  for (size_t i = 0; i < rreq.size(); ++i)
    conn_[1]->irecv(makeHeader(kHash, 0, 1, uint32_t(i), 0), big.data(), big.size(), &rreq[i]);
  try {
    driveUntil(
        *conn_[1], [&] { return rreq.back().done; }, 10000);
    ADD_FAILURE() << "the peer's receive did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemote) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
}

TEST_F(IbConnectionTest, SleepsInsteadOfSpinningWhenIdle) {
  connect(FakeFabric::Options{});
  std::vector<uint8_t> dst(100);
  TransferRequest r;
  conn_[1]->irecv(makeHeader(kHash, 0, 1, 0, 0), dst.data(), dst.size(), &r);
  uint64_t calls = 0;
  EXPECT_FALSE(driveUntil(
      *conn_[1], [&] { return r.done; }, 300, &calls));
  EXPECT_LT(calls, 30u) << "progress() ran " << calls << " times in 300 ms with nothing to do";
  // And wakes for the message when it comes: the completion channel's event ends the sleep,
  // not the (long) wait timeout.
  std::vector<uint8_t> src(100, 7);
  TransferRequest s;
  conn_[0]->isend(makeHeader(kHash, 0, 1, 0, src.size()), src.data(), &s);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // rank 1 is asleep by then
    driveUntil(*conn_[0], [&] { return s.done; });
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(driveUntil(
      *conn_[1], [&] { return r.done; }, kTimeoutMs, nullptr, 5000));
  sender.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace squeeze
