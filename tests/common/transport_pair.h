// What the tests that drive one transport's connection pair directly share (shm in
// tests/unit/shm_transport_test.cc, cuda_ipc in tests/gpu/cuda_ipc_test.cc): a PeerLink over a
// socketpair, unique communicator hashes, the /dev/shm entries of a communicator, headers and
// random payloads, and the check that a call fails with a given error.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/strings.h"
#include "base/wire.h"
#include "transports/shm/segment.h"
#include "transports/transport.h"

namespace squeeze::transport_test {

// Runs call, which must throw Error with `code`; returns its message. When it does not throw,
// records a failure saying `noError` and returns "".
template <class Call>
std::string expectError(ErrorCode code, Call&& call, const std::string& noError) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << noError;
  return "";
}

// A PeerLink over one end of a socketpair; every wait is bounded by kLinkTimeoutMs.
class SocketPairLink : public PeerLink {
 public:
  static constexpr int kLinkTimeoutMs = 60000;

  // watchFd: this side's end of the pair's liveness socket, handed out by openDataSocket
  // (closed here if never handed out).
  explicit SocketPairLink(int fd, int watchFd = -1) : fd_(fd), watchFd_(watchFd) {}
  ~SocketPairLink() override {
    ::close(fd_);
    if (watchFd_ >= 0) ::close(watchFd_);
  }

  void sendBytes(const void* data, size_t n) override {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      waitFor(POLLOUT);
      ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (k < 0) throw SysError("send", errno);
      p += k;
      n -= static_cast<size_t>(k);
    }
  }
  void recvBytes(void* data, size_t n) override {
    auto* p = static_cast<uint8_t*>(data);
    while (n > 0) {
      waitFor(POLLIN);
      ssize_t k = ::recv(fd_, p, n, MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (k < 0) throw SysError("recv", errno);
      if (k == 0) raise(ErrorCode::kRemote, "test link closed");
      p += k;
      n -= static_cast<size_t>(k);
    }
  }
  // The same-host transports open one data socket, index 0 (liveness, and cuda_ipc's wake-ups).
  Socket openDataSocket(uint16_t index) override {
    if (index != 0 || watchFd_ < 0)
      raise(ErrorCode::kInternal, "the transport under test opens one data socket (its liveness "
            "watch), index 0; asked for index ", index);
    return Socket(std::exchange(watchFd_, -1));
  }

 private:
  void waitFor(short events) {
    pollfd p{fd_, events, 0};
    int rc = ::poll(&p, 1, kLinkTimeoutMs);
    if (rc == 0) raise(ErrorCode::kTimeout, "test link timed out");
  }
  int fd_;
  int watchFd_;
};

// A communicator hash no other test of this process (or another process) uses.
inline uint64_t uniqueHash() {
  static std::atomic<uint64_t> counter{0};
  return (uint64_t(::getpid()) << 32) ^ 0x5a5a000000000000ull ^ ++counter;
}

// The /dev/shm entries of one communicator.
inline std::vector<std::string> shmFiles(uint64_t commHash) {
  const std::string prefix = segmentPrefix(commHash).substr(1);  // without the leading '/'
  std::vector<std::string> out;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

inline WireHeader makeHeader(uint64_t commHash, int src, uint64_t seq, uint32_t step,
                             size_t bytes) {
  WireHeader h;
  h.commHash = commHash;
  h.srcRank = src;
  h.seq = seq;
  h.step = step;
  h.count = 1000;
  h.offset = step * 7;
  h.payloadBytes = bytes;
  return h;
}

inline std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

// Sets up the pair: both ranks' connect() at once, each on its own thread (setup is a
// conversation between them), over links[r]; conn[r] gets rank r's connection. Rethrows the first
// error either side raised.
template <class Config>  // TransportSettings or what derives from it (CommConfig)
void connectPair(std::unique_ptr<Transport> (&transport)[2], const PeerInfo (&info)[2],
                 uint64_t hash, const Config (&config)[2], PeerLink* const (&links)[2],
                 std::unique_ptr<Connection> (&conn)[2]) {
  std::exception_ptr err[2];
  auto run = [&](int r) {
    try {
      conn[r] =
          transport[r]->connect(LinkSetup{r, info[r], info[1 - r], hash, config[r], *links[r]});
    } catch (...) {
      err[r] = std::current_exception();
    }
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
}

// Ends the pair the way a communicator does (connections first, then the transports) and checks
// that nothing of communicator `hash` is left in /dev/shm (0: the pair was never set up).
inline void closePair(std::unique_ptr<Transport> (&transport)[2],
                      std::unique_ptr<Connection> (&conn)[2], uint64_t hash) {
  conn[0].reset();
  conn[1].reset();
  transport[0].reset();
  transport[1].reset();
  if (hash) {
    EXPECT_TRUE(shmFiles(hash).empty()) << "left in /dev/shm: " << shmFiles(hash)[0];
  }
}

}  // namespace squeeze::transport_test
