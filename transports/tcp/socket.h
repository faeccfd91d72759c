// Sockets for the bootstrap and the tcp transport: addresses, interface choice
// (SQZ_SOCKET_IFNAME), and a non-blocking RAII Socket whose blocking helpers all take a deadline,
// so no wait here can outlive SQZ_TIMEOUT_MS.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <optional>
#include <string>

#include "base/fd.h"

namespace squeeze {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadlineAfterMs(int64_t ms) { return Clock::now() + std::chrono::milliseconds(ms); }
// Milliseconds left until d, clamped to [0, INT_MAX].
int remainingMs(Deadline d);

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  std::string toString() const;  // "127.0.0.1:5000", "[::1]:5000"
  uint16_t port() const;
  void setPort(uint16_t port);
  bool isLoopback() const;
  // "host:port" or "[v6]:port"; host may be a name. Returns nullopt and sets *error otherwise.
  static std::optional<SockAddr> parse(const std::string& hostPort, std::string* error);
};

// The address to bind for this process per the SQZ_SOCKET_IFNAME rules: spec is a comma list of
// interface name prefixes ("eth,ib"), "^" excludes the listed ones, "=" matches names exactly;
// empty means the first non-loopback interface that is up, else loopback. IPv4 is preferred.
// Throws Error(kSystem) naming the spec when nothing matches.
SockAddr chooseInterfaceAddress(const std::string& spec);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}

  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.get() >= 0; }
  void close() { fd_.reset(); }
  // Makes both directions fail for the peer now (it sees EOF), without freeing the fd.
  void shutdownBoth();

  // Binds and listens; port 0 picks an ephemeral port (read it back with localAddr()).
  static Socket listenOn(const SockAddr& addr, int backlog = 1024);
  // Connects, retrying refused connections until the deadline (the peer may not listen yet).
  static Socket connectTo(const SockAddr& addr, Deadline deadline, const std::string& what);
  // Accepts one connection, or returns nullopt when the deadline passes first.
  std::optional<Socket> acceptOne(Deadline deadline);

  SockAddr localAddr() const;
  SockAddr peerAddr() const;
  // Sets the TCP congestion control (TCP_CONGESTION). Returns the errno when the kernel refuses
  // (the algorithm is not available, or not allowed without CAP_NET_ADMIN), 0 on success.
  int setCongestion(const std::string& name);
  // Sets SO_SNDBUF (the kernel doubles it, and caps it at net.core.wmem_max). Returns the errno
  // when the kernel refuses, 0 on success.
  int setSendBuffer(size_t bytes);

  // Blocking in effect (polls the non-blocking fd) until done or the deadline; `what` names the
  // operation in the error. recvAll throws Error(kRemote) if the peer closes first.
  void sendAll(const void* data, size_t n, Deadline deadline, const std::string& what);
  void recvAll(void* data, size_t n, Deadline deadline, const std::string& what);

  // Non-blocking I/O for the tcp transport: bytes moved, 0 when it would block. Throws on error;
  // readSome throws Error(kRemote) on EOF.
  size_t writeSome(const iovec* iov, int iovcnt, const std::string& what);
  size_t readSome(void* data, size_t n, const std::string& what);

 private:
  Fd fd_;  // move-only: so is the Socket
};

// Waits until fd is readable (events=POLLIN) or writable (POLLOUT), or the deadline.
// Returns false on timeout.
bool pollFor(int fd, short events, Deadline deadline);

}  // namespace squeeze
