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
//   both: open the liveness socket (PeerLink::openDataSocket)
//   both: the single-copy negotiation (transports/shm/cma.h): probe each other's memory with
//         process_vm_readv, exchange the outcomes, agree on each direction's threshold
// A rank unlinks its doorbell name once nranks - 1 peers have mapped it.
//
// Data path (progress()): sends copy from the queued messages into the outgoing ring and
// receives copy from the incoming ring into the posted buffers, with memcpy in pieces of up to
// one slice (a quarter of the ring, at most 256 KiB); after each slice and at the end the new
// head/tail is published with a release store and the peer's doorbell is rung, so the peer can
// work on the ring concurrently. One call moves at most one ring's worth per direction, so a huge
// message to a fast reader does not starve the other direction or the other connections. No
// system call happens unless the peer sleeps on its doorbell.
//
// Single copy: in a direction whose threshold is not 0, a message of at least that many payload
// bytes is its header followed by a SingleCopyDesc. kDescRead: the payload stays in the sender's
// buffer; the receiver checks the header, then copies the payload with process_vm_readv straight
// into the posted buffer (at most kReadBudgetBytes per progress() call, in pieces), then bumps the
// direction's readDone counter and rings the sender, whose request completes only then (it must
// not reuse its buffer before). kDescInline: the payload follows in the ring as usual (the
// sender's buffer is memory another process cannot read, see crossReadable). Small messages
// queued behind a large one stream on meanwhile: the ring never waits for a read.
// Failure: a sender that shuts down sets its closed flag before its caller may reuse the buffer,
// so a receiver that finds the flag (or a dead process) after a read discards what it read and
// throws Error(kRemote); a sender whose receiver closes or dies with reads outstanding throws
// Error(kRemote) too.
#include "transports/shm/shm_transport.h"

#include <fcntl.h>
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

#include "base/error.h"
#include "base/logging.h"
#include "base/strings.h"
#include "transports/shm/cma.h"
#include "transports/shm/doorbell.h"
#include "transports/shm/segment.h"
#include "transports/shm/window.h"

namespace squeeze {
namespace {

constexpr size_t kHeaderBytes = sizeof(WireHeader);
constexpr size_t kMaxSliceBytes = 256 << 10;
constexpr size_t kMaxNameBytes = 255;
constexpr uint64_t kPairMagic = 0x52494150'5a515153ull;  // "SQQZPAIR"
constexpr uint32_t kPairVersion = 1;
constexpr uint32_t kAckMagic = 0x4b434153;  // "SACK"
constexpr int kLivenessCheckMs = 100;
constexpr uint32_t kDescMagic = 0x43535153;  // "SQSC"
constexpr uint32_t kDescRead = 1;    // the receiver reads the payload from the sender's memory
constexpr uint32_t kDescInline = 2;  // the payload follows in the ring
// Single-copy reads: at most this much per progress() call (like the ring's one ring's worth, so
// other connections and an abort are served), in process_vm_readv calls of at most a piece.
constexpr size_t kReadBudgetBytes = 4 << 20;
constexpr size_t kReadPieceBytes = 1 << 20;
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

// Single-copy messages the consumer of one direction finished reading from the producer's
// memory (consumer only), on its own cache line.
struct ReadCounter {
  alignas(64) std::atomic<uint64_t> done{0};
};

// What follows the header of a message at or over its direction's single-copy threshold.
struct SingleCopyDesc {
  uint32_t magic;
  uint32_t mode;   // kDescRead or kDescInline
  uint64_t addr;   // kDescRead: the payload's address in the sender's process
  uint64_t bytes;  // the payload's length (equal to the header's payloadBytes)
  uint64_t seq;    // kDescRead: this direction's count of reads, this one included
};
static_assert(sizeof(SingleCopyDesc) == 32, "SingleCopyDesc is part of the ring format");
constexpr size_t kDescBytes = sizeof(SingleCopyDesc);

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
  // After ctl so that the fields above keep their offsets (version 1 of the layout, which the
  // setup fuzzer writes); the segment is zero-initialized, so both start at 0.
  ReadCounter readDone[2];
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
  BellSegment(std::string name, Mapping map)
      : name_(std::move(name)), map_(std::make_shared<Mapping>(std::move(map))) {
    bell_ = new (map_->data()) Doorbell();
  }
  ~BellSegment() { unlinkName(); }
  Doorbell* bell() const { return bell_; }
  const std::string& name() const { return name_; }
  // The whole segment: the doorbell page, then this rank's window if it has one.
  std::shared_ptr<const Mapping> mapping() const { return map_; }
  // Idempotent.
  void unlinkName() {
    if (!unlinked_.exchange(true)) ::shm_unlink(name_.c_str());
  }

 private:
  std::string name_;
  std::shared_ptr<Mapping> map_;
  Doorbell* bell_;
  std::atomic<bool> unlinked_{false};
};

// One direction of a pair as one side sees it.
struct RingView {
  RingCtl* ctl = nullptr;
  uint8_t* data = nullptr;
  std::atomic<uint64_t>* readDone = nullptr;
};

class ShmConnection : public Connection {
 public:
  ShmConnection(int myRank, int peerRank, size_t ringBytes, Mapping pair,
                std::shared_ptr<const Mapping> peerBellMap, std::shared_ptr<BellSegment> selfBell,
                Socket watch, const SingleCopyPlan& plan)
      : myRank_(myRank),
        peerRank_(peerRank),
        ringBytes_(ringBytes),
        sliceBytes_(std::min(ringBytes, std::clamp(ringBytes / 4, kPageBytes, kMaxSliceBytes))),
        outThreshold_(plan.outThreshold),
        inThreshold_(plan.inThreshold),
        peerPid_(plan.peerPid),
        pair_(std::move(pair)),
        peerBellMap_(std::move(peerBellMap)),
        peerBell_(reinterpret_cast<Doorbell*>(peerBellMap_->data())),
        selfBell_(std::move(selfBell)),
        watch_(std::move(watch)) {
    auto* hdr = reinterpret_cast<PairHeader*>(pair_.data());
    const bool lo = myRank_ < peerRank_;
    const size_t stride = roundUpToPage(ringBytes_);
    RingView dir[2] = {{&hdr->ctl[0], pair_.data() + kPageBytes, &hdr->readDone[0].done},
                       {&hdr->ctl[1], pair_.data() + kPageBytes + stride, &hdr->readDone[1].done}};
    out_ = dir[lo ? 0 : 1];
    in_ = dir[lo ? 1 : 0];
    head_ = out_.ctl->head.load(std::memory_order_relaxed);
    tail_ = in_.ctl->tail.load(std::memory_order_relaxed);
  }

  ~ShmConnection() override { markClosed(); }

  const char* transportName() const override { return "shm"; }

  void isend(const WireHeader& header, const void* payload, TransferRequest* req) override {
    beginSend(header, payload, req);
    SendOp op{};
    std::memcpy(op.prefix, &header, kHeaderBytes);
    op.prefixBytes = kHeaderBytes;
    op.payload = static_cast<const uint8_t*>(payload);
    op.payloadBytes = header.payloadBytes;
    op.req = req;
    uint64_t ringPayload = header.payloadBytes;
    if (outThreshold_ != 0 && header.payloadBytes >= outThreshold_) {
      SingleCopyDesc d{kDescMagic, kDescInline, 0, header.payloadBytes, 0};
      if (crossReadable(payload, header.payloadBytes)) {
        d.mode = kDescRead;
        d.addr = reinterpret_cast<uintptr_t>(payload);
        d.seq = op.readSeq = ++readsIssued_;
        ringPayload = 0;
      } else {
        ++ringFallbackSends_;
        if (ringFallbackSends_ == 1)
          SQZ_INFO(kTransport, "rank ", myRank_, ": a ", formatBytes(header.payloadBytes),
                   " buffer sent to rank ", peerRank_,
                   " is memory another process cannot read (device-mapped?); such messages go "
                   "through the shm ring (two copies)");
      }
      std::memcpy(op.prefix + kHeaderBytes, &d, kDescBytes);
      op.prefixBytes += kDescBytes;
    }
    op.total = op.prefixBytes + ringPayload;
    sends_.push_back(op);
  }

  void irecv(const WireHeader& expected, void* buf, size_t capacity,
             TransferRequest* req) override {
    beginRecv(buf, capacity, req);
    RecvOp op{};
    op.expected = expected;
    op.buf = static_cast<uint8_t*>(buf);
    op.capacity = capacity;
    op.req = req;
    recvs_.push_back(op);
  }

  bool progress() override {
    if (error_) std::rethrow_exception(error_);
    if (shut_.load(std::memory_order_acquire)) return false;
    try {
      // Read the flag before the head and readDone: everything the peer wrote before closing is
      // then visible.
      const bool peerClosed =
          in_.ctl->closed.load(std::memory_order_acquire) != 0 || peerProcessGone();
      bool moved = pushSends();
      moved |= reapReads();
      moved |= pullRecvs();
      // A send to a closed peer can never be read (nor a single-copy one finished); a receive
      // fails once the ring is drained.
      if (peerClosed &&
          (!sends_.empty() || !awaiting_.empty() ||
           (!recvs_.empty() && in_.ctl->head.load(std::memory_order_acquire) == tail_)))
        raise(ErrorCode::kRemote, "rank ", peerRank_,
              watchClosed_ ? " exited or was killed (its process closed the liveness socket to rank "
                           : " closed the shared-memory connection to rank ",
              myRank_, watchClosed_ ? ")" : "", " with ", recvs_.size(), " receive(s) and ",
              sends_.size() + awaiting_.size(), " send(s) still pending on rank ", myRank_);
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

  ShmConnectionStats stats() const {
    return ShmConnectionStats{outThreshold_, inThreshold_, singleCopySends_, singleCopyReceives_,
                              ringFallbackSends_};
  }

 private:
  struct SendOp {
    uint8_t prefix[kHeaderBytes + kDescBytes];  // the header, then the descriptor if any
    uint32_t prefixBytes;
    const uint8_t* payload;
    uint64_t payloadBytes;
    uint64_t total;    // bytes that go through the ring: the prefix, then the payload if inline
    uint64_t sent;     // of total
    uint64_t readSeq;  // 0: done once in the ring; else done when readDone reaches it
    TransferRequest* req;
  };
  // A single-copy send whose descriptor is in the ring, waiting for the peer's read.
  struct AwaitedRead {
    uint64_t seq;
    uint64_t bytes;
    TransferRequest* req;
  };
  enum class Phase : uint8_t { kHeader, kDesc, kInline, kRead };
  struct RecvOp {
    WireHeader expected;
    WireHeader header;
    uint8_t* buf;
    size_t capacity;
    TransferRequest* req;
    Phase phase;   // what the next bytes are
    uint64_t got;  // bytes of the current part (header, descriptor or payload) received
    SingleCopyDesc desc;
  };

  // Liveness: shared memory tells nothing when a peer dies, but the kernel closes the peer's end of
  // the watch socket with its process. Looked at every kLivenessCheckMs at most (a recv that
  // peeks, which costs nothing while the ring is busy), or now when `now` is set.
  bool peerProcessGone(bool now = false) {
    if (watchClosed_) return true;
    const Deadline t = Clock::now();
    if (!now && t < nextLivenessCheck_) return false;
    nextLivenessCheck_ = t + std::chrono::milliseconds(kLivenessCheckMs);
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
      if (op.sent < op.prefixBytes) {
        n = static_cast<size_t>(std::min<uint64_t>(op.prefixBytes - op.sent, space));
        copyIn(head_, op.prefix + op.sent, n);
      } else {
        n = static_cast<size_t>(std::min<uint64_t>({op.total - op.sent, space, sliceBytes_}));
        copyIn(head_, op.payload + (op.sent - op.prefixBytes), n);
      }
      head_ += n;
      op.sent += n;
      if (op.sent == op.total) {
        if (op.readSeq != 0) {
          awaiting_.push_back(AwaitedRead{op.readSeq, op.payloadBytes, op.req});
        } else {
          op.req->bytes = op.payloadBytes;
          op.req->done = true;
        }
        sends_.pop_front();
      }
      if (head_ - published >= sliceBytes_) publish();
    }
    if (head_ != published) publish();
    return moved;
  }

  // Completes the single-copy sends the peer has finished reading. Returns true if any did.
  bool reapReads() {
    if (awaiting_.empty()) return false;
    const uint64_t done = out_.readDone->load(std::memory_order_acquire);
    if (done > readsIssued_)
      raise(ErrorCode::kRemote, "rank ", peerRank_, " reports ", done,
            " single-copy reads from rank ", myRank_, ", which sent only ", readsIssued_);
    bool moved = false;
    while (!awaiting_.empty() && awaiting_.front().seq <= done) {
      awaiting_.front().req->bytes = awaiting_.front().bytes;
      awaiting_.front().req->done = true;
      awaiting_.pop_front();
      ++singleCopySends_;
      moved = true;
    }
    return moved;
  }

  void completeRecv(RecvOp& op) {
    op.req->header = op.header;
    op.req->bytes = op.header.payloadBytes;
    op.req->done = true;
    recvs_.pop_front();
  }

  void checkDesc(const RecvOp& op) const {
    const SingleCopyDesc& d = op.desc;
    const bool modeOk = d.mode == kDescInline || (d.mode == kDescRead && d.seq == readsDone_ + 1);
    if (d.magic != kDescMagic || !modeOk || d.bytes != op.header.payloadBytes)
      raise(ErrorCode::kRemote, "rank ", peerRank_, " sent a malformed single-copy descriptor",
            " to rank ", myRank_, " (magic ", d.magic, ", mode ", d.mode, ", ", d.bytes,
            " bytes for a ", op.header.payloadBytes, "-byte payload, read ", d.seq, " where ",
            readsDone_ + 1, " was next) in ", describeCall(op.header));
  }

  // Reads op's payload from the peer's memory, up to `budget` bytes. Returns the bytes read;
  // stops early, without an error, when this side is shut down.
  size_t readPayload(RecvOp& op, size_t budget) {
    const uint64_t len = op.header.payloadBytes;
    size_t moved = 0;
    while (op.got < len && moved < budget && !shut_.load(std::memory_order_acquire)) {
      const size_t want =
          static_cast<size_t>(std::min<uint64_t>({len - op.got, budget - moved, kReadPieceBytes}));
      const ssize_t n = readPeerMemory(peerPid_, op.buf + op.got, op.desc.addr + op.got, want);
      if (n == -EINTR) continue;
      if (n <= 0) {
        if (shut_.load(std::memory_order_acquire)) break;
        const int err = n == 0 ? EFAULT : static_cast<int>(-n);
        // A sender that went away explains the failure best. Its process may be gone before the
        // kernel closes its liveness socket: then the read says ESRCH.
        checkSenderStillThere(op);
        if (err == ESRCH)
          raise(ErrorCode::kRemote, "rank ", peerRank_, " exited or was killed (its process ",
                peerPid_, " is gone) while rank ", myRank_, " was reading a ", formatBytes(len),
                " message from its memory in ", describeCall(op.header));
        throw SysError(strCat("rank ", myRank_, " reading a ", formatBytes(len),
                              " single-copy message from rank ", peerRank_, "'s memory (pid ",
                              peerPid_, ") with process_vm_readv (", crossReadHint(err),
                              "; SQZ_SHM_SINGLE_COPY_BYTES=0 copies through the ring instead)"),
                       err);
      }
      op.got += static_cast<uint64_t>(n);
      moved += static_cast<size_t>(n);
    }
    return moved;
  }

  // After (or instead of) a read: a sender that closed or died may have let its buffer be reused
  // while we read, so what we read is not its message. The fence orders the read before the
  // flag's load: the sender sets the flag before its caller can touch the buffer again.
  void checkSenderStillThere(const RecvOp& op) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const bool closed = in_.ctl->closed.load(std::memory_order_seq_cst) != 0;
    if (closed || peerProcessGone(/*now=*/true))
      raise(ErrorCode::kRemote, "rank ", peerRank_,
            closed ? " closed the shared-memory connection" : " exited or was killed",
            " while rank ", myRank_, " was reading a ", formatBytes(op.header.payloadBytes),
            " message from its memory in ", describeCall(op.header));
  }

  // Copies arrived bytes into the posted receives, checking each header before its payload,
  // and reads single-copy payloads from the peer. Returns true if anything moved.
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
    size_t readBudget = kReadBudgetBytes;
    while (!recvs_.empty()) {
      RecvOp& op = recvs_.front();
      if (op.phase == Phase::kRead) {
        if (readBudget == 0) break;
        // The sender may refill the ring while we read. No ring of its bell: the read's
        // completion rings it, and waking a sender with nothing to do costs a context switch.
        if (tail_ != published) {
          in_.ctl->tail.store(tail_, std::memory_order_release);
          published = tail_;
          moved = true;
        }
        const size_t n = readPayload(op, readBudget);
        readBudget -= n;
        moved |= n > 0;
        if (op.got < op.header.payloadBytes) break;  // budget spent, or shut down
        checkSenderStillThere(op);
        in_.readDone->store(++readsDone_, std::memory_order_release);
        peerBell_->ring();
        ++singleCopyReceives_;
        completeRecv(op);
        moved = true;
        continue;
      }
      if (tail_ >= stop) break;
      uint64_t avail = head - tail_;
      if (avail == 0) {
        head = in_.ctl->head.load(std::memory_order_acquire);
        avail = head - tail_;
        if (avail == 0) break;
      }
      if (op.phase == Phase::kHeader) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kHeaderBytes - op.got, avail));
        copyOut(tail_, reinterpret_cast<uint8_t*>(&op.header) + op.got, n);
        tail_ += n;
        op.got += n;
        if (op.got < kHeaderBytes) continue;
        checkHeader(op.expected, op.header, op.capacity, myRank_);
        op.got = 0;
        op.phase = inThreshold_ != 0 && op.header.payloadBytes >= inThreshold_ ? Phase::kDesc
                                                                               : Phase::kInline;
      } else if (op.phase == Phase::kDesc) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kDescBytes - op.got, avail));
        copyOut(tail_, reinterpret_cast<uint8_t*>(&op.desc) + op.got, n);
        tail_ += n;
        op.got += n;
        if (op.got < kDescBytes) continue;
        checkDesc(op);
        op.got = 0;
        op.phase = op.desc.mode == kDescRead ? Phase::kRead : Phase::kInline;
      } else {
        const size_t n = static_cast<size_t>(
            std::min<uint64_t>({op.header.payloadBytes - op.got, avail, sliceBytes_}));
        copyOut(tail_, op.buf + op.got, n);
        tail_ += n;
        op.got += n;
      }
      if (op.phase == Phase::kInline && op.got == op.header.payloadBytes) completeRecv(op);
      if (tail_ - published >= sliceBytes_) publish();
    }
    if (tail_ != published) publish();
    return moved;
  }

  const int myRank_;
  const int peerRank_;
  const size_t ringBytes_;
  const size_t sliceBytes_;
  const size_t outThreshold_;  // single copy this rank -> peer from this many bytes (0: never)
  const size_t inThreshold_;   // single copy peer -> this rank from this many bytes (0: never)
  const pid_t peerPid_;
  Mapping pair_;
  std::shared_ptr<const Mapping> peerBellMap_;  // the peer's segment (shared with the window)
  Doorbell* peerBell_;
  std::shared_ptr<BellSegment> selfBell_;
  RingView out_;
  RingView in_;
  uint64_t head_ = 0;  // our copy of out_.ctl->head (we are its only writer)
  uint64_t tail_ = 0;  // our copy of in_.ctl->tail (we are its only writer)
  uint64_t readsIssued_ = 0;  // single-copy sends described so far
  uint64_t readsDone_ = 0;    // our copy of *in_.readDone (we are its only writer)
  std::deque<SendOp> sends_;
  std::deque<AwaitedRead> awaiting_;
  std::deque<RecvOp> recvs_;
  uint64_t singleCopySends_ = 0;
  uint64_t singleCopyReceives_ = 0;
  uint64_t ringFallbackSends_ = 0;
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
      : myRank_(ctx.myRank),
        nranks_(ctx.nranks),
        commHash_(ctx.commHash),
        windowBytes_(ctx.nranks > 1 ? ctx.config.shmDirectBytes : 0),
        peerSegments_(static_cast<size_t>(ctx.nranks)) {
    const std::string name = bellName(commHash_, myRank_);
    const size_t extra = windowBytes_ ? windowSegmentBytes(windowBytes_, nranks_) : 0;
    Mapping m = createSegment(name, kPageBytes + extra);
    if (windowBytes_) initWindow(m.data() + kPageBytes, myRank_, nranks_, commHash_, windowBytes_);
    bell_ = std::make_shared<BellSegment>(name, std::move(m));
    if (nranks_ <= 1) bell_->unlinkName();
  }

  ~ShmTransport() override { bell_->unlinkName(); }

  // Every local peer that will map the doorbell has mapped it by now. With every peer over shm,
  // the rank's segments make its window.
  void setupDone() override {
    bell_->unlinkName();
    std::lock_guard<std::mutex> lock(mu_);
    if (!windowBytes_) return;
    for (int p = 0; p < nranks_; ++p)
      if (p != myRank_ && (!peerSegments_[p].map || !holdsWindow(*peerSegments_[p].map))) {
        peerSegments_.clear();  // no window: the liveness dups go now, not with the transport
        return;
      }
    peerSegments_[myRank_].map = bell_->mapping();
    window_ = std::make_shared<ShmWindow>(myRank_, nranks_, commHash_, std::move(peerSegments_));
    peerSegments_.clear();
  }

  std::shared_ptr<ShmWindow> window() const { return window_; }

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
    std::shared_ptr<const Mapping> peerBell;
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
      peerBell = std::make_shared<Mapping>(openSegment(peerBellName, sizeof(Doorbell), peer));
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
      peerBell = std::make_shared<Mapping>(openSegment(peerBellName, sizeof(Doorbell), peer));
      link.sendString(bell_->name());
      uint32_t ack = 0;
      link.recvBytes(&ack, sizeof ack);
      if (ack != kAckMagic)
        raise(ErrorCode::kRemote, "rank ", peer, " sent a bad shm setup acknowledgement");
      noteBellMapped();
    }
    Socket watch = link.openDataSocket(kWatchSocketIndex);
    keepForWindow(peer, peerBell, watch);
    const SingleCopyPlan plan =
        negotiateSingleCopy(link, myRank_, peer, setup.config.shmSingleCopyBytes);
    auto mode = [](size_t threshold, const std::string& why) {
      return threshold ? strCat("messages of ", formatBytes(threshold), " or more")
                       : strCat("off, ", why);
    };
    SQZ_INFO(kTransport, "shm connection to rank ", peer, ", ring ", formatBytes(ringBytes),
             "; single copy (process_vm_readv) to rank ", peer, ": ",
             mode(plan.outThreshold, plan.outWhy), "; from rank ", peer, ": ",
             mode(plan.inThreshold, plan.inWhy));
    return std::make_unique<ShmConnection>(myRank_, peer, ringBytes, std::move(pair),
                                           std::move(peerBell), bell_, std::move(watch), plan);
  }

 private:
  // A peer has mapped this rank's doorbell; once all could have, its name goes.
  void noteBellMapped() {
    std::lock_guard<std::mutex> lock(mu_);
    if (++mappedPeers_ >= nranks_ - 1) bell_->unlinkName();
  }

  // The peer's segment and a dup of its liveness socket, for the window (setupDone).
  void keepForWindow(int peer, const std::shared_ptr<const Mapping>& segment, const Socket& watch) {
    if (!windowBytes_) return;
    Fd dup(::fcntl(watch.fd(), F_DUPFD_CLOEXEC, 0));
    if (dup.get() < 0) throw SysError(strCat("dup of the liveness socket to rank ", peer), errno);
    std::lock_guard<std::mutex> lock(mu_);
    peerSegments_[peer] = WindowSegment{segment, std::move(dup)};
  }

  const int myRank_;
  const int nranks_;
  const uint64_t commHash_;
  const size_t windowBytes_;  // this rank's window capacity (0: no window)
  std::shared_ptr<BellSegment> bell_;
  // Protects mappedPeers_ and peerSegments_ (connect() may run concurrently for different peers).
  std::mutex mu_;
  int mappedPeers_ = 0;
  std::vector<WindowSegment> peerSegments_;  // by rank, until the window takes them
  std::shared_ptr<ShmWindow> window_;        // set by setupDone() when every peer is over shm
};

}  // namespace

std::unique_ptr<Transport> createShmTransport(const TransportContext& ctx) {
  return std::make_unique<ShmTransport>(ctx);
}

std::shared_ptr<ShmWindow> shmWindow(const Transport& t) {
  const auto* shm = dynamic_cast<const ShmTransport*>(&t);
  return shm ? shm->window() : nullptr;
}

ShmConnectionStats shmConnectionStats(const Connection& c) {
  const auto* shm = dynamic_cast<const ShmConnection*>(&c);
  if (!shm)
    raise(ErrorCode::kInvalidArgument, "shmConnectionStats of a ", c.transportName(),
          " connection; it takes an shm one");
  return shm->stats();
}

void setShmTestHooks(int failProbeOfRank, bool failCrossReadable) {
  setSingleCopyTestHooks(failProbeOfRank, failCrossReadable);
}

}  // namespace squeeze
