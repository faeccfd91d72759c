// The cuda_ipc transport driven directly, as tests/unit/shm_transport_test.cc drives shm: two
// ranks as threads of one process (the ring passed by address; one GPU, or two when there are
// two) and as two processes (IPC handles; the peer is this binary run again, because a forked
// child cannot use CUDA once the parent did). Messages of 0, 1, 4095 and ring + 3 bytes, many
// in flight across ring wraps, from and into device, pinned and ordinary host memory; header
// checks; shutdown, destruction and death of the peer; the no-GPU error; nothing left in
// /dev/shm. main() is gpu_main.cc: without a GPU the binary exits 77 (skipped).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/strings.h"
#include "core/config.h"
#include "device/cuda/runtime.h"
#include "tests/common/transport_pair.h"
#include "transports/cuda_ipc/cuda_ipc_transport.h"

extern char** environ;

namespace squeeze {
namespace {

constexpr int kTimeoutMs = 60000;
constexpr size_t kSmallRing = 64 << 10;
// Set in the environment of the peer process of CudaIpcTwoProcesses: "linkFd:watchFd:hash:pid".
constexpr const char* kChildEnv = "SQZ_CUDA_IPC_TEST_PEER";

using transport_test::expectError;
using transport_test::makeHeader;
using transport_test::randomBytes;
using transport_test::shmFiles;
using transport_test::SocketPairLink;
using transport_test::uniqueHash;

// Drives one connection until done() or the deadline: progress, and sleep on its wait sources
// when nothing moved. Returns false on timeout.
bool driveUntil(Connection& c, const std::function<bool()>& done, int timeoutMs = kTimeoutMs) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (!c.progress()) {
      WaitSources ws;
      c.addWaitSources(ws);
      waitForActivity(ws, 0, 20);
    }
  }
  return true;
}

enum class Mem { kDevice, kPinned, kHost };

const char* memName(Mem m) {
  return m == Mem::kDevice ? "device" : m == Mem::kPinned ? "pinned" : "host";
}

// A buffer in device memory (on a given GPU), pinned host memory or ordinary host memory.
class TestBuffer {
 public:
  TestBuffer(Mem mem, size_t bytes, int device) : mem_(mem), bytes_(bytes) {
    cuda::DeviceGuard guard(device);
    if (mem == Mem::kDevice) dev_ = cuda::DeviceBuffer(bytes);
    if (mem == Mem::kPinned) pinned_ = cuda::PinnedBuffer(bytes);
    if (mem == Mem::kHost) host_.resize(bytes);
  }
  void* data() {
    if (bytes_ == 0) return nullptr;
    return mem_ == Mem::kDevice   ? dev_.data()
           : mem_ == Mem::kPinned ? pinned_.data()
                                  : host_.data();
  }
  size_t size() const { return bytes_; }
  // Writes v at the start and `fill` everywhere after it.
  void write(const std::vector<uint8_t>& v, uint8_t fill = 0xEE) {
    std::vector<uint8_t> all(bytes_, fill);
    if (!v.empty()) std::memcpy(all.data(), v.data(), std::min(v.size(), bytes_));
    if (bytes_ > 0)
      cuda::check(cudaMemcpy(data(), all.data(), bytes_, cudaMemcpyDefault), "test upload");
  }
  std::vector<uint8_t> read() {
    std::vector<uint8_t> out(bytes_);
    if (bytes_ > 0)
      cuda::check(cudaMemcpy(out.data(), data(), bytes_, cudaMemcpyDefault), "test download");
    return out;
  }

 private:
  Mem mem_;
  size_t bytes_;
  cuda::DeviceBuffer dev_;
  cuda::PinnedBuffer pinned_;
  std::vector<uint8_t> host_;
};

// Posts every send and receive of `sizes` on `from` and `to`, drives the two connections (the
// sender from a thread of its own), and checks sizes, headers, content and that nothing was
// written past a payload.
void exchange(Connection& from, int fromRank, int fromDevice, Connection& to, int toDevice,
              uint64_t hash, const std::vector<size_t>& sizes, Mem srcMem, Mem dstMem,
              uint64_t seq = 1) {
  SCOPED_TRACE(strCat(memName(srcMem), " -> ", memName(dstMem)));
  const size_t n = sizes.size();
  std::vector<std::vector<uint8_t>> expect(n);
  std::vector<std::unique_ptr<TestBuffer>> src(n), dst(n);
  std::vector<TransferRequest> sreq(n), rreq(n);
  for (size_t i = 0; i < n; ++i) {
    expect[i] = randomBytes(sizes[i], static_cast<uint32_t>(i * 31 + sizes[i] + seq));
    src[i] = std::make_unique<TestBuffer>(srcMem, sizes[i], fromDevice);
    src[i]->write(expect[i]);
    dst[i] = std::make_unique<TestBuffer>(dstMem, sizes[i] + 16, toDevice);
    dst[i]->write({}, 0xEE);
  }
  for (size_t i = 0; i < n; ++i) {
    from.isend(makeHeader(hash, fromRank, seq, uint32_t(i), sizes[i]), src[i]->data(), &sreq[i]);
    to.irecv(makeHeader(hash, fromRank, seq, uint32_t(i), 0), dst[i]->data(), dst[i]->size(),
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
      sentOk = driveUntil(from, all(sreq));
    } catch (...) {
      err = std::current_exception();
    }
  });
  bool recvOk = driveUntil(to, all(rreq));
  sender.join();
  if (err) std::rethrow_exception(err);
  ASSERT_TRUE(sentOk && recvOk) << "timed out";
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(sreq[i].bytes, sizes[i]);
    EXPECT_EQ(rreq[i].bytes, sizes[i]);
    EXPECT_EQ(rreq[i].header.payloadBytes, sizes[i]);
    EXPECT_EQ(rreq[i].header.step, i);
    EXPECT_EQ(rreq[i].header.srcRank, fromRank);
    const std::vector<uint8_t> got = dst[i]->read();
    ASSERT_TRUE(sizes[i] == 0 || std::memcmp(got.data(), expect[i].data(), sizes[i]) == 0)
        << "message " << i << " of " << sizes[i] << " bytes";
    EXPECT_EQ(got[sizes[i]], 0xEE) << "wrote past the payload of message " << i;
  }
}

// Two ranks as threads of this process. The parameter picks rank 1's GPU: 0 (both on one GPU)
// or 1 (two GPUs; skipped when there is one).
class CudaIpcTransportTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (GetParam() >= cuda::deviceCount())
      GTEST_SKIP() << "needs " << GetParam() + 1 << " GPUs, " << cuda::deviceCount() << " visible";
  }

  int device(int rank) const { return rank == 0 ? 0 : GetParam(); }

  void connectPair(size_t ringBytes, int device1 = -2) {
    hash_ = uniqueHash();
    for (int r = 0; r < 2; ++r) {
      config_[r].cudaIpcBufferBytes = ringBytes;
      config_[r].device = device(r);
      info_[r].rank = r;
      info_[r].hostId = "testhost";
      info_[r].pid = ::getpid();
    }
    if (device1 != -2) config_[1].device = device1;
    for (int r = 0; r < 2; ++r) {
      transport_[r] = createCudaIpcTransport(TransportContext{r, 2, hash_, config_[r]});
      ASSERT_STREQ(transport_[r]->name(), "cuda_ipc");
    }
    int sv[2], wv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, wv), 0);
    watch0_ = ::dup(wv[0]);  // lets a test end rank 0's "process" without closing its rings
    SocketPairLink link0(sv[0], wv[0]), link1(sv[1], wv[1]);
    PeerLink* const links[2] = {&link0, &link1};
    transport_test::connectPair(transport_, info_, hash_, config_, links, conn_);
    ASSERT_TRUE(conn_[0] && conn_[1]);
    EXPECT_STREQ(conn_[0]->transportName(), "cuda_ipc");
    EXPECT_TRUE(conn_[0]->readsDeviceMemory());
  }

  void TearDown() override {
    if (watch0_ >= 0) ::close(watch0_);
    transport_test::closePair(transport_, conn_, hash_);
  }

  void send(int from, const std::vector<size_t>& sizes, Mem srcMem, Mem dstMem, uint64_t seq = 1) {
    exchange(*conn_[from], from, device(from), *conn_[1 - from], device(1 - from), hash_, sizes,
             srcMem, dstMem, seq);
  }

  CommConfig config_[2];
  uint64_t hash_ = 0;
  PeerInfo info_[2];
  std::unique_ptr<Transport> transport_[2];
  std::unique_ptr<Connection> conn_[2];
  int watch0_ = -1;  // a duplicate of rank 0's end of the liveness socket
};

INSTANTIATE_TEST_SUITE_P(Gpus, CudaIpcTransportTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 0 ? std::string("OneGpu") : std::string("TwoGpus");
                         });

TEST_P(CudaIpcTransportTest, CanConnectOnlyOnTheSameHostWithAGpu) {
  connectPair(kSmallRing);
  PeerInfo other = info_[1];
  EXPECT_TRUE(transport_[0]->canConnect(info_[0], other));
  other.hostId = "elsewhere";
  EXPECT_FALSE(transport_[0]->canConnect(info_[0], other));
  CommConfig noGpu;
  noGpu.device = -1;
  auto t = createCudaIpcTransport(TransportContext{0, 2, uniqueHash(), noGpu});
  EXPECT_FALSE(t->canConnect(info_[0], info_[1]));
}

TEST_P(CudaIpcTransportTest, NamesAreUnlinkedOnceConnected) {
  connectPair(kSmallRing);
  EXPECT_TRUE(shmFiles(hash_).empty()) << "still in /dev/shm: " << shmFiles(hash_)[0];
}

TEST_P(CudaIpcTransportTest, WaitSourcesAreTheLivenessSocket) {
  connectPair(kSmallRing);
  WaitSources ws;
  conn_[0]->addWaitSources(ws);
  ASSERT_EQ(ws.fds.size(), 1u) << "an idle connection sleeps on its socket alone";
  EXPECT_EQ(ws.doorbell, nullptr);
}

TEST_P(CudaIpcTransportTest, SizesAroundTheRingDeviceToDevice) {
  const size_t ring = 8 << 20;  // the default SQZ_CUDA_IPC_BUFFER_BYTES
  connectPair(ring);
  send(0, {0, 1, 4095, ring + 3}, Mem::kDevice, Mem::kDevice);
  send(1, {ring + 3, 4095, 1, 0}, Mem::kDevice, Mem::kDevice, 2);
}

TEST_P(CudaIpcTransportTest, EveryKindOfMemoryBothWays) {
  connectPair(kSmallRing);
  const std::vector<size_t> sizes = {0, 1, 4095, kSmallRing + 3};
  const Mem kinds[] = {Mem::kDevice, Mem::kPinned, Mem::kHost};
  uint64_t seq = 1;
  for (Mem s : kinds)
    for (Mem d : kinds) {
      send(0, sizes, s, d, seq++);
      send(1, sizes, s, d, seq++);
    }
}

TEST_P(CudaIpcTransportTest, ManyInFlightAcrossWrapsWithOddRingSize) {
  connectPair(kSmallRing + 40);  // not a power of two: pieces straddle the wrap
  std::vector<size_t> sizes;
  for (size_t s : {0, 1, 71, 72, 73, 4095, 4096, 65536 + 3, 200000, 7, 0, 300001})
    sizes.push_back(s);
  for (int i = 0; i < 100; ++i) sizes.push_back((i * 7919) % 5000);  // > the header slots
  send(0, sizes, Mem::kDevice, Mem::kDevice);
  send(1, sizes, Mem::kHost, Mem::kDevice, 2);
}

TEST_P(CudaIpcTransportTest, LargeStreamsThroughSmallRing) {
  connectPair(kSmallRing);
  send(0, {20 << 20}, Mem::kDevice, Mem::kDevice);
  send(1, {(20 << 20) + 13}, Mem::kDevice, Mem::kPinned, 2);
}

TEST_P(CudaIpcTransportTest, BothDirectionsAtOnceSingleThread) {
  connectPair(kSmallRing);
  const size_t n = 3 << 20;
  auto a = randomBytes(n, 1), b = randomBytes(n, 2);
  TestBuffer sa(Mem::kDevice, n, device(0)), sb(Mem::kDevice, n, device(1));
  TestBuffer ra(Mem::kDevice, n, device(1)), rb(Mem::kDevice, n, device(0));
  sa.write(a);
  sb.write(b);
  TransferRequest s0, s1, r0, r1;
  conn_[0]->isend(makeHeader(hash_, 0, 9, 1, n), sa.data(), &s0);
  conn_[1]->isend(makeHeader(hash_, 1, 9, 1, n), sb.data(), &s1);
  conn_[0]->irecv(makeHeader(hash_, 1, 9, 1, 0), rb.data(), n, &r0);
  conn_[1]->irecv(makeHeader(hash_, 0, 9, 1, 0), ra.data(), n, &r1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(s0.done && s1.done && r0.done && r1.done) &&
         std::chrono::steady_clock::now() < deadline) {
    conn_[0]->progress();
    conn_[1]->progress();
  }
  ASSERT_TRUE(s0.done && s1.done && r0.done && r1.done);
  EXPECT_EQ(ra.read(), a);
  EXPECT_EQ(rb.read(), b);
}

TEST_P(CudaIpcTransportTest, HeaderMismatchThrowsBeforeAnyPayloadByte) {
  connectPair(kSmallRing);
  TestBuffer data(Mem::kDevice, 1000, device(0)), buf(Mem::kDevice, 1000, device(1));
  data.write(std::vector<uint8_t>(1000, 1));
  buf.write({}, 0xEE);
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, /*seq=*/5, 0, 1000), data.data(), &s);
  conn_[1]->irecv(makeHeader(hash_, 0, /*seq=*/6, 0, 0), buf.data(), buf.size(), &r);
  ASSERT_TRUE(driveUntil(*conn_[0], [&] { return s.done; }));
  expectError(ErrorCode::kInvalidUsage, [&] { driveUntil(*conn_[1], [&] { return r.done; }); },
              "no error for a header with another sequence number");
  EXPECT_FALSE(r.done);
  EXPECT_EQ(buf.read(), std::vector<uint8_t>(1000, 0xEE)) << "payload copied before the check";
  EXPECT_THROW(conn_[1]->progress(), Error);  // the connection stays failed
}

TEST_P(CudaIpcTransportTest, PayloadLargerThanCapacityThrows) {
  connectPair(kSmallRing);
  TestBuffer data(Mem::kDevice, 1000, device(0)), buf(Mem::kDevice, 999, device(1));
  TransferRequest s, r;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, 1000), data.data(), &s);
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  ASSERT_TRUE(driveUntil(*conn_[0], [&] { return s.done; }));
  const std::string what =
      expectError(ErrorCode::kRemote, [&] { driveUntil(*conn_[1], [&] { return r.done; }); },
                  "no error for a payload larger than the buffer");
  EXPECT_NE(what.find("999"), std::string::npos) << what;
}

TEST_P(CudaIpcTransportTest, ShutdownMakesThePeerThrowRemoteAfterDrainingData) {
  connectPair(kSmallRing);
  auto bytes = randomBytes(5000, 3);
  TestBuffer data(Mem::kDevice, 5000, device(0)), buf(Mem::kDevice, 5000, device(1));
  data.write(bytes);
  std::vector<uint8_t> small(10);
  TransferRequest s, r, r2;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, 5000), data.data(), &s);
  ASSERT_TRUE(driveUntil(*conn_[0], [&] { return s.done; }));
  conn_[0]->shutdown();
  EXPECT_FALSE(conn_[0]->progress());  // the closed side just stops
  // What was sent before the shutdown still arrives.
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  ASSERT_TRUE(driveUntil(*conn_[1], [&] { return r.done; }));
  EXPECT_EQ(buf.read(), bytes);
  EXPECT_FALSE(conn_[1]->progress());  // nothing pending: no error yet
  conn_[1]->irecv(makeHeader(hash_, 0, 2, 0, 0), small.data(), small.size(), &r2);
  const std::string what = expectError(ErrorCode::kRemote, [&] { conn_[1]->progress(); },
                                       "no error after the peer closed");
  EXPECT_NE(what.find("rank 0 closed the CUDA IPC connection"), std::string::npos) << what;
}

TEST_P(CudaIpcTransportTest, ShutdownWakesASleepingPeer) {
  connectPair(kSmallRing);
  std::vector<uint8_t> buf(10);
  TransferRequest r;
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    conn_[0]->shutdown();
  });
  const auto start = std::chrono::steady_clock::now();
  ErrorCode code = ErrorCode::kInternal;
  try {
    while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
      if (conn_[1]->progress()) continue;
      WaitSources ws;
      conn_[1]->addWaitSources(ws);
      waitForActivity(ws, 0, 5000);
    }
  } catch (const Error& e) {
    code = e.code();
  }
  closer.join();
  EXPECT_EQ(code, ErrorCode::kRemote);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4))
      << "the liveness socket did not wake the waiting rank";
}

TEST_P(CudaIpcTransportTest, DestroyingAConnectionClosesIt) {
  connectPair(kSmallRing);
  // Fill the ring so the send stays pending, then the peer goes away.
  TestBuffer big(Mem::kDevice, 1 << 20, device(0));
  TransferRequest s;
  conn_[0]->isend(makeHeader(hash_, 0, 1, 0, big.size()), big.data(), &s);
  ASSERT_FALSE(driveUntil(
      *conn_[0], [&] { return s.done; }, 200));
  conn_[1].reset();
  EXPECT_THROW(driveUntil(
                   *conn_[0], [&] { return s.done; }, 5000),
               Error);
}

// A peer process that dies sets no 'closed' flag: its end of the liveness socket, closed by the
// kernel, is what tells. Simulated by shutting rank 0's end without touching its connection.
TEST_P(CudaIpcTransportTest, APeerProcessThatDiesIsNoticedWithoutItsClosedFlag) {
  connectPair(kSmallRing);
  std::vector<uint8_t> buf(10);
  TransferRequest r;
  conn_[1]->irecv(makeHeader(hash_, 0, 1, 0, 0), buf.data(), buf.size(), &r);
  EXPECT_FALSE(conn_[1]->progress());  // rank 0 is alive and silent: no error
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::shutdown(watch0_, SHUT_RDWR);
  });
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    while (std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
      if (conn_[1]->progress()) continue;
      WaitSources ws;
      conn_[1]->addWaitSources(ws);
      waitForActivity(ws, 0, 1000);
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

TEST_P(CudaIpcTransportTest, APeerWithoutAGpuIsInvalidUsageOnBothSides) {
  const std::string what =
      expectError(ErrorCode::kInvalidUsage, [&] { connectPair(kSmallRing, /*device1=*/-1); },
                  "connected to a rank without a GPU");
  EXPECT_NE(what.find("rank 1 has no GPU"), std::string::npos) << what;
  EXPECT_NE(what.find("SQZ_TRANSPORT=shm,tcp"), std::string::npos) << what;
}

TEST(CudaIpcTransportRegistry, IsRegisteredAsCudaIpc) {
  const auto& names = availableTransports();
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda_ipc"), names.end());
  CommConfig config;
  config.device = 0;
  auto t = createTransport("cuda_ipc", TransportContext{0, 1, uniqueHash(), config});
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name(), "cuda_ipc");
}

// ---- Two processes ----------------------------------------------------------------------------

// What the two processes send each other: rank 0 sends these from device memory; rank 1 checks
// them and sends them back from ordinary host memory into rank 0's device memory.
const std::vector<size_t>& twoProcessSizes() {
  static const std::vector<size_t> sizes = {0, 1, 4095, kSmallRing + 3, 3 << 20, 17, 0};
  return sizes;
}

uint32_t seedOf(size_t i) { return static_cast<uint32_t>(1000 + i); }

// Rank `rank` of the two-process pair, over already connected sockets. The caller checks the
// result with gtest assertions; the connection is returned so the caller controls its lifetime.
std::unique_ptr<Connection> connectAcross(int rank, int device, int linkFd, int watchFd,
                                          uint64_t hash, int pid0, int pid1, CommConfig& config,
                                          std::unique_ptr<Transport>& transport) {
  config.cudaIpcBufferBytes = kSmallRing;
  config.device = device;
  PeerInfo info[2];
  for (int r = 0; r < 2; ++r) {
    info[r].rank = r;
    info[r].hostId = "testhost";
    info[r].pid = r == 0 ? pid0 : pid1;
  }
  transport = createCudaIpcTransport(TransportContext{rank, 2, hash, config});
  SocketPairLink link(linkFd, watchFd);
  return transport->connect(LinkSetup{rank, info[rank], info[1 - rank], hash, config, link});
}

// Rank 1 when this binary runs as the peer process of CudaIpcTwoProcesses; skipped otherwise.
TEST(CudaIpcPeerProcess, Rank1) {
  const char* env = std::getenv(kChildEnv);
  if (!env) GTEST_SKIP() << "runs only as the peer process of CudaIpcTwoProcesses";
  int linkFd = -1, watchFd = -1, pid0 = 0;
  unsigned long long hash = 0;
  ASSERT_EQ(std::sscanf(env, "%d:%d:%llu:%d", &linkFd, &watchFd, &hash, &pid0), 4) << env;
  const int device = cuda::deviceCount() - 1;  // another GPU than rank 0's when there are two
  CommConfig config;
  std::unique_ptr<Transport> transport;
  auto conn = connectAcross(1, device, linkFd, watchFd, hash, pid0, ::getpid(), config, transport);
  const auto& sizes = twoProcessSizes();
  const size_t n = sizes.size();
  std::vector<std::unique_ptr<TestBuffer>> dst(n);
  std::vector<TransferRequest> rreq(n), sreq(n);
  for (size_t i = 0; i < n; ++i) {
    dst[i] = std::make_unique<TestBuffer>(Mem::kDevice, sizes[i] + 16, device);
    dst[i]->write({}, 0xEE);
    conn->irecv(makeHeader(hash, 0, 1, uint32_t(i), 0), dst[i]->data(), dst[i]->size(), &rreq[i]);
  }
  ASSERT_TRUE(driveUntil(*conn, [&] { return rreq.back().done; }));
  std::vector<std::vector<uint8_t>> back(n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(rreq[i].done);
    EXPECT_EQ(rreq[i].bytes, sizes[i]);
    const std::vector<uint8_t> got = dst[i]->read();
    ASSERT_TRUE(sizes[i] == 0 ||
                std::memcmp(got.data(), randomBytes(sizes[i], seedOf(i)).data(), sizes[i]) == 0)
        << "message " << i << " of " << sizes[i] << " bytes";
    EXPECT_EQ(got[sizes[i]], 0xEE) << "wrote past the payload of message " << i;
    back[i].assign(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(sizes[i]));
  }
  for (size_t i = 0; i < n; ++i)
    conn->isend(makeHeader(hash, 1, 2, uint32_t(i), sizes[i]), back[i].data(), &sreq[i]);
  ASSERT_TRUE(driveUntil(*conn, [&] { return sreq.back().done; }));
  // Wait until rank 0 has everything (it sends one last zero-byte message), then go.
  TransferRequest bye;
  conn->irecv(makeHeader(hash, 0, 3, 0, 0), nullptr, 0, &bye);
  ASSERT_TRUE(driveUntil(*conn, [&] { return bye.done; }));
}

TEST(CudaIpcTwoProcesses, DeviceAndHostMessagesBothWays) {
  if (std::getenv(kChildEnv)) GTEST_SKIP() << "this is the peer process";
  const uint64_t hash = uniqueHash();
  int sv[2], wv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, wv), 0);
  // The child's ends survive exec; the parent's stay close-on-exec.
  ASSERT_EQ(::fcntl(sv[1], F_SETFD, 0), 0);
  ASSERT_EQ(::fcntl(wv[1], F_SETFD, 0), 0);
  // Everything the child needs is built before fork(): after it, only exec.
  char exe[PATH_MAX] = {};
  ASSERT_GT(::readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  std::vector<std::string> envStrings;
  for (char** e = environ; *e; ++e) envStrings.emplace_back(*e);
  envStrings.push_back(strCat(kChildEnv, "=", sv[1], ":", wv[1], ":",
                              static_cast<unsigned long long>(hash), ":", ::getpid()));
  std::vector<char*> envp;
  for (auto& s : envStrings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = "cuda_ipc_test", arg1 = "--gtest_filter=CudaIpcPeerProcess.Rank1";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execve(exe, argv, envp.data());
    ::_exit(127);
  }
  ::close(sv[1]);
  ::close(wv[1]);

  CommConfig config;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Connection> conn;
  try {
    conn = connectAcross(0, 0, sv[0], wv[0], hash, ::getpid(), child, config, transport);
  } catch (const std::exception& e) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    FAIL() << "connect: " << e.what();
  }
  EXPECT_TRUE(shmFiles(hash).empty()) << "still in /dev/shm: " << shmFiles(hash)[0];
  const auto& sizes = twoProcessSizes();
  const size_t n = sizes.size();
  std::vector<std::unique_ptr<TestBuffer>> src(n), dst(n);
  std::vector<TransferRequest> sreq(n), rreq(n);
  for (size_t i = 0; i < n; ++i) {
    src[i] = std::make_unique<TestBuffer>(Mem::kDevice, sizes[i], 0);
    src[i]->write(randomBytes(sizes[i], seedOf(i)));
    dst[i] = std::make_unique<TestBuffer>(Mem::kDevice, sizes[i] + 16, 0);
    dst[i]->write({}, 0xEE);
    conn->isend(makeHeader(hash, 0, 1, uint32_t(i), sizes[i]), src[i]->data(), &sreq[i]);
    conn->irecv(makeHeader(hash, 1, 2, uint32_t(i), 0), dst[i]->data(), dst[i]->size(), &rreq[i]);
  }
  bool ok = false;
  try {
    ok = driveUntil(*conn, [&] { return sreq.back().done && rreq.back().done; });
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  EXPECT_TRUE(ok) << "timed out";
  TransferRequest bye;
  if (ok) {
    for (size_t i = 0; i < n; ++i) {
      const std::vector<uint8_t> got = dst[i]->read();
      EXPECT_TRUE(sizes[i] == 0 ||
                  std::memcmp(got.data(), randomBytes(sizes[i], seedOf(i)).data(), sizes[i]) == 0)
          << "echo of message " << i << " of " << sizes[i] << " bytes";
      EXPECT_EQ(got[sizes[i]], 0xEE) << "wrote past the payload of echo " << i;
    }
    conn->isend(makeHeader(hash, 0, 3, 0, 0), nullptr, &bye);
    EXPECT_TRUE(driveUntil(*conn, [&] { return bye.done; }));
  }
  // The child exits; a receive posted now must fail with kRemote, not hang.
  int status = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      ADD_FAILURE() << "the peer process did not exit";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the peer process failed (status " << status << "); its gtest output is above";
  std::vector<uint8_t> none(8);
  TransferRequest late;
  conn->irecv(makeHeader(hash, 1, 4, 0, 0), none.data(), none.size(), &late);
  try {
    driveUntil(
        *conn, [&] { return late.done; }, 5000);
    ADD_FAILURE() << "no error from a peer process that exited";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemote) << e.what();
  }
  conn.reset();
  transport.reset();
  EXPECT_TRUE(shmFiles(hash).empty());
}

}  // namespace
}  // namespace squeeze
