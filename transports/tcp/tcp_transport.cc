// tcp transport (see tcp_transport.h). Per socket there is a FIFO of send segments and one of
// receive segments; a message is done when all its segments are. Receives land directly in the
// caller's buffer: the header is read first (72 bytes on socket 0), checked, and only then are
// the payload stripes queued, so nothing is sized from unchecked input.
#include "transports/tcp/tcp_transport.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>

#include "base/error.h"
#include "base/logging.h"

namespace squeeze {
namespace {

constexpr size_t kStripeThreshold = 128 << 10;
constexpr int kMaxIov = 16;

struct Segment {
  char* data;
  size_t len;
  size_t done = 0;
  int* remaining;  // the owning message's count of unfinished segments
};

struct SendMsg {
  WireHeader header;
  int remaining = 0;
  TransferRequest* req;
};

struct RecvMsg {
  WireHeader expected;
  char* buf;
  size_t capacity;
  TransferRequest* req;
  bool headerParsed = false;
  int remaining = 0;
};

class TcpConnection final : public Connection {
 public:
  TcpConnection(std::vector<Socket> socks, int myRank, int peerRank)
      : socks_(std::move(socks)), myRank_(myRank), peerRank_(peerRank),
        sendq_(socks_.size()), recvq_(socks_.size()),
        what_(strCat("tcp connection from rank ", myRank, " to rank ", peerRank)) {}

  const char* transportName() const override { return "tcp"; }

  void isend(const WireHeader& header, const void* payload, TransferRequest* req) override {
    req->done = false;
    sends_.push_back(SendMsg{header, 0, req});
    SendMsg& m = sends_.back();
    const size_t n = header.payloadBytes;
    char* p = static_cast<char*>(const_cast<void*>(payload));
    queueSend(0, reinterpret_cast<char*>(&m.header), sizeof(WireHeader), &m.remaining);
    size_t k = stripes(n);
    for (size_t i = 0; i < k; ++i) {
      size_t lo = i * n / k, hi = (i + 1) * n / k;
      if (hi > lo) queueSend(i, p + lo, hi - lo, &m.remaining);
    }
  }

  void irecv(const WireHeader& expected, void* buf, size_t capacity,
             TransferRequest* req) override {
    req->done = false;
    recvs_.push_back(RecvMsg{expected, static_cast<char*>(buf), capacity, req});
  }

  bool progress() override {
    bool moved = false;
    for (size_t i = 0; i < socks_.size(); ++i) moved |= progressSend(i);
    moved |= progressRecv();
    return moved;
  }

  void addWaitSources(WaitSources& ws) override {
    for (size_t i = 0; i < socks_.size(); ++i) {
      short events = 0;
      if (!sendq_[i].empty()) events |= POLLOUT;
      if (!recvq_[i].empty() || (i == 0 && wantHeader())) events |= POLLIN;
      if (events) ws.fds.push_back(pollfd{socks_[i].fd(), events, 0});
    }
  }

  void shutdown() override {
    for (auto& s : socks_) s.shutdownBoth();
  }

 private:
  size_t stripes(size_t bytes) const {
    return bytes < kStripeThreshold ? 1 : socks_.size();
  }

  void queueSend(size_t sock, char* data, size_t len, int* remaining) {
    ++*remaining;
    sendq_[sock].push_back(Segment{data, len, 0, remaining});
  }

  bool progressSend(size_t i) {
    auto& q = sendq_[i];
    bool moved = false;
    while (!q.empty()) {
      iovec iov[kMaxIov];
      int n = 0;
      for (auto it = q.begin(); it != q.end() && n < kMaxIov; ++it, ++n)
        iov[n] = iovec{it->data + it->done, it->len - it->done};
      size_t wrote = socks_[i].writeSome(iov, n, what_);
      if (wrote == 0) break;
      moved = true;
      while (wrote > 0) {
        Segment& s = q.front();
        size_t take = std::min(wrote, s.len - s.done);
        s.done += take;
        wrote -= take;
        if (s.done == s.len) {
          --*s.remaining;
          q.pop_front();
        }
      }
    }
    if (moved) retireSends();
    return moved;
  }

  void retireSends() {
    while (!sends_.empty() && sends_.front().remaining == 0) {
      TransferRequest* r = sends_.front().req;
      r->bytes = sends_.front().header.payloadBytes;
      r->done = true;
      sends_.pop_front();
    }
  }

  // The next unparsed receive can read its header once socket 0 has no earlier payload queued.
  bool wantHeader() const {
    return recvq_[0].empty() && headerIndex_ < recvs_.size();
  }

  bool progressRecv() {
    bool moved = false;
    for (;;) {
      bool step = false;
      if (wantHeader()) step |= readHeader();
      for (size_t i = 0; i < socks_.size(); ++i) step |= readSegments(i);
      if (!step) break;
      moved = true;
    }
    while (!recvs_.empty() && recvs_.front().headerParsed && recvs_.front().remaining == 0) {
      RecvMsg& m = recvs_.front();
      m.req->bytes = m.req->header.payloadBytes;
      m.req->done = true;
      recvs_.pop_front();
      --headerIndex_;
    }
    return moved;
  }

  bool readHeader() {
    size_t got = socks_[0].readSome(reinterpret_cast<char*>(&headerBuf_) + headerGot_,
                                    sizeof(WireHeader) - headerGot_, what_);
    if (got == 0) return false;
    headerGot_ += got;
    if (headerGot_ < sizeof(WireHeader)) return true;
    headerGot_ = 0;
    RecvMsg& m = recvs_[headerIndex_++];
    checkHeader(m.expected, headerBuf_, m.capacity, myRank_);
    m.req->header = headerBuf_;
    m.headerParsed = true;
    const size_t n = headerBuf_.payloadBytes;
    size_t k = stripes(n);
    for (size_t i = 0; i < k; ++i) {
      size_t lo = i * n / k, hi = (i + 1) * n / k;
      if (hi > lo) {
        ++m.remaining;
        recvq_[i].push_back(Segment{m.buf + lo, hi - lo, 0, &m.remaining});
      }
    }
    return true;
  }

  bool readSegments(size_t i) {
    auto& q = recvq_[i];
    bool moved = false;
    while (!q.empty()) {
      Segment& s = q.front();
      size_t got = socks_[i].readSome(s.data + s.done, s.len - s.done, what_);
      if (got == 0) break;
      moved = true;
      s.done += got;
      if (s.done == s.len) {
        --*s.remaining;
        q.pop_front();
      }
    }
    return moved;
  }

  std::vector<Socket> socks_;
  int myRank_, peerRank_;
  std::vector<std::deque<Segment>> sendq_, recvq_;
  std::deque<SendMsg> sends_;  // deque: stable addresses for Segment::remaining
  std::deque<RecvMsg> recvs_;
  size_t headerIndex_ = 0;  // recvs_[headerIndex_] is the next message whose header is unread
  WireHeader headerBuf_{};
  size_t headerGot_ = 0;
  std::string what_;
};

// Sets one option on every data socket (`apply` returns 0 or the errno); the first refusal in
// this process is logged once, with the sentence `refused(errno)` makes, and the remaining
// sockets are left as the kernel made them.
template <class Apply, class Refused>
void setOnEverySocket(std::vector<Socket>& socks, std::atomic<bool>& warned, Apply apply,
                      Refused refused) {
  for (auto& s : socks) {
    int err = apply(s);
    if (err == 0) continue;
    if (!warned.exchange(true)) SQZ_WARN(kTransport, refused(err));
    return;
  }
}

// Why cubic by default: a collective keeps its links saturated, and loss-based cubic keeps the
// bottleneck queue full, where BBR drains it on purpose (ProbeRTT: 4 packets in flight for 200 ms
// every 10 s; ProbeBW's 0.75 pacing phase). On the 1 Gbit/s lab that cost ring all-reduce 2-4%
// of the link, call to call, and cubic ran at 99.9% of it (docs/architecture.md).
void setCongestion(std::vector<Socket>& socks, const std::string& name) {
  if (name == "system") return;
  static std::atomic<bool> warned{false};
  setOnEverySocket(
      socks, warned, [&](Socket& s) { return s.setCongestion(name); },
      [&](int err) {
        return strCat("tcp: the kernel refused congestion control '", name, "' (",
                      std::strerror(err),
                      err == EPERM ? ": not in net.ipv4.tcp_allowed_congestion_control"
                                     " and no CAP_NET_ADMIN"
                                   : "",
                      "); the sockets keep the system's. Set SQZ_TCP_CONGESTION=system to "
                      "silence this.");
      });
}

// Why a bounded send buffer helps: loss-based TCP grows each flow's window until the bottleneck
// queue overflows, and a drop holds back every byte behind it until its retransmission lands. A
// ring has no slack after its first step, so each such stall idles every link after it: 2-4% of
// the 1 Gbit/s lab whose switch queue holds 5 ms. On a LAN the bytes a socket has in flight sit in
// that queue, and the send buffer bounds them, so a buffer under the queue's share never drops
// and still leaves it a backlog to cover a sender's hiccup (pacing to the link's rate leaves none:
// perf/RESULTS.md).
void setSendBuffers(std::vector<Socket>& socks, size_t bytes) {
  if (bytes == 0) return;
  static std::atomic<bool> warned{false};
  setOnEverySocket(
      socks, warned, [&](Socket& s) { return s.setSendBuffer(bytes); },
      [&](int err) {
        return strCat("tcp: the kernel refused SQZ_TCP_SNDBUF=", bytes, " (", std::strerror(err),
                      "); the sockets keep the kernel's autotuned buffers.");
      });
}

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportContext&) {}
  const char* name() const override { return "tcp"; }
  bool canConnect(const PeerInfo&, const PeerInfo&) const override { return true; }

  std::unique_ptr<Connection> connect(const LinkSetup& setup) override {
    // Both sides use the smaller socket count, so differing SQZ_TCP_NSOCKS cannot deadlock.
    int32_t mine = setup.config.tcpNsocks, theirs = 0;
    setup.link.sendBytes(&mine, sizeof mine);
    setup.link.recvBytes(&theirs, sizeof theirs);
    if (theirs < 1 || theirs > 16)
      raise(ErrorCode::kRemote, "rank ", setup.peer.rank, " proposed ", theirs, " tcp sockets");
    int nsocks = std::min(mine, theirs);
    std::vector<Socket> socks;
    for (int i = 0; i < nsocks; ++i) socks.push_back(setup.link.openDataSocket(uint16_t(i)));
    setCongestion(socks, setup.config.tcpCongestion);
    setSendBuffers(socks, setup.config.tcpSndbuf);
    SQZ_INFO(kTransport, "rank ", setup.myRank, " -> rank ", setup.peer.rank, ": tcp, ", nsocks,
             " socket(s) to ", setup.peer.listenAddr.toString());
    return std::make_unique<TcpConnection>(std::move(socks), setup.myRank, setup.peer.rank);
  }
};

}  // namespace

std::unique_ptr<Transport> createTcpTransport(const TransportContext& ctx) {
  return std::make_unique<TcpTransport>(ctx);
}

}  // namespace squeeze
