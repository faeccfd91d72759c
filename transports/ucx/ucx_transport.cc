// The UCX transport (see ucx_transport.h): one ucp context and worker per communicator, one
// endpoint per peer, messages as tagged sends.
//
// Tags: bits 63..40 the sender's rank, bit 39 header (0) or payload (1), bits 38..0 the
// connection's message number in that direction (both sides count their posts, so the n-th
// irecv matches the n-th isend whatever order UCX delivers in). Receives use a full mask.
//
// Requests: no completion callbacks. Every UCX request handle is polled with
// ucp_request_check_status / ucp_tag_recv_request_test and released with ucp_request_free, so
// UCX never calls back into memory a Connection owns, whatever is torn down first.
//
// Progress and waits: the shared worker's (ucx_worker.h).
//
//
// Liveness: UCX's PEER error mode reports a dead endpoint (the err_handler records the status);
// UCX 1.13's shared-memory lanes do not support it, so there endpoints fall back to mode NONE.
// An endpoint to a rank of this same process over shared memory never fails either, and an abort
// must be visible at once. So each pair also keeps one data socket (PeerLink::openDataSocket)
// that never carries a byte: shutdown() and the peer's end closing (destruction, exit) make it
// readable with EOF. Because that socket is not ordered with UCX's own traffic, a peer seen gone
// fails a pending request only after kPeerGoneGraceMs without that request advancing: data the
// peer flushed before closing still lands.
//
// Teardown (~UcxConnection): receives not yet matched are cancelled; then, unless the pair is
// already broken, the endpoint is flushed (everything sent reaches the peer, bounded by
// SQZ_TIMEOUT_MS) and force-closed (mode PEER: a force close fails what is left on the lanes
// before anything more can land), or closed with a flush (mode NONE, which UCX does not let
// force; bounded, short when the peer is gone). The watch socket closes last, so the peer sees
// the close after the data.
#include "transports/ucx/ucx_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "base/error.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/strings.h"
#include "transports/ucx/ucx_worker.h"

namespace squeeze {
namespace {

constexpr int kRankShift = 40;
constexpr uint64_t kPayloadBit = uint64_t{1} << 39;
constexpr uint64_t kSeqMask = kPayloadBit - 1;
constexpr int kMaxRanks = 1 << (64 - kRankShift);
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};
// A UCX worker address is a few hundred bytes for tcp + shared memory; more is not an address.
constexpr size_t kMaxAddressBytes = 64 << 10;
// How long a pending request may sit without advancing once the peer is seen gone: the watch
// socket's EOF can overtake data the peer flushed just before closing.
constexpr int kPeerGoneGraceMs = 1000;
constexpr int kLivenessCheckMs = 100;
// The force close needs no peer; this only bounds a UCX that misbehaves.
constexpr int kForceCloseWaitMs = 2000;
// A flushing close of an endpoint whose peer is gone (mode NONE cannot force).
constexpr int kBrokenCloseWaitMs = 1000;
constexpr uint16_t kWatchSocketIndex = 0;

ucp_tag_t makeTag(int srcRank, bool payload, uint64_t seq) {
  return (static_cast<uint64_t>(srcRank) << kRankShift) | (payload ? kPayloadBit : 0) |
         (seq & kSeqMask);
}

class UcxConnection final : public Connection {
 public:
  UcxConnection(std::shared_ptr<UcxWorker> worker, const UcxWorker::Endpoint& ep, Socket watch,
                int myRank, int peerRank, int timeoutMs)
      : worker_(std::move(worker)),
        ep_(ep.ep),
        health_(ep.health),
        peerMode_(ep.peerMode),
        watch_(std::move(watch)),
        myRank_(myRank),
        peerRank_(peerRank),
        timeoutMs_(timeoutMs),
        seen_(worker_->generation()) {}

  ~UcxConnection() override {
    try {
      teardown();
    } catch (...) {
      // Teardown is best effort; the worker's destruction releases whatever is left.
    }
  }

  const char* transportName() const override { return "ucx"; }

  void isend(const WireHeader& header, const void* payload, TransferRequest* req) override {
    beginSend(header, payload, req);
    if (error_) std::rethrow_exception(error_);
    sends_.push_back(SendMsg{header, req});
    if (shut_.load(std::memory_order_acquire)) return;  // never completes, as documented
    SendMsg& m = sends_.back();
    const uint64_t seq = sendSeq_++;
    guarded([&] {
      m.headerReq = postSend(&m.header, sizeof(WireHeader), makeTag(myRank_, false, seq));
      if (header.payloadBytes > 0)
        m.payloadReq = postSend(payload, header.payloadBytes, makeTag(myRank_, true, seq));
    });
  }

  void irecv(const WireHeader& expected, void* buf, size_t capacity,
             TransferRequest* req) override {
    beginRecv(buf, capacity, req);
    if (error_) std::rethrow_exception(error_);
    recvs_.push_back(RecvMsg{expected, static_cast<char*>(buf), capacity, req, recvSeq_++});
    if (shut_.load(std::memory_order_acquire)) return;
    RecvMsg& m = recvs_.back();
    guarded([&] {
      // The header lands in the connection's own memory; the caller's buffer waits for the check.
      m.headerReq = postRecv(&m.header, sizeof(WireHeader), makeTag(peerRank_, false, m.seq));
    });
  }

  bool progress() override {
    if (error_) std::rethrow_exception(error_);
    if (shut_.load(std::memory_order_acquire)) {
      if (!cancelled_) cancelPending();
      return false;
    }
    bool moved = false;
    guarded([&] {
      const bool busy = worker_->progress(seen_);
      const bool advanced = pollSends() | pollRecvs();
      checkPeer(advanced);
      moved = busy || advanced;
    });
    return moved;
  }

  void addWaitSources(WaitSources& ws) override {
    if (shut_.load(std::memory_order_acquire) || error_) {
      worker_->addIdleSource(ws);
      return;
    }
    guarded([&] {
      // Wake on the peer's close only while something waits on the peer; once it is closed the
      // socket stays readable, so it is left out and the grace runs out on the executor's slices.
      if (pending() && !watchClosed_) {
        peekWatch();
        if (!watchClosed_) ws.fds.push_back(pollfd{watch_.fd(), POLLIN, 0});
      }
      worker_->addWaitSources(ws);
      if (pending()) worker_->addTick(ws);
    });
  }

  void shutdown() override {
    shut_.store(true, std::memory_order_release);
    watch_.shutdownBoth();
  }

 private:
  struct SendMsg {
    WireHeader header;  // the header's bytes on the wire, alive until its send completes
    TransferRequest* req;
    void* headerReq = nullptr;  // nullptr: completed (or never posted)
    void* payloadReq = nullptr;
  };
  struct RecvMsg {
    WireHeader expected;
    char* buf;
    size_t capacity;
    TransferRequest* req;
    uint64_t seq;
    WireHeader header{};  // lands here, checked before the payload receive is posted
    ucp_tag_recv_info_t headerInfo{};
    void* headerReq = nullptr;
    bool headerArrived = false;  // the header receive completed (maybe not yet checked)
    bool headerChecked = false;
    void* payloadReq = nullptr;
    ucp_tag_recv_info_t payloadInfo{};
    bool payloadDone = false;
  };

  bool pending() const { return !sends_.empty() || !recvs_.empty(); }

  // Runs f; an exception is kept (rethrown by every later call) and the pending requests are
  // cancelled, since the executor abandons their buffers.
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (...) {
      error_ = std::current_exception();
      cancelPending();
      throw;
    }
  }

  void* postSend(const void* data, size_t bytes, ucp_tag_t tag) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    worker_->notePosted();
    ucs_status_ptr_t r = ucp_tag_send_nbx(ep_, data, bytes, tag, &p);
    if (UCS_PTR_IS_ERR(r))
      raise(ErrorCode::kRemote, "rank ", myRank_, ": UCX could not send ", bytes, " bytes to rank ",
            peerRank_, " (", ucxFailure("ucp_tag_send_nbx", UCS_PTR_STATUS(r)),
            "): that rank exited, was aborted, or the network failed");
    return r;  // nullptr: completed at once
  }

  // Always returns a request: UCX 1.13 leaves recv_info unset when a receive completes at once
  // (the message was already there), and the length is what the checks need.
  void* postRecv(void* buf, size_t bytes, ucp_tag_t tag) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    worker_->notePosted();
    ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_->handle(), buf, bytes, tag, kFullMask, &p);
    if (UCS_PTR_IS_ERR(r))
      raise(ErrorCode::kRemote, "rank ", myRank_, ": UCX could not post a ", bytes,
            "-byte receive from rank ", peerRank_, ": ",
            ucxFailure("ucp_tag_recv_nbx", UCS_PTR_STATUS(r)));
    SQZ_ENFORCE(r != nullptr, "ucp_tag_recv_nbx completed at once despite NO_IMM_CMPL");
    return r;
  }

  // Clears *req when it completed; throws if it failed. `what` names it in the error.
  void testSend(void*& req, const char* what) {
    if (!req) return;
    const ucs_status_t s = ucp_request_check_status(req);
    if (s == UCS_INPROGRESS) return;
    ucp_request_free(req);
    req = nullptr;
    if (s != UCS_OK) failTransfer("send of a", what, "to", s);
  }

  // Like testSend for a receive (always posted); true once complete, with *info filled in.
  bool testRecv(void*& req, ucp_tag_recv_info_t* info, const char* what) {
    SQZ_ENFORCE(req != nullptr, "testing a receive that was never posted");
    const ucs_status_t s = ucp_tag_recv_request_test(req, info);
    if (s == UCS_INPROGRESS) return false;
    ucp_request_free(req);
    req = nullptr;
    if (s != UCS_OK) failTransfer("receive of a", what, "from", s);
    return true;
  }

  [[noreturn]] void failTransfer(const char* op, const char* what, const char* dir,
                                 ucs_status_t s) {
    if (s == UCS_ERR_MESSAGE_TRUNCATED)
      raise(ErrorCode::kRemote, "rank ", myRank_, ": rank ", peerRank_, " sent a ", what,
            " longer than its header announced (UCX: ", ucs_status_string(s), ")");
    raise(ErrorCode::kRemote, "rank ", myRank_, ": UCX ", op, " ", what, " ", dir, " rank ",
          peerRank_, " failed: ", ucs_status_string(s),
          " (the peer exited, was aborted, or the network failed)");
  }

  // Completes sends in posting order. Returns true if any completed.
  bool pollSends() {
    bool advanced = false;
    while (!sends_.empty()) {
      SendMsg& m = sends_.front();
      testSend(m.headerReq, "header");
      testSend(m.payloadReq, "payload");
      if (m.headerReq || m.payloadReq) break;
      m.req->bytes = m.header.payloadBytes;
      m.req->done = true;
      sends_.pop_front();
      advanced = true;
    }
    return advanced;
  }

  // Checks every arrived header and posts its payload receive at once (so payloads of several
  // messages overlap); completes receives in posting order. Returns true if any advanced.
  bool pollRecvs() {
    bool advanced = false;
    for (RecvMsg& m : recvs_) {
      if (!m.headerArrived) {
        if (!testRecv(m.headerReq, &m.headerInfo, "header")) continue;
        m.headerArrived = true;
      }
      if (!m.headerChecked) {
        if (m.headerInfo.length != sizeof(WireHeader))
          raise(ErrorCode::kRemote, "rank ", myRank_, ": rank ", peerRank_, " sent a ",
                m.headerInfo.length, "-byte message header over UCX; a header is ",
                sizeof(WireHeader), " bytes");
        checkHeader(m.expected, m.header, m.capacity, myRank_);
        m.headerChecked = true;
        advanced = true;
        const size_t n = m.header.payloadBytes;
        if (n > 0) {
          m.payloadReq = postRecv(m.buf, n, makeTag(peerRank_, true, m.seq));
        } else {
          m.payloadDone = true;
        }
      }
      if (!m.payloadDone) {
        if (!testRecv(m.payloadReq, &m.payloadInfo, "payload")) continue;
        m.payloadDone = true;
      }
      if (m.header.payloadBytes > 0 && m.payloadInfo.length != m.header.payloadBytes)
        raise(ErrorCode::kRemote, "rank ", myRank_, ": rank ", peerRank_, " announced ",
              m.header.payloadBytes, " payload bytes but sent ", m.payloadInfo.length);
    }
    while (!recvs_.empty() && recvs_.front().payloadDone) {
      RecvMsg& m = recvs_.front();
      m.req->header = m.header;
      m.req->bytes = m.header.payloadBytes;
      m.req->done = true;
      recvs_.pop_front();
      advanced = true;
    }
    return advanced;
  }

  // The watch socket: EOF (or an error) means the peer closed its end. It carries no data, so a
  // byte on it is a peer that does not follow the protocol.
  void peekWatch() {
    if (watchClosed_) return;
    nextLivenessCheck_ = Clock::now() + std::chrono::milliseconds(kLivenessCheckMs);
    char byte;
    const ssize_t n = ::recv(watch_.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
      raise(ErrorCode::kRemote, "rank ", myRank_, ": rank ", peerRank_,
            " wrote to the UCX connection's watch socket, which carries no data");
    watchClosed_ = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  // Fails the pending requests of a peer that is gone, after the grace (see the file comment).
  void checkPeer(bool advanced) {
    if (!watchClosed_ && pending() && Clock::now() >= nextLivenessCheck_) peekWatch();
    const ucs_status_t epStatus =
        static_cast<ucs_status_t>(health_->status.load(std::memory_order_acquire));
    if (!watchClosed_ && epStatus == UCS_OK) return;
    const Deadline now = Clock::now();
    if (!goneSeen_ || advanced) graceEnd_ = now + std::chrono::milliseconds(kPeerGoneGraceMs);
    goneSeen_ = true;
    if (!pending() || now < graceEnd_) return;
    if (epStatus != UCS_OK)
      raise(ErrorCode::kRemote, "rank ", myRank_, ": the UCX endpoint to rank ", peerRank_,
            " failed (", ucs_status_string(epStatus), ") with ", recvs_.size(), " receive(s) and ",
            sends_.size(), " send(s) pending: that rank exited or the network between them failed");
    raise(ErrorCode::kRemote, "rank ", myRank_, ": rank ", peerRank_,
          " closed its UCX connection (it was aborted, destroyed its communicator or exited) "
          "with ",
          recvs_.size(), " receive(s) and ", sends_.size(), " send(s) still pending on rank ",
          myRank_);
  }

  // Receives not yet matched are cancelled, so no late message lands in a buffer the executor
  // gave up; every request handle goes back to UCX. The queues are dropped: those requests
  // never complete. Only on the thread that drives the connection.
  void cancelPending() {
    cancelled_ = true;
    ucp_worker_h w = worker_->handle();
    for (RecvMsg& m : recvs_)
      for (void* r : {m.headerReq, m.payloadReq})
        if (r) {
          ucp_request_cancel(w, r);
          ucp_request_free(r);
        }
    for (SendMsg& m : sends_)
      for (void* r : {m.headerReq, m.payloadReq})
        if (r) ucp_request_free(r);
    recvs_.clear();
    sends_.clear();
  }

  void teardown() {
    if (!cancelled_) cancelPending();
    if (!ep_) return;
    const bool broken = shut_.load(std::memory_order_acquire) || error_ || watchClosed_ ||
                        health_->status.load(std::memory_order_acquire) != UCS_OK;
    ucp_request_param_t p{};
    if (peerMode_) {
      if (!broken) {
        // What this rank sent must reach the peer before the watch socket says goodbye. A flush
        // that fails found the peer gone already: it finished its calls and needs nothing more.
        ucs_status_ptr_t r = ucp_ep_flush_nbx(ep_, &p);
        if (UCS_PTR_IS_PTR(r)) {
          const ucs_status_t s = worker_->waitFor(r, deadlineAfterMs(timeoutMs_));
          if (s == UCS_INPROGRESS) warnTeardown("flushing", s);
          ucp_request_free(r);
        }
      }
      // Drops the lanes at once and fails what is left on them, before any more progress could
      // move a payload into a buffer the executor gave up.
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    // Without peer error handling UCX does not allow a force close: a flushing close, bounded
    // (short when the peer is gone: what it left undone never completes).
    const int waitMs = peerMode_ ? kForceCloseWaitMs : broken ? kBrokenCloseWaitMs : timeoutMs_;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
    ep_ = nullptr;
    if (UCS_PTR_IS_PTR(r)) {
      const ucs_status_t s = worker_->waitFor(r, deadlineAfterMs(waitMs));
      if (s == UCS_INPROGRESS && !broken) warnTeardown("closing", s);
      ucp_request_free(r);
    }
  }

  void warnTeardown(const char* what, ucs_status_t s) {
    SQZ_WARN(kTransport, "rank ", myRank_, ": ", what, " the UCX endpoint to rank ", peerRank_,
             " at teardown did not finish (", ucs_status_string(s), "); destroying it anyway");
  }

  std::shared_ptr<UcxWorker> worker_;
  ucp_ep_h ep_;
  EpHealth* health_;     // owned by worker_
  const bool peerMode_;  // the endpoint has UCP_ERR_HANDLING_MODE_PEER
  Socket watch_;         // carries no data: it closes when the peer shuts down or its process ends
  const int myRank_;
  const int peerRank_;
  const int timeoutMs_;
  uint64_t seen_;  // the worker generation after this connection's last progress()
  uint64_t sendSeq_ = 0, recvSeq_ = 0;
  std::deque<SendMsg> sends_;  // deque: stable addresses for the header buffers UCX reads
  std::deque<RecvMsg> recvs_;  // deque: stable addresses for the headers UCX writes
  // shutdown() may come from another thread (an abort) while progress() runs; it only sets this
  // and shuts the watch socket. Everything else belongs to the driving thread.
  std::atomic<bool> shut_{false};
  bool cancelled_ = false;
  std::exception_ptr error_;  // the first error; rethrown by every later call
  bool watchClosed_ = false;
  Deadline nextLivenessCheck_{};
  bool goneSeen_ = false;
  Deadline graceEnd_{};
};

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const TransportContext& ctx)
      : myRank_(ctx.myRank), nranks_(ctx.nranks), timeoutMs_(ctx.config.timeoutMs) {
    if (nranks_ > kMaxRanks) {
      initError_ = strCat("the ucx transport tags messages with 24-bit ranks; ", nranks_,
                          " ranks do not fit");
    } else {
      worker_ = UcxWorker::create(myRank_, nranks_, &initError_);
    }
    if (!worker_) {
      initError_ = strCat("rank ", myRank_, ": UCX could not start (", initError_,
                          "); check UCX_TLS and UCX_NET_DEVICES, or leave ucx out of "
                          "SQZ_TRANSPORT");
      // With ucx the only choice, every pair would fail with a vaguer "no transport can reach
      // rank ..."; with others listed, they take over.
      const auto& names = ctx.config.transports;
      if (std::all_of(names.begin(), names.end(), [](const std::string& n) { return n == "ucx"; }))
        raise(ErrorCode::kSystem, initError_);
      SQZ_WARN(kTransport, initError_, "; using the other transports in SQZ_TRANSPORT");
    }
  }

  const char* name() const override { return "ucx"; }

  bool canConnect(const PeerInfo&, const PeerInfo&) const override { return worker_ != nullptr; }

  std::unique_ptr<Connection> connect(const LinkSetup& setup) override {
    if (!worker_) raise(ErrorCode::kSystem, initError_);
    const int peer = setup.peer.rank;
    SQZ_ENFORCE(setup.myRank == myRank_ && peer != myRank_ && peer >= 0 && peer < nranks_,
                "ucx connect from rank ", setup.myRank, " to rank ", peer);
    PeerLink& link = setup.link;
    // The lower rank speaks first, so the two blocking exchanges never wait on each other.
    std::string theirs;
    if (myRank_ < peer) {
      link.sendString(worker_->address());
      theirs = link.recvString(kMaxAddressBytes);
    } else {
      theirs = link.recvString(kMaxAddressBytes);
      link.sendString(worker_->address());
    }
    if (theirs.empty())
      raise(ErrorCode::kRemote, "rank ", peer, " sent an empty UCX worker address to rank ",
            myRank_);
    Socket watch = link.openDataSocket(kWatchSocketIndex);

    const UcxWorker::Endpoint e = worker_->connect(theirs, myRank_, peer);
    SQZ_INFO(kTransport, "rank ", myRank_, " -> rank ", peer, ": ucx endpoint (peer address ",
             theirs.size(), " bytes, error handling ", e.peerMode ? "PEER" : "NONE", ")");
    return std::make_unique<UcxConnection>(worker_, e, std::move(watch), myRank_, peer, timeoutMs_);
  }

 private:
  const int myRank_;
  const int nranks_;
  const int timeoutMs_;
  std::shared_ptr<UcxWorker> worker_;  // null when UCX could not start (initError_ says why)
  std::string initError_;
};

}  // namespace

std::unique_ptr<Transport> createUcxTransport(const TransportContext& ctx) {
  return std::make_unique<UcxTransport>(ctx);
}

}  // namespace squeeze
