// The shared-memory transport: see shm_transport.h for the layout and the naming rules.
//
// Pair setup over the PeerLink (lo = lower rank, hi = higher rank):
//   lo: create + map the pair segment P, initialize it
//   lo -> hi: name of P, name of lo's doorbell
//   hi: map P (check it), unlink P, map lo's doorbell
//   hi -> lo: name of hi's doorbell          (tells lo that hi mapped P and lo's doorbell)
//   lo: unlink P (a no-op by now), map hi's doorbell, count one peer on lo's doorbell
//   lo -> hi: ack                            (tells hi that lo mapped hi's doorbell)
//   hi: count one peer on hi's doorbell
// A rank unlinks its doorbell name once nranks - 1 peers have mapped it.
//
// Data path (progress()): sends copy from the queued messages into the outgoing ring and
// receives copy from the incoming ring into the posted buffers, with memcpy in pieces of up to
// one slice (a quarter of the ring, at most 256 KiB); after each slice and at the end the new
// head/tail is published with a release store and the peer's doorbell is rung, so the peer can
// work on the ring concurrently. One call moves at most one ring's worth per direction, so a huge
// message to a fast reader does not starve the other direction or the other connections. No
// system call happens unless the peer sleeps on its doorbell.
#include "transports/shm/shm_transport.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/logging.h"
#include "common/strings.h"
#include "core/config.h"
#include "transports/shm/doorbell.h"
#include "transports/shm/segment.h"

namespace squeeze {
namespace {

constexpr size_t kHeaderBytes = sizeof(WireHeader);
constexpr size_t kMaxSliceBytes = 256 << 10;
constexpr size_t kMaxNameBytes = 255;
constexpr uint64_t kPairMagic = 0x52494150'5a515153ull;  // "SQQZPAIR"
constexpr uint32_t kPairVersion = 1;
constexpr uint32_t kAckMagic = 0x4b434153;  // "SACK"
constexpr int kLivenessCheckMs = 100;
// The one data socket of an shm pair: the liveness watch (shm moves no data over sockets).
constexpr uint16_t kWatchSocketIndex = 0;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "ring counters live in shared memory");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "ring flags live in shared memory");
static_assert(sizeof(Doorbell) <= kPageBytes);

// The control block of one direction. head: bytes ever written (producer only); tail: bytes
// ever consumed (consumer only); closed: the producer shut down. Each on its own cache line.
struct RingCtl {
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) std::atomic<uint64_t> tail{0};
  alignas(64) std::atomic<uint32_t> closed{0};
};

// The first page of a pair segment. Ring data follows at kPageBytes: direction 0 (lo -> hi),
// then direction 1 (hi -> lo), each ringBytes rounded up to a page.
struct PairHeader {
  uint64_t magic;
  uint32_t version;
  int32_t loRank;
  int32_t hiRank;
  uint32_t reserved;
  uint64_t commHash;
  uint64_t ringBytes;
  alignas(64) RingCtl ctl[2];
};
static_assert(sizeof(PairHeader) <= kPageBytes);

size_t pairSegmentBytes(size_t ringBytes) { return kPageBytes + 2 * roundUpToPage(ringBytes); }

std::string bellName(uint64_t commHash, int rank) {
  return strCat(segmentPrefix(commHash), rank, "-", ::getpid(), "-bell");
}

std::string pairName(uint64_t commHash, int lo, int hi) {
  return strCat(segmentPrefix(commHash), lo, "-", hi, "-", ::getpid(), "-pair");
}

// Names received from a peer must be ones it could have made for this pair: we open them, and
// unlink the pair segment.
void checkPeerName(const std::string& name, const std::string& prefix, const std::string& suffix,
                   int peerRank) {
  const bool ok = name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) &&
                  name.ends_with(suffix) && name.find('/', 1) == std::string::npos;
  if (!ok)
    raise(ErrorCode::kRemote, "rank ", peerRank, " sent '", name,
          "' as a shared-memory segment name; expected ", prefix, "<pid>", suffix);
}

// This rank's doorbell: the mapping and its name while linked. Shared by the transport and its
// connections (a connection may outlive the transport).
class BellSegment {
 public:
  BellSegment(std::string name, Mapping map) : name_(std::move(name)), map_(std::move(map)) {
    bell_ = new (map_.data()) Doorbell();
  }
  ~BellSegment() { unlinkName(); }
  Doorbell* bell() const { return bell_; }
  const std::string& name() const { return name_; }
  // Idempotent.
  void unlinkName() {
    if (!unlinked_.exchange(true)) ::shm_unlink(name_.c_str());
  }

 private:
  std::string name_;
  Mapping map_;
  Doorbell* bell_;
  std::atomic<bool> unlinked_{false};
};

// One direction of a pair as one side sees it.
struct RingView {
  RingCtl* ctl = nullptr;
  uint8_t* data = nullptr;
};

class ShmConnection : public Connection {
 public:
  ShmConnection(int myRank, int peerRank, size_t ringBytes, Mapping pair, Mapping peerBellMap,
                std::shared_ptr<BellSegment> selfBell, Socket watch)
      : myRank_(myRank),
        peerRank_(peerRank),
        ringBytes_(ringBytes),
        sliceBytes_(std::min(ringBytes, std::clamp(ringBytes / 4, kPageBytes, kMaxSliceBytes))),
        pair_(std::move(pair)),
        peerBellMap_(std::move(peerBellMap)),
        peerBell_(reinterpret_cast<Doorbell*>(peerBellMap_.data())),
        selfBell_(std::move(selfBell)),
        watch_(std::move(watch)) {
    auto* hdr = reinterpret_cast<PairHeader*>(pair_.data());
    const bool lo = myRank_ < peerRank_;
    const size_t stride = roundUpToPage(ringBytes_);
    RingView dir[2] = {{&hdr->ctl[0], pair_.data() + kPageBytes},
                       {&hdr->ctl[1], pair_.data() + kPageBytes + stride}};
    out_ = dir[lo ? 0 : 1];
    in_ = dir[lo ? 1 : 0];
    head_ = out_.ctl->head.load(std::memory_order_relaxed);
    tail_ = in_.ctl->tail.load(std::memory_order_relaxed);
  }

  ~ShmConnection() override { markClosed(); }

  const char* transportName() const override { return "shm"; }

  void isend(const WireHeader& header, const void* payload, TransferRequest* req) override {
    SQZ_ENFORCE(req != nullptr);
    SQZ_ENFORCE(payload != nullptr || header.payloadBytes == 0, "isend of ", header.payloadBytes,
                " bytes from a null payload");
    req->done = false;
    req->bytes = 0;
    sends_.push_back(SendOp{header, static_cast<const uint8_t*>(payload),
                            kHeaderBytes + header.payloadBytes, 0, req});
  }

  void irecv(const WireHeader& expected, void* buf, size_t capacity,
             TransferRequest* req) override {
    SQZ_ENFORCE(req != nullptr);
    SQZ_ENFORCE(buf != nullptr || capacity == 0, "irecv into a null buffer of ", capacity,
                " bytes");
    req->done = false;
    req->bytes = 0;
    recvs_.push_back(
        RecvOp{expected, WireHeader{}, static_cast<uint8_t*>(buf), capacity, 0, kHeaderBytes, req});
  }

  bool progress() override {
    if (error_) std::rethrow_exception(error_);
    if (shut_.load(std::memory_order_acquire)) return false;
    try {
      // Read the flag before the head: everything the peer wrote before closing is then visible.
      const bool peerClosed =
          in_.ctl->closed.load(std::memory_order_acquire) != 0 || peerProcessGone();
      bool moved = pushSends();
      moved |= pullRecvs();
      // A send to a closed peer can never be read; a receive fails once the ring is drained.
      if (peerClosed &&
          (!sends_.empty() ||
           (!recvs_.empty() && in_.ctl->head.load(std::memory_order_acquire) == tail_)))
        raise(ErrorCode::kRemote, "rank ", peerRank_,
              watchClosed_ ? " exited or was killed (its process closed the liveness socket to rank "
                           : " closed the shared-memory connection to rank ",
              myRank_, watchClosed_ ? ")" : "", " with ", recvs_.size(), " receive(s) and ",
              sends_.size(), " send(s) still pending on rank ", myRank_);
      return moved;
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }

  void addWaitSources(WaitSources& sources) override { sources.doorbell = selfBell_->bell(); }

  void shutdown() override {
    markClosed();
    shut_.store(true, std::memory_order_release);
    watch_.shutdownBoth();
  }

 private:
  struct SendOp {
    WireHeader header;
    const uint8_t* payload;
    uint64_t total;  // header + payload bytes
    uint64_t sent;
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

  // Liveness: shared memory tells nothing when a peer dies, but the kernel closes the peer's end of
  // the watch socket with its process. Looked at every kLivenessCheckMs at most: a recv that
  // peeks, which costs nothing while the ring is busy.
  bool peerProcessGone() {
    if (watchClosed_) return true;
    const Deadline now = Clock::now();
    if (now < nextLivenessCheck_) return false;
    nextLivenessCheck_ = now + std::chrono::milliseconds(kLivenessCheckMs);
    char byte;
    const ssize_t n = ::recv(watch_.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    watchClosed_ = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    return watchClosed_;
  }

  void markClosed() {
    if (closedSent_.exchange(true)) return;
    out_.ctl->closed.store(1, std::memory_order_release);
    peerBell_->ring();
  }

  void copyIn(uint64_t pos, const void* src, size_t n) {
    const size_t off = static_cast<size_t>(pos % ringBytes_);
    const size_t first = std::min(n, ringBytes_ - off);
    std::memcpy(out_.data + off, src, first);
    if (n > first) std::memcpy(out_.data, static_cast<const uint8_t*>(src) + first, n - first);
  }

  void copyOut(uint64_t pos, void* dst, size_t n) const {
    const size_t off = static_cast<size_t>(pos % ringBytes_);
    const size_t first = std::min(n, ringBytes_ - off);
    std::memcpy(dst, in_.data + off, first);
    if (n > first) std::memcpy(static_cast<uint8_t*>(dst) + first, in_.data, n - first);
  }

  // Copies queued messages into the outgoing ring. Returns true if any byte moved.
  bool pushSends() {
    if (sends_.empty()) return false;
    uint64_t tail = out_.ctl->tail.load(std::memory_order_acquire);
    uint64_t published = head_;
    bool moved = false;
    auto publish = [&] {
      out_.ctl->head.store(head_, std::memory_order_release);
      peerBell_->ring();
      published = head_;
      moved = true;
    };
    const uint64_t stop = head_ + ringBytes_;  // at most one ring's worth per call
    while (!sends_.empty() && head_ < stop) {
      uint64_t space = ringBytes_ - (head_ - tail);
      if (space == 0) {
        tail = out_.ctl->tail.load(std::memory_order_acquire);
        space = ringBytes_ - (head_ - tail);
        if (space == 0) break;
      }
      SendOp& op = sends_.front();
      size_t n;
      if (op.sent < kHeaderBytes) {
        n = static_cast<size_t>(std::min<uint64_t>(kHeaderBytes - op.sent, space));
        copyIn(head_, reinterpret_cast<const uint8_t*>(&op.header) + op.sent, n);
      } else {
        n = static_cast<size_t>(std::min<uint64_t>({op.total - op.sent, space, sliceBytes_}));
        copyIn(head_, op.payload + (op.sent - kHeaderBytes), n);
      }
      head_ += n;
      op.sent += n;
      if (op.sent == op.total) {
        op.req->bytes = op.total - kHeaderBytes;
        op.req->done = true;
        sends_.pop_front();
      }
      if (head_ - published >= sliceBytes_) publish();
    }
    if (head_ != published) publish();
    return moved;
  }

  // Copies arrived bytes into the posted receives, checking each header before its payload.
  // Returns true if any byte moved.
  bool pullRecvs() {
    if (recvs_.empty()) return false;
    uint64_t head = in_.ctl->head.load(std::memory_order_acquire);
    uint64_t published = tail_;
    bool moved = false;
    auto publish = [&] {
      in_.ctl->tail.store(tail_, std::memory_order_release);
      peerBell_->ring();
      published = tail_;
      moved = true;
    };
    const uint64_t stop = tail_ + ringBytes_;  // at most one ring's worth per call
    while (!recvs_.empty() && tail_ < stop) {
      uint64_t avail = head - tail_;
      if (avail == 0) {
        head = in_.ctl->head.load(std::memory_order_acquire);
        avail = head - tail_;
        if (avail == 0) break;
      }
      RecvOp& op = recvs_.front();
      if (op.got < kHeaderBytes) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kHeaderBytes - op.got, avail));
        copyOut(tail_, reinterpret_cast<uint8_t*>(&op.header) + op.got, n);
        tail_ += n;
        op.got += n;
        if (op.got < kHeaderBytes) continue;
        checkHeader(op.expected, op.header, op.capacity, myRank_);
        op.total = kHeaderBytes + op.header.payloadBytes;
      } else {
        const size_t n =
            static_cast<size_t>(std::min<uint64_t>({op.total - op.got, avail, sliceBytes_}));
        copyOut(tail_, op.buf + (op.got - kHeaderBytes), n);
        tail_ += n;
        op.got += n;
      }
      if (op.got == op.total) {
        op.req->header = op.header;
        op.req->bytes = op.header.payloadBytes;
        op.req->done = true;
        recvs_.pop_front();
      }
      if (tail_ - published >= sliceBytes_) publish();
    }
    if (tail_ != published) publish();
    return moved;
  }

  const int myRank_;
  const int peerRank_;
  const size_t ringBytes_;
  const size_t sliceBytes_;
  Mapping pair_;
  Mapping peerBellMap_;
  Doorbell* peerBell_;
  std::shared_ptr<BellSegment> selfBell_;
  RingView out_;
  RingView in_;
  uint64_t head_ = 0;  // our copy of out_.ctl->head (we are its only writer)
  uint64_t tail_ = 0;  // our copy of in_.ctl->tail (we are its only writer)
  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  // shutdown() may come from another thread (an abort) while progress() runs.
  std::atomic<bool> shut_{false};
  std::atomic<bool> closedSent_{false};
  std::exception_ptr error_;  // the first error progress() threw; rethrown ever after
  Socket watch_;  // carries no data: it closes when the peer's process ends
  bool watchClosed_ = false;
  Deadline nextLivenessCheck_{};
};

class ShmTransport : public Transport {
 public:
  explicit ShmTransport(const TransportContext& ctx)
      : myRank_(ctx.myRank), nranks_(ctx.nranks), commHash_(ctx.commHash) {
    const std::string name = bellName(commHash_, myRank_);
    Mapping m = createSegment(name, kPageBytes);
    bell_ = std::make_shared<BellSegment>(name, std::move(m));
    if (nranks_ <= 1) bell_->unlinkName();
  }

  ~ShmTransport() override { bell_->unlinkName(); }

  // Every local peer that will map the doorbell has mapped it by now.
  void setupDone() override { bell_->unlinkName(); }

  const char* name() const override { return "shm"; }

  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override {
    return !self.hostId.empty() && self.hostId == peer.hostId && self.rank != peer.rank;
  }

  std::unique_ptr<Connection> connect(const LinkSetup& setup) override {
    const int peer = setup.peer.rank;
    SQZ_ENFORCE(setup.myRank == myRank_ && peer != myRank_ && peer >= 0 && peer < nranks_,
                "shm connect from rank ", setup.myRank, " to rank ", peer);
    SQZ_ENFORCE_EQ(setup.commHash, commHash_);
    PeerLink& link = setup.link;
    Mapping pair;
    Mapping peerBell;
    size_t ringBytes = 0;
    if (myRank_ < peer) {
      ringBytes = setup.config.shmBufferBytes;
      SQZ_ENFORCE(ringBytes >= kHeaderBytes, "shmBufferBytes=", ringBytes);
      const std::string pname = pairName(commHash_, myRank_, peer);
      pair = createSegment(pname, pairSegmentBytes(ringBytes));
      NameGuard pairGuard(pname);
      auto* hdr = new (pair.data()) PairHeader{};
      hdr->version = kPairVersion;
      hdr->loRank = myRank_;
      hdr->hiRank = peer;
      hdr->commHash = commHash_;
      hdr->ringBytes = ringBytes;
      hdr->magic = kPairMagic;
      link.sendString(pname);
      link.sendString(bell_->name());
      const std::string peerBellName = link.recvString(kMaxNameBytes);
      pairGuard.unlink();  // the peer has mapped it (it answers only after mapping)
      checkPeerName(peerBellName, strCat(segmentPrefix(commHash_), peer, "-"), "-bell",
                    peer);
      peerBell = openSegment(peerBellName, sizeof(Doorbell), peer);
      noteBellMapped();
      link.sendBytes(&kAckMagic, sizeof kAckMagic);
    } else {
      const std::string pname = link.recvString(kMaxNameBytes);
      const std::string peerBellName = link.recvString(kMaxNameBytes);
      const std::string prefix = segmentPrefix(commHash_);
      checkPeerName(pname, strCat(prefix, peer, "-", myRank_, "-"), "-pair", peer);
      checkPeerName(peerBellName, strCat(prefix, peer, "-"), "-bell", peer);
      {
        NameGuard pairGuard(pname);  // unlinked as soon as mapped, success or not
        pair = openSegment(pname, kPageBytes, peer);
      }
      const auto* hdr = reinterpret_cast<const PairHeader*>(pair.data());
      if (hdr->magic != kPairMagic || hdr->version != kPairVersion || hdr->loRank != peer ||
          hdr->hiRank != myRank_ || hdr->commHash != commHash_ || hdr->ringBytes < kHeaderBytes ||
          hdr->ringBytes > kMaxShmBufferBytes || pair.size() < pairSegmentBytes(hdr->ringBytes))
        raise(ErrorCode::kRemote, "rank ", myRank_, ": shared-memory segment ", pname,
              " from rank ", peer, " is not a ring segment for this pair of this communicator");
      ringBytes = hdr->ringBytes;
      if (ringBytes != setup.config.shmBufferBytes)
        SQZ_WARN(kTransport, "shm connection to rank ", peer, " uses rank ", peer, "'s ring size ",
                 formatBytes(ringBytes), ", not this rank's ",
                 formatBytes(setup.config.shmBufferBytes));
      peerBell = openSegment(peerBellName, sizeof(Doorbell), peer);
      link.sendString(bell_->name());
      uint32_t ack = 0;
      link.recvBytes(&ack, sizeof ack);
      if (ack != kAckMagic)
        raise(ErrorCode::kRemote, "rank ", peer, " sent a bad shm setup acknowledgement");
      noteBellMapped();
    }
    Socket watch = link.openDataSocket(kWatchSocketIndex);
    SQZ_INFO(kTransport, "shm connection to rank ", peer, ", ring ", formatBytes(ringBytes));
    return std::make_unique<ShmConnection>(myRank_, peer, ringBytes, std::move(pair),
                                           std::move(peerBell), bell_, std::move(watch));
  }

 private:
  // A peer has mapped this rank's doorbell; once all could have, its name goes.
  void noteBellMapped() {
    std::lock_guard<std::mutex> lock(mu_);
    if (++mappedPeers_ >= nranks_ - 1) bell_->unlinkName();
  }

  const int myRank_;
  const int nranks_;
  const uint64_t commHash_;
  std::shared_ptr<BellSegment> bell_;
  std::mutex mu_;  // protects mappedPeers_ (connect() may run concurrently for different peers)
  int mappedPeers_ = 0;
};

}  // namespace

std::unique_ptr<Transport> createShmTransport(const TransportContext& ctx) {
  return std::make_unique<ShmTransport>(ctx);
}

}  // namespace squeeze
