// The attacks on one connection (see attacks.h).
#include "attacks.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "base/error.h"
#include "bootstrap/auth.h"
#include "bootstrap/unique_id.h"

namespace squeeze::attack {
namespace {

constexpr int kConnectMs = 500;
constexpr int kGarbageReadMs = 200;
constexpr int kWrongSecretMs = 3000;
// auth.cc's wire format, spelled out here so the attacker also builds against older bootstraps
// (to show what this test catches there): ClientHello's size, magic and version.
constexpr size_t kHelloBytes = 72;
constexpr uint32_t kAuthMagic = 0x4854515a;  // "ZQTH"
constexpr uint32_t kAuthVersion = 1;

// A non-blocking socket connected to the target on loopback, or -1 (errno-style code in *err).
int connectLoopback(const Target& t, int* err) {
  sockaddr_storage ss{};
  socklen_t len;
  if (t.family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = htons(t.port);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    a->sin6_port = htons(t.port);
    len = sizeof *a;
  }
  int fd = ::socket(t.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, kConnectMs) != 1) {
      ::close(fd);
      *err = ETIMEDOUT;
      return -1;
    }
    int soErr = 0;
    socklen_t soLen = sizeof soErr;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &soLen);
    rc = soErr == 0 ? 0 : -1;
    errno = soErr;
  }
  if (rc != 0) {
    *err = errno;
    ::close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace

int connectFor(Kind k, const Target& t, Tally& tally) {
  tally.attempt(k);
  int err = 0;
  int fd = connectLoopback(t, &err);
  if (fd < 0) {
    tally.outcome(k, std::string("connect failed: ") + std::strerror(err));
    return -1;
  }
  tally.connected(k, t);
  return fd;
}

// Closes with an RST instead of a FIN.
void abortiveClose(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
}

bool drain(int fd) {
  char buf[512];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

std::vector<uint8_t> plausibleHello(std::mt19937_64& rng) {
  std::vector<uint8_t> h(kHelloBytes);
  for (auto& b : h) b = static_cast<uint8_t>(rng());
  const uint32_t magic = kAuthMagic, version = kAuthVersion;
  const int32_t rank = static_cast<int32_t>(rng() % 4);
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 4);
  std::memcpy(h.data() + 16, &rank, 4);
  h[20] = static_cast<uint8_t>(1 + rng() % 3);  // purpose
  h[21] = 0;
  h[22] = h[23] = 0;  // index
  return h;
}

void garbage(Target t, uint64_t seed, Tally& tally) {
  int fd = connectFor(kGarbage, t, tally);
  if (fd < 0) return;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> bytes(1024 + rng() % (15 * 1024));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  // Fields a careless parser would size an allocation or a loop from.
  const uint32_t huge[] = {0xffffffffu, 0x7fffffffu, 0x40000000u, 0x80000000u, 0x00ffffffu};
  for (size_t off = 0; off + 8 <= bytes.size(); off += 512) {
    uint32_t v = huge[rng() % std::size(huge)];
    std::memcpy(&bytes[off], &v, 4);
    std::memcpy(&bytes[off + 4], &v, 4);
  }
  if (rng() % 2) {  // past the magic and version check, into the fields behind it
    std::memcpy(&bytes[0], &kAuthMagic, 4);
    std::memcpy(&bytes[4], &kAuthVersion, 4);
  }
  size_t sent = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (sent < bytes.size() && std::chrono::steady_clock::now() < until) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 50);
    } else if (n < 0 && errno != EINTR) {
      break;  // the server closed on us: the expected answer to garbage
    }
  }
  size_t received = 0;
  bool closedByServer = false;
  const auto start = std::chrono::steady_clock::now();
  const auto readUntil = start + std::chrono::milliseconds(kGarbageReadMs);
  char buf[4096];
  while (!closedByServer && std::chrono::steady_clock::now() < readUntil) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    readUntil - std::chrono::steady_clock::now())
                                    .count());
    if (::poll(&p, 1, std::max(left, 0)) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0)
      received += static_cast<size_t>(n);
    else if (n == 0 || errno != EINTR)
      closedByServer = true;
  }
  ::close(fd);
  tally.outcome(kGarbage, closedByServer ? "closed by the server" : "still open after 200 ms",
                std::to_string(sent) + " B sent, " + std::to_string(received) + " B back");
}

void wrongSecret(Target t, uint64_t seed, Tally& tally) {
  int fd = connectFor(kWrongSecret, t, tally);
  if (fd < 0) return;
  Socket s(fd);
  Secret secret = randomSecret();
  Hello hello;
  hello.commHash = seed;  // nobody's comm hash
  hello.rank = static_cast<int32_t>(seed % 4);
  hello.purpose = static_cast<LinkPurpose>(1 + (seed >> 8) % 3);
  hello.index = 0;
  try {
    authenticateAsClient(s, secret, hello, deadlineAfterMs(kWrongSecretMs));
    tally.outcome(kWrongSecret, "ACCEPTED (security bug)", t.name());
  } catch (const Error& e) {
    const std::string what = e.what();
    std::string outcome = "refused: " + std::string(e.code() == ErrorCode::kTimeout  ? "no answer"
                                                    : e.code() == ErrorCode::kRemote ? "closed"
                                                                                     : "other");
    if (what.find("reading the challenge") != std::string::npos) outcome += " before challenge";
    tally.outcome(kWrongSecret, outcome, what.substr(0, 100));
  }
}

}  // namespace squeeze::attack
