// AuthAcceptor against hostile clients on loopback: connections that never speak, speak one byte
// at a time, send garbage or prove the wrong secret must neither delay nor replace an honest
// client, and the number of unauthenticated connections held stays bounded.
#include "bootstrap/acceptor.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"

namespace squeeze {
namespace {

SockAddr loopbackAnyPort() {
  SockAddr a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  v4->sin_family = AF_INET;
  v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.len = sizeof(sockaddr_in);
  return a;
}

Secret secretOf(uint8_t fill) {
  Secret s;
  s.fill(fill);
  return s;
}

int openFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(AuthAcceptor, HostileClientsDoNotDelayAnHonestOne) {
  Socket listener = Socket::listenOn(loopbackAnyPort());
  const SockAddr addr = listener.localAddr();
  const Secret secret = secretOf(7);
  AuthAcceptor acceptor(listener, secret, "test listener");

  std::vector<Socket> silent;  // connected, never send a byte
  for (int i = 0; i < 20; ++i)
    silent.push_back(Socket::connectTo(addr, deadlineAfterMs(2000), "silent client"));
  Socket garbage = Socket::connectTo(addr, deadlineAfterMs(2000), "garbage client");
  std::vector<uint8_t> junk(4096, 0xff);
  garbage.sendAll(junk.data(), junk.size(), deadlineAfterMs(2000), "garbage");
  Socket trickle = Socket::connectTo(addr, deadlineAfterMs(2000), "one byte client");
  uint8_t one = 0x53;
  trickle.sendAll(&one, 1, deadlineAfterMs(2000), "one byte");

  std::atomic<bool> wrongDone{false};
  std::thread wrong([&] {
    Socket s = Socket::connectTo(addr, deadlineAfterMs(2000), "wrong secret client");
    EXPECT_THROW(authenticateAsClient(s, secretOf(9), Hello{1, 3, LinkPurpose::kData, 0},
                                      deadlineAfterMs(10000)),
                 Error);
    wrongDone = true;
  });
  std::thread honest([&] {
    Socket s = Socket::connectTo(addr, deadlineAfterMs(2000), "honest client");
    authenticateAsClient(s, secret, Hello{42, 5, LinkPurpose::kControl, 2},
                         deadlineAfterMs(10000));
  });

  const auto t0 = std::chrono::steady_clock::now();
  std::optional<AuthenticatedPeer> peer = acceptor.next(deadlineAfterMs(10000));
  const double took = secondsSince(t0);
  honest.join();
  // The wrong-secret client is refused (its connection closed) as the acceptor keeps going.
  for (int i = 0; i < 50 && !wrongDone; ++i)
    EXPECT_FALSE(acceptor.next(deadlineAfterMs(100)).has_value()) << "a wrong secret got in";
  EXPECT_TRUE(wrongDone) << "the wrong-secret client was neither accepted nor refused in 5 s";
  wrong.join();
  ASSERT_TRUE(peer.has_value()) << "the honest client was never accepted";
  EXPECT_EQ(peer->hello.commHash, 42u);
  EXPECT_EQ(peer->hello.rank, 5);
  EXPECT_EQ(peer->hello.purpose, LinkPurpose::kControl);
  EXPECT_EQ(peer->hello.index, 2);
  // A sequential acceptor would wait out each silent client's handshake cap (5 s each).
  EXPECT_LT(took, 0.5 * AuthAcceptor::kHandshakeCapMs / 1000.0)
      << "22 hostile connections delayed the honest one by " << took << " s";
}

TEST(AuthAcceptor, NothingButHostileClientsEndsAtTheDeadline) {
  Socket listener = Socket::listenOn(loopbackAnyPort());
  AuthAcceptor acceptor(listener, secretOf(1), "test listener");
  Socket silent = Socket::connectTo(listener.localAddr(), deadlineAfterMs(2000), "silent");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(acceptor.next(deadlineAfterMs(300)).has_value());
  const double took = secondsSince(t0);
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 3.0);
}

TEST(AuthAcceptor, HoldsAtMostMaxPendingConnections) {
  Socket listener = Socket::listenOn(loopbackAnyPort());
  AuthAcceptor acceptor(listener, secretOf(1), "test listener");
  const int before = openFds();
  std::vector<Socket> flood;
  const size_t n = AuthAcceptor::kMaxPending + 40;
  for (size_t i = 0; i < n; ++i)
    flood.push_back(Socket::connectTo(listener.localAddr(), deadlineAfterMs(2000), "flood"));
  EXPECT_FALSE(acceptor.next(deadlineAfterMs(300)).has_value());
  // Our n client sockets, plus what the acceptor still holds: at most kMaxPending.
  const int held = openFds() - before - static_cast<int>(n);
  EXPECT_LE(held, static_cast<int>(AuthAcceptor::kMaxPending)) << held << " accepted sockets held";
  EXPECT_GT(held, 0) << "the acceptor accepted nothing (is the flood reaching it?)";
}

}  // namespace
}  // namespace squeeze
