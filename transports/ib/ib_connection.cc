// The ib Connection's data path (see ib_connection.h for the protocol, ib_credits.h for the flow
// control). progress() does, in order: take completion-channel events, drain the completion
// queue (credits, arrivals, local write completions; reposting one receive per receive
// completion right there, before any credit that could depend on it), copy queued sends into
// the staging mirror and post their writes, copy arrived bytes into posted receives, post a
// credit if one is due, and re-arm the completion queue (then poll once more). Each call moves
// at most one ring's worth per direction, so one huge message does not starve the rest.
#include "transports/ib/ib_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <exception>

#include "base/error.h"
#include "transports/ib/ib_credits.h"

namespace squeeze {
namespace {

constexpr uint64_t kHeaderBytes = sizeof(WireHeader);
constexpr uint64_t kMaxSliceBytes = 1 << 20;
constexpr int kPollBatch = 32;

uint64_t sliceFor(uint64_t ringBytes) {
  return std::max<uint64_t>(1, std::min(ringBytes / 4, kMaxSliceBytes));
}

class IbConnection final : public Connection {
 public:
  IbConnection(std::unique_ptr<IbQp> qp, const IbConnectionParams& p, Socket watch)
      : qp_(std::move(qp)),
        myRank_(p.myRank),
        peerRank_(p.peerRank),
        sqDepth_(p.sendQueueDepth),
        sender_(qp_->sendRingBytes(), p.maxWrites, sliceFor(qp_->sendRingBytes())),
        receiver_(qp_->recvRingBytes()),
        watch_(std::move(watch)) {
    SQZ_ENFORCE(p.sendQueueDepth > p.maxWrites, "send queue of ", p.sendQueueDepth, " for ",
                p.maxWrites, " writes");
  }

  const char* transportName() const override { return "ib"; }

  void isend(const WireHeader& header, const void* payload, TransferRequest* req) override {
    beginSend(header, payload, req);
    sends_.push_back(SendOp{header, static_cast<const uint8_t*>(payload),
                            kHeaderBytes + header.payloadBytes, 0, 0, req});
  }

  void irecv(const WireHeader& expected, void* buf, size_t capacity,
             TransferRequest* req) override {
    beginRecv(buf, capacity, req);
    recvs_.push_back(
        RecvOp{expected, WireHeader{}, static_cast<uint8_t*>(buf), capacity, 0, kHeaderBytes, req});
  }

  bool progress() override {
    if (error_) std::rethrow_exception(error_);
    if (shut_.load(std::memory_order_acquire)) return false;
    try {
      if (qp_->takeEvents()) armed_ = false;
      bool moved = drainCompletions();
      moved |= pushSends();
      moved |= pullRecvs();
      moved |= sendCredit();
      if (!armed_) {
        qp_->armNotify();
        armed_ = true;
        moved |= drainCompletions();  // what completed between the last poll and the arm
      }
      if (!moved && pendingWork() && peerClosed()) {
        // Whatever the peer wrote before it left is in the completion queue by now.
        moved = drainCompletions();
        moved |= pullRecvs();
        if (!sends_.empty() || (!recvs_.empty() && receiver_.available() == 0))
          raise(ErrorCode::kRemote, "rank ", peerRank_, " closed its ib connection to rank ",
                myRank_, " (it exited, was killed, or shut the communicator down) with ",
                recvs_.size(), " receive(s) and ", sends_.size(), " send(s) still pending on rank ",
                myRank_);
      }
      return moved;
    } catch (...) {
      // After a local shutdown() the queue pair is in error on purpose: nothing to report.
      if (shut_.load(std::memory_order_acquire)) return false;
      error_ = std::current_exception();
      throw;
    }
  }

  void addWaitSources(WaitSources& sources) override {
    sources.fds.push_back(pollfd{qp_->eventFd(), POLLIN, 0});
    // The liveness socket reads as ready forever once closed (by the peer, or by our own
    // shutdown()): watch it only while it matters.
    if (!watchClosed_ && !shut_.load(std::memory_order_acquire) && pendingWork())
      sources.fds.push_back(pollfd{watch_.fd(), POLLIN, 0});
  }

  void shutdown() override {
    if (shut_.exchange(true, std::memory_order_acq_rel)) return;
    watch_.shutdownBoth();
    qp_->toError();
  }

 private:
  struct SendOp {
    WireHeader header;
    const uint8_t* payload;
    uint64_t total;      // header + payload bytes
    uint64_t sent;       // bytes staged and posted
    uint64_t lastWrite;  // the write (1-based count) that carries its last byte
    TransferRequest* req;
  };
  struct RecvOp {
    WireHeader expected;
    WireHeader header;
    uint8_t* buf;
    size_t capacity;
    uint64_t got;    // header + payload bytes received
    uint64_t total;  // kHeaderBytes until the header is in, then header + payload
    TransferRequest* req;
  };

  bool pendingWork() const { return !sends_.empty() || !written_.empty() || !recvs_.empty(); }

  [[noreturn]] void failed(const IbCompletion& c) {
    const char* what = c.kind == IbCompletion::Kind::kSendDone
                           ? (c.wrId == kIbCreditWrId ? "a credit message" : "an RDMA write")
                           : "a receive";
    raise(ErrorCode::kRemote, "rank ", myRank_, ": the ib connection to rank ", peerRank_,
          " failed (", what, " completed with '", c.statusText, "'",
          c.flushed ? ", flushed after an earlier error" : "", "): rank ", peerRank_,
          " exited or was killed, shut the connection down, or the link between the two went "
          "down");
  }

  [[noreturn]] void protocolError(const char* what, uint64_t value) {
    raise(ErrorCode::kRemote, "rank ", myRank_, ": rank ", peerRank_, " sent ", what, " ", value,
          " that does not fit the ib ring protocol (sender ring position ", sender_.head(),
          ", credited ", sender_.credited(), "; receiver consumed ", receiver_.consumed(), " of ",
          receiver_.ringBytes(), "-byte ring, ", receiver_.available(),
          " available); the peer is corrupt or runs another Squeeze version");
  }

  bool drainCompletions() {
    IbCompletion wc[kPollBatch];
    bool any = false;
    uint32_t repost = 0;
    for (;;) {
      const int n = qp_->poll(wc, kPollBatch);
      for (int i = 0; i < n; ++i) {
        const IbCompletion& c = wc[i];
        if (!c.ok) failed(c);
        switch (c.kind) {
          case IbCompletion::Kind::kSendDone:
            SQZ_ENFORCE(sqOutstanding_ > 0, "a send completion nobody posted");
            --sqOutstanding_;
            if (c.wrId == kIbWriteWrId) {
              sender_.writeCompleted();
              while (!written_.empty() && written_.front().lastWrite <= sender_.writesCompleted()) {
                TransferRequest* r = written_.front().req;
                r->bytes = written_.front().header.payloadBytes;
                r->done = true;
                written_.pop_front();
              }
            }
            break;
          case IbCompletion::Kind::kRecvWrite:
            ++repost;
            if (!receiver_.arrived(c.imm)) protocolError("a write of", c.imm);
            break;
          case IbCompletion::Kind::kRecvCredit:
            ++repost;
            if (!sender_.credit(c.imm)) protocolError("a credit for consumed position", c.imm);
            break;
        }
      }
      any |= n > 0;
      if (n < kPollBatch) break;
    }
    if (repost) qp_->postRecvs(repost);
    return any;
  }

  // Bytes [from, from + n) of the message (header, then payload) into dst.
  static void stage(const SendOp& op, uint64_t from, uint64_t n, uint8_t* dst) {
    if (from < kHeaderBytes) {
      const uint64_t k = std::min(n, kHeaderBytes - from);
      std::memcpy(dst, reinterpret_cast<const uint8_t*>(&op.header) + from, k);
      dst += k;
      from += k;
      n -= k;
    }
    if (n) std::memcpy(dst, op.payload + (from - kHeaderBytes), n);
  }

  bool pushSends() {
    bool moved = false;
    uint64_t budget = sender_.ringBytes();  // at most one ring's worth per call
    while (!sends_.empty() && budget > 0 && sqOutstanding_ < sqDepth_) {
      SendOp& op = sends_.front();
      // One write never carries bytes of two messages (ib_credits.h says why).
      const uint64_t n = sender_.nextWriteBytes(std::min(op.total - op.sent, budget));
      if (n == 0) break;
      const uint64_t offset = sender_.headOffset();
      stage(op, op.sent, n, qp_->sendStaging() + offset);
      qp_->postWrite(offset, static_cast<uint32_t>(n), static_cast<uint32_t>(n));
      sender_.wrote(n);
      ++sqOutstanding_;
      op.sent += n;
      budget -= n;
      moved = true;
      if (op.sent == op.total) {
        op.lastWrite = sender_.writesPosted();
        written_.push_back(op);
        sends_.pop_front();
      }
    }
    return moved;
  }

  void copyOut(uint64_t pos, void* dst, uint64_t n) const {
    const uint64_t ring = receiver_.ringBytes();
    const uint64_t off = pos % ring;
    const uint64_t first = std::min(n, ring - off);
    std::memcpy(dst, qp_->recvRing() + off, first);
    if (n > first) std::memcpy(static_cast<uint8_t*>(dst) + first, qp_->recvRing(), n - first);
  }

  bool pullRecvs() {
    bool moved = false;
    uint64_t budget = receiver_.ringBytes();  // at most one ring's worth per call
    while (!recvs_.empty() && budget > 0) {
      const uint64_t avail = std::min(receiver_.available(), budget);
      if (avail == 0) break;
      RecvOp& op = recvs_.front();
      uint64_t n;
      if (op.got < kHeaderBytes) {
        n = std::min(kHeaderBytes - op.got, avail);
        copyOut(receiver_.consumed(), reinterpret_cast<uint8_t*>(&op.header) + op.got, n);
        receiver_.consume(n);
        op.got += n;
        if (op.got == kHeaderBytes) {
          checkHeader(op.expected, op.header, op.capacity, myRank_);
          op.total = kHeaderBytes + op.header.payloadBytes;
        }
      } else {
        n = std::min(op.total - op.got, avail);
        copyOut(receiver_.consumed(), op.buf + (op.got - kHeaderBytes), n);
        receiver_.consume(n);
        op.got += n;
      }
      budget -= n;
      moved = true;
      if (op.got == op.total) {
        op.req->header = op.header;
        op.req->bytes = op.header.payloadBytes;
        op.req->done = true;
        recvs_.pop_front();
      }
    }
    return moved;
  }

  bool sendCredit() {
    if (!receiver_.creditDue() || sqOutstanding_ >= sqDepth_) return false;
    qp_->postCredit(receiver_.creditValue());
    ++sqOutstanding_;
    receiver_.creditSent();
    return true;
  }

  // The peer's process closed (or shut down) the liveness socket.
  bool peerClosed() {
    if (watchClosed_) return true;
    char byte;
    const ssize_t n = ::recv(watch_.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    watchClosed_ = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    return watchClosed_;
  }

  std::unique_ptr<IbQp> qp_;
  const int myRank_;
  const int peerRank_;
  const uint32_t sqDepth_;
  RingSender sender_;
  RingReceiver receiver_;
  uint32_t sqOutstanding_ = 0;  // posted send-queue work requests not yet completed
  bool armed_ = false;          // a completion will raise an event on qp_->eventFd()
  std::deque<SendOp> sends_;    // not yet wholly staged and posted
  std::deque<SendOp> written_;  // wholly posted, waiting for the last write's completion
  std::deque<RecvOp> recvs_;
  Socket watch_;  // carries no data: it closes when the peer's process ends
  bool watchClosed_ = false;
  // shutdown() may come from another thread (an abort) while progress() runs.
  std::atomic<bool> shut_{false};
  std::exception_ptr error_;  // the first error progress() threw; rethrown ever after
};

}  // namespace

std::unique_ptr<Connection> makeIbConnection(std::unique_ptr<IbQp> qp,
                                             const IbConnectionParams& params, Socket watch) {
  SQZ_ENFORCE(qp != nullptr);
  return std::make_unique<IbConnection>(std::move(qp), params, std::move(watch));
}

}  // namespace squeeze
