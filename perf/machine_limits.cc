// sqz-machine-limits: the ceilings collective bandwidth is judged against on this machine —
// single-core memcpy and float32 sum bandwidth, an encode with feedback's memory traffic on one
// core, and one TCP stream over loopback. Medians of repeated runs; bounded in time and data.
// Usage: sqz-machine-limits [-s BYTES[K|M|G]] [-r REPEATS]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double timeGBps(size_t bytes, int repeats, F&& f) {
  std::vector<double> rates;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = Clock::now();
    f();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(bytes / s / 1e9);
  }
  return median(rates);
}

double tcpStream(size_t bytes, int repeats) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd, 1) != 0) {
    std::perror("sqz-machine-limits: bind/listen on 127.0.0.1");
    std::exit(1);
  }
  socklen_t len = sizeof addr;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  int cfd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(cfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("sqz-machine-limits: connect");
    std::exit(1);
  }
  int sfd = accept(lfd, nullptr, nullptr);
  const size_t chunk = 1 << 20;
  std::vector<char> src(chunk, 1), dst(chunk);
  double rate = timeGBps(bytes, repeats, [&] {
    std::thread sender([&] {
      for (size_t sent = 0; sent < bytes;) {
        ssize_t n = send(cfd, src.data(), std::min(chunk, bytes - sent), 0);
        if (n <= 0) return;
        sent += n;
      }
    });
    for (size_t got = 0; got < bytes;) {
      ssize_t n = recv(sfd, dst.data(), chunk, 0);
      if (n <= 0) break;
      got += n;
    }
    sender.join();
  });
  close(cfd);
  close(sfd);
  close(lfd);
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 256u << 20;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-s") && i + 1 < argc) {
      char* end = nullptr;
      bytes = std::strtoull(argv[++i], &end, 10);
      if (*end == 'K' || *end == 'k') bytes <<= 10;
      if (*end == 'M' || *end == 'm') bytes <<= 20;
      if (*end == 'G' || *end == 'g') bytes <<= 30;
    } else if (!std::strcmp(argv[i], "-r") && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: sqz-machine-limits [-s BYTES] [-r REPEATS]\n");
      return 2;
    }
  }
  if (bytes < 4096 || bytes > (4ull << 30) || repeats < 1 || repeats > 100) {
    std::fprintf(stderr, "sqz-machine-limits: -s must be 4096..4G and -r 1..100\n");
    return 2;
  }
  const size_t n = bytes / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
  bytes = n * sizeof(float);
  double memcpyRate = timeGBps(bytes, repeats, [&] { std::memcpy(c.data(), a.data(), bytes); });
  float* x = a.data();
  float* y = b.data();
  float* z = c.data();
  // Counted as bytes of one input, as the all-reduce's combine step reads it.
  double sumRate = timeGBps(bytes, repeats, [&] {
    for (size_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
  });
  // An encode with error feedback's memory traffic without its arithmetic: x read, added to a
  // residual (read and written back), one byte out per value (int8's and QSGD's codes), over
  // sqz-codec-bench -s 16M's chunk; GB/s of x. The most such an encode could reach on one core
  // were its arithmetic free, beside memcpy's figure (the bar codec speeds are held to).
  const size_t fn = size_t{16} << 20;
  std::vector<float> fx(fn, 1.0f), fr(fn, 0.0f);
  std::vector<uint8_t> fc(fn);
  double feedbackRate = timeGBps(fn * sizeof(float), repeats, [&] {
    const float* __restrict xs = fx.data();
    float* __restrict rs = fr.data();
    uint8_t* __restrict cs = fc.data();
    for (size_t i = 0; i < fn; ++i) {
      rs[i] += xs[i];
      cs[i] = static_cast<uint8_t>(static_cast<int32_t>(xs[i]));
    }
  });
  double tcpRate = tcpStream(bytes * 4, repeats);
  std::printf("# sqz-machine-limits: %zu-byte buffers, median of %d\n", bytes, repeats);
  std::printf("%-36s %8.2f GB/s\n", "memcpy, one core", memcpyRate);
  std::printf("%-36s %8.2f GB/s\n", "float32 z = x + y, one core", sumRate);
  std::printf("%-36s %8.2f GB/s  (%.0f%% of memcpy)\n", "encode-with-feedback traffic, 1 core",
              feedbackRate, 100 * feedbackRate / memcpyRate);
  std::printf("%-36s %8.2f GB/s\n", "one TCP stream, loopback", tcpRate);
  return z[n / 2] == 3.0f && fc[fn / 2] == 1 ? 0 : 1;
}
