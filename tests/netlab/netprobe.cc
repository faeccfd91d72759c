// sqz-netprobe: measures one TCP stream's goodput, so netlab.sh can check that a shaped link
// carries its rate before any benchmark on it is believed.
//
//   sqz-netprobe recv ADDR PORT     accept one connection on ADDR:PORT, read to EOF, print
//                                   "<bytes> <seconds> <Gbit/s>" (payload bits over the time
//                                   from the first byte to EOF)
//   sqz-netprobe send ADDR PORT S   connect (retrying up to 10 s while the receiver starts), send
//                                   for S seconds, close
//
// Every wait is bounded (accept and connect 10 s, each read or write 10 s), so a broken lab
// ends in an error, never a hang. Standalone: it measures the network, not the library.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWaitMs = 10000;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "sqz-netprobe: %s\n", what.c_str());
  std::exit(1);
}

[[noreturn]] void dieErrno(const std::string& what) { die(what + ": " + std::strerror(errno)); }

sockaddr_in parseAddr(const char* host, const char* port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  char* end = nullptr;
  long p = std::strtol(port, &end, 10);
  if (*end != '\0' || p <= 0 || p > 65535) die(std::string("bad port '") + port + "'");
  a.sin_port = htons(static_cast<uint16_t>(p));
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
    die(std::string("bad IPv4 address '") + host + "'");
  return a;
}

void waitFor(int fd, short events, const char* what) {
  pollfd p{fd, events, 0};
  int r;
  do r = poll(&p, 1, kWaitMs);
  while (r < 0 && errno == EINTR);
  if (r < 0) dieErrno(what);
  if (r == 0) die(std::string(what) + ": nothing for 10 s");
}

int recvMain(const char* host, const char* port) {
  sockaddr_in a = parseAddr(host, port);
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) dieErrno("socket");
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    dieErrno(std::string("bind ") + host + ":" + port);
  if (listen(ls, 1) != 0) dieErrno("listen");
  waitFor(ls, POLLIN, "accept");
  int fd = accept(ls, nullptr, nullptr);
  if (fd < 0) dieErrno("accept");
  close(ls);
  std::vector<char> buf(1 << 20);
  size_t bytes = 0;
  Clock::time_point first{}, last{};
  for (;;) {
    waitFor(fd, POLLIN, "read");
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) dieErrno("read");
    if (n == 0) break;
    if (bytes == 0) first = Clock::now();
    bytes += static_cast<size_t>(n);
    last = Clock::now();
  }
  close(fd);
  double sec = std::chrono::duration<double>(last - first).count();
  if (bytes == 0 || sec <= 0) die("the sender sent nothing");
  std::printf("%zu %.6f %.4f\n", bytes, sec, static_cast<double>(bytes) * 8 / sec / 1e9);
  return 0;
}

int sendMain(const char* host, const char* port, const char* seconds) {
  sockaddr_in a = parseAddr(host, port);
  double sec = std::atof(seconds);
  if (!(sec > 0 && sec <= 60)) die(std::string("bad duration '") + seconds + "' (0 < S <= 60)");
  int fd = -1;
  auto giveUp = Clock::now() + std::chrono::milliseconds(kWaitMs);
  for (;;) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) dieErrno("socket");
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    if (errno != ECONNREFUSED || Clock::now() > giveUp)
      dieErrno(std::string("connect ") + host + ":" + port);
    close(fd);
    usleep(20000);
  }
  std::vector<char> buf(1 << 20, 'x');
  auto end = Clock::now() + std::chrono::duration<double>(sec);
  while (Clock::now() < end) {
    waitFor(fd, POLLOUT, "write");
    ssize_t n = write(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) dieErrno("write");
  }
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "recv") == 0) return recvMain(argv[2], argv[3]);
  if (argc == 5 && std::strcmp(argv[1], "send") == 0) return sendMain(argv[2], argv[3], argv[4]);
  std::fprintf(stderr,
               "usage: sqz-netprobe recv ADDR PORT\n"
               "       sqz-netprobe send ADDR PORT SECONDS\n");
  return 2;
}
