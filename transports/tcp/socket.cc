// Socket helpers: every fd is non-blocking and close-on-exec; waits are poll() with deadlines.
#include "transports/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "base/logging.h"
#include "base/strings.h"

namespace squeeze {

int remainingMs(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  if (left <= 0) return 0;
  return left > INT_MAX ? INT_MAX : static_cast<int>(left);
}

std::string SockAddr::toString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (storage.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return strCat(host, ":", ntohs(a->sin_port));
  }
  if (storage.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    return strCat("[", host, "]:", ntohs(a->sin6_port));
  }
  return "(no address)";
}

uint16_t SockAddr::port() const {
  if (storage.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (storage.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::setPort(uint16_t port) {
  if (storage.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  else if (storage.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

bool SockAddr::isLoopback() const {
  if (storage.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  if (storage.ss_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
  return false;
}

std::optional<SockAddr> SockAddr::parse(const std::string& hostPort, std::string* error) {
  std::string host, port;
  if (!hostPort.empty() && hostPort[0] == '[') {
    size_t close = hostPort.find(']');
    if (close == std::string::npos || close + 1 >= hostPort.size() || hostPort[close + 1] != ':') {
      *error = "expected [ipv6]:port";
      return std::nullopt;
    }
    host = hostPort.substr(1, close - 1);
    port = hostPort.substr(close + 2);
  } else {
    size_t colon = hostPort.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      *error = "expected host:port";
      return std::nullopt;
    }
    host = hostPort.substr(0, colon);
    port = hostPort.substr(colon + 1);
  }
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p <= 0 || p > 65535) {
    *error = strCat("port '", port, "' is not a number from 1 to 65535");
    return std::nullopt;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res) {
    *error = strCat("cannot resolve host '", host, "': ", gai_strerror(rc));
    return std::nullopt;
  }
  SockAddr out;
  std::memcpy(&out.storage, res->ai_addr, res->ai_addrlen);
  out.len = res->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

SockAddr chooseInterfaceAddress(const std::string& spec) {
  bool exclude = !spec.empty() && spec[0] == '^';
  std::string rest = exclude ? spec.substr(1) : spec;
  bool exact = !rest.empty() && rest[0] == '=';
  if (exact) rest = rest.substr(1);
  std::vector<std::string> names = rest.empty() ? std::vector<std::string>{} : split(rest, ',');

  auto matches = [&](const char* name) {
    if (names.empty()) return true;
    bool hit = false;
    for (const auto& n : names)
      if (exact ? n == name : std::strncmp(name, n.c_str(), n.size()) == 0) hit = true;
    return exclude ? !hit : hit;
  };

  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw SysError("getifaddrs", errno);
  std::optional<SockAddr> best, loopback;
  int bestRank = INT_MAX;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP)) continue;
    int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (fam == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr))
      continue;  // link-local needs a scope id; not worth it for a rendezvous address
    if (!matches(ifa->ifa_name)) continue;
    SockAddr a;
    a.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&a.storage, ifa->ifa_addr, a.len);
    bool isLo = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    // Explicit names may select loopback; the default prefers any other interface.
    int rankHere = (isLo && names.empty() ? 2 : 0) + (fam == AF_INET6 ? 1 : 0);
    if (isLo && names.empty()) {
      if (!loopback || (fam == AF_INET && loopback->storage.ss_family != AF_INET)) loopback = a;
      continue;
    }
    if (rankHere < bestRank) {
      best = a;
      bestRank = rankHere;
    }
  }
  freeifaddrs(list);
  if (best) return *best;
  if (loopback && names.empty()) return *loopback;
  raise(ErrorCode::kSystem, "no network interface matches SQZ_SOCKET_IFNAME='", spec,
        "'; list interfaces with 'ip -br addr' and set SQZ_SOCKET_IFNAME to one of them "
        "(e.g. SQZ_SOCKET_IFNAME=lo for one host).");
}

void Socket::shutdownBoth() {
  if (valid()) ::shutdown(fd_.get(), SHUT_RDWR);
}

namespace {

int newSocket(int family) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw SysError("socket()", errno);
  return fd;
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

int Socket::setCongestion(const std::string& name) {
  if (setsockopt(fd_.get(), IPPROTO_TCP, TCP_CONGESTION, name.data(), socklen_t(name.size())) == 0)
    return 0;
  return errno;
}

int Socket::setSendBuffer(size_t bytes) {
  int v = static_cast<int>(bytes);
  if (setsockopt(fd_.get(), SOL_SOCKET, SO_SNDBUF, &v, sizeof v) == 0) return 0;
  return errno;
}

bool pollFor(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, remainingMs(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throw SysError("poll()", errno);
  }
}

Socket Socket::listenOn(const SockAddr& addr, int backlog) {
  Socket s(newSocket(addr.storage.ss_family));
  int one = 1;
  setsockopt(s.fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.fd_.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0)
    throw SysError(strCat("bind(", addr.toString(), ")"), errno);
  if (::listen(s.fd_.get(), backlog) != 0) throw SysError("listen()", errno);
  return s;
}

Socket Socket::connectTo(const SockAddr& addr, Deadline deadline, const std::string& what) {
  int lastErr = 0;
  auto backoff = std::chrono::milliseconds(1);
  for (;;) {
    Socket s(newSocket(addr.storage.ss_family));
    int rc = ::connect(s.fd_.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!pollFor(s.fd_.get(), POLLOUT, deadline)) {
        lastErr = ETIMEDOUT;
        break;
      }
      socklen_t len = sizeof lastErr;
      getsockopt(s.fd_.get(), SOL_SOCKET, SO_ERROR, &lastErr, &len);
      rc = lastErr == 0 ? 0 : -1;
    } else if (rc != 0) {
      lastErr = errno;
    }
    if (rc == 0) {
      setNoDelay(s.fd_.get());
      return s;
    }
    if (lastErr != ECONNREFUSED && lastErr != ECONNRESET && lastErr != ETIMEDOUT &&
        lastErr != EAGAIN && lastErr != ENETUNREACH && lastErr != EHOSTUNREACH)
      throw SysError(strCat(what, ": connect to ", addr.toString()), lastErr);
    if (remainingMs(deadline) == 0) break;
    std::this_thread::sleep_for(std::min(backoff, std::chrono::milliseconds(remainingMs(deadline))));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
  raise(ErrorCode::kTimeout, what, ": could not connect to ", addr.toString(),
        " before the timeout (last error: ", std::strerror(lastErr),
        "). Is the peer running and the address reachable? Raise SQZ_TIMEOUT_MS if it is slow "
        "to start.");
}

std::optional<Socket> Socket::acceptOne(Deadline deadline) {
  for (;;) {
    int fd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      setNoDelay(fd);
      return Socket(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw SysError("accept()", errno);
    if (!pollFor(fd_.get(), POLLIN, deadline)) return std::nullopt;
  }
}

SockAddr Socket::localAddr() const {
  SockAddr a;
  a.len = sizeof a.storage;
  if (getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0)
    throw SysError("getsockname()", errno);
  return a;
}

SockAddr Socket::peerAddr() const {
  SockAddr a;
  a.len = sizeof a.storage;
  if (getpeername(fd_.get(), reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) a.len = 0;
  return a;
}

size_t Socket::writeSome(const iovec* iov, int iovcnt, const std::string& what) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = iovcnt;
  for (;;) {
    ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == EPIPE || errno == ECONNRESET)
      raise(ErrorCode::kRemote, what, ": the peer closed the connection (", std::strerror(errno),
            ")");
    throw SysError(what, errno);
  }
}

size_t Socket::readSome(void* data, size_t n, const std::string& what) {
  for (;;) {
    ssize_t got = ::recv(fd_.get(), data, n, 0);
    if (got > 0) return static_cast<size_t>(got);
    if (got == 0) raise(ErrorCode::kRemote, what, ": the peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == ECONNRESET)
      raise(ErrorCode::kRemote, what, ": the connection was reset by the peer");
    throw SysError(what, errno);
  }
}

void Socket::sendAll(const void* data, size_t n, Deadline deadline, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    iovec iov{const_cast<char*>(p), n};
    size_t wrote = writeSome(&iov, 1, what);
    p += wrote;
    n -= wrote;
    if (n > 0 && wrote == 0 && !pollFor(fd_.get(), POLLOUT, deadline))
      raise(ErrorCode::kTimeout, what, ": timed out sending to ", peerAddr().toString());
  }
}

void Socket::recvAll(void* data, size_t n, Deadline deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    size_t got = readSome(p, n, what);
    p += got;
    n -= got;
    if (n > 0 && got == 0 && !pollFor(fd_.get(), POLLIN, deadline))
      raise(ErrorCode::kTimeout, what, ": timed out waiting for ", peerAddr().toString());
  }
}

}  // namespace squeeze
