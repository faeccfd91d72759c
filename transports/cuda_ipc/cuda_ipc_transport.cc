// The CUDA IPC transport: see cuda_ipc_transport.h for what it connects.
//
// Design. Each receiver owns, per peer, a device staging ring (cudaMalloc on its GPU) that the
// sender writes with cudaMemcpyAsync; everything else is host-side control in a small POSIX shm
// segment per pair, as in the shm transport:
//
//   per direction (sender -> receiver):  header slots  WireHeader[kHeaderSlots]
//                                        hdrHead / hdrTail      headers published / consumed
//                                        dataHead / dataTail    ring bytes written / freed
//                                        closed, released       sender shut down / unmapped
//
// Headers travel through the host segment, never through the GPU ring, so the receiver checks
// each one with checkHeader() on the host before it copies a payload byte into its buffer. A
// message's payload is a run of bytes in the ring's byte stream; a message larger than the ring
// streams through it in pieces (at most a quarter of the ring each). Counters grow without
// wrapping and each has one writer.
//
// Sender: publish the header (a free slot), then per piece cudaMemcpyAsync(peer ring <- payload)
// on the connection's send stream and record an event; when cudaEventQuery says the piece landed,
// publish dataHead with a release store. Receiver: read dataHead (acquire), cudaMemcpyAsync(dst
// <- own ring) on its receive stream, record an event; once it completed, publish dataTail, which
// frees the ring space. A send is done when its last piece landed in the peer's ring, a receive
// when its last piece landed in the caller's buffer, both in posting order. Each side only ever
// waits for its own copies, so the events are ordinary ones: no cudaIpcGetEventHandle, no GPU
// waiting on another process, and a host-visible completion (cudaEventQuery) before publishing.
// Two streams (send, receive) let both directions' copies overlap.
//
// Why the legacy IPC API (cudaIpcGetMemHandle / cudaIpcOpenMemHandle): it exports ordinary
// cudaMalloc memory as a 64-byte handle that crosses the PeerLink like any other bytes, and it is
// part of the runtime, so the library still does not link libcuda. The VMM route
// (cuMemExportToShareableHandle with POSIX fds) would need cuMemCreate/cuMemMap/cuMemSetAccess
// with granularity rounding through driver entry points, and passing the fds with SCM_RIGHTS
// over a unix socket, which the PeerLink (a TCP socket) cannot carry. Legacy IPC cannot open a
// handle of its own process: ranks that are threads of one process pass the ring's address
// instead. Ranks on different GPUs enable peer access where cudaDeviceCanAccessPeer allows it;
// cudaMemcpyAsync works either way.
//
// Waking up. The pair's one data socket (PeerLink::openDataSocket(0)) is both the liveness watch
// (EOF: the peer closed, was destroyed or its process died) and the doorbell: after publishing a
// counter a side writes one byte to it, and the peer's executor polls it. While copies of this
// connection are in flight, addWaitSources() also adds an eventfd that is always readable, so the
// executor does not sleep past a copy's completion (it polls the events instead; copies are
// bounded by a ring piece).
//
// Teardown. Legacy IPC forbids freeing exported memory while an importer still maps it, and a
// peer's copies into this rank's ring may still run. So the destructor syncs its streams, closes
// its mapping of the peer's ring and sets `released`; it frees its own ring only if the peer has
// set `released` too, and otherwise parks the ring (with the control mapping) until the peer
// releases it or its process is gone, checked whenever a cuda_ipc transport is created or a
// connection destroyed. Nothing blocks on the peer.
#include "transports/cuda_ipc/cuda_ipc_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/fd.h"
#include "base/logging.h"
#include "base/strings.h"
#include "device/cuda/runtime.h"
#include "transports/shm/segment.h"

namespace squeeze {
namespace {

constexpr size_t kHeaderSlots = 64;  // headers in flight per direction
constexpr size_t kMaxInFlight = 8;   // copies in flight per direction (one event each)
constexpr size_t kMinRingBytes = 64 << 10;
constexpr size_t kMinSliceBytes = 64 << 10;
constexpr size_t kMaxNameBytes = 255;
constexpr size_t kBusIdBytes = 32;
constexpr uint64_t kSetupMagic = 0x43504943'5a515153ull;  // "SQQZCIPC"
constexpr uint64_t kCtlMagic = 0x4c544349'5a515153ull;    // "SQQZICTL"
constexpr uint32_t kProtocolVersion = 1;
constexpr uint32_t kAckMagic = 0x4b434943;  // "CICK"
// The one data socket of a pair: liveness watch and doorbell (no payload goes through it).
constexpr uint16_t kWatchSocketIndex = 0;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "counters live in shared memory");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "flags live in shared memory");

// One direction of a pair. The sender writes hdrHead, dataHead, closed, released and the slots;
// the receiver writes hdrTail and dataTail.
struct DirCtl {
  alignas(64) std::atomic<uint64_t> hdrHead{0};   // headers ever published
  alignas(64) std::atomic<uint64_t> hdrTail{0};   // headers ever consumed
  alignas(64) std::atomic<uint64_t> dataHead{0};  // ring bytes ever written (copies complete)
  alignas(64) std::atomic<uint64_t> dataTail{0};  // ring bytes ever freed (copies out complete)
  alignas(64) std::atomic<uint32_t> closed{0};    // the sender shut down or was destroyed
  std::atomic<uint32_t> released{0};  // the sender will never touch the receiver's ring again
  alignas(64) WireHeader slots[kHeaderSlots];
};

// The pair's control segment; dir[0] is lower -> higher rank, dir[1] the other way.
struct CtlSegment {
  uint64_t magic;
  uint32_t version;
  int32_t loRank;
  int32_t hiRank;
  uint32_t reserved;
  uint64_t commHash;
  alignas(64) DirCtl dir[2];
};
constexpr size_t kCtlBytes = roundUpToPage(sizeof(CtlSegment));

// What each side tells the other in connect() (both send, then both receive).
struct SideInfo {
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  int32_t device;  // -1: no GPU
  int32_t pid;
  uint64_t commHash;
  uint64_t ringBytes;  // this side's receive ring
  uint64_t ringAddr;   // its address, for a peer in the same process
  uint32_t hasHandle;  // 1: handle is valid (a peer in another process)
  char busId[kBusIdBytes];
  cudaIpcMemHandle_t handle;
};

std::string ctlName(uint64_t commHash, int lo, int hi, int creatorPid) {
  return strCat(segmentPrefix(commHash), lo, "-", hi, "-", creatorPid, "-cuipc");
}

size_t sliceFor(size_t ringBytes) {
  return std::max(ringBytes / 4, std::min(ringBytes, kMinSliceBytes));
}

// The control block: created here, or the peer's opened (exactly kCtlBytes mapped).
std::shared_ptr<Mapping> createControl(const std::string& name) {
  return std::make_shared<Mapping>(createSegment(name, kCtlBytes));
}

std::shared_ptr<Mapping> openControl(const std::string& name, int peerRank) {
  return std::make_shared<Mapping>(openSegment(name, kCtlBytes, peerRank, kCtlBytes));
}

// Reads the wake-up bytes the peer wrote. Returns false once the peer's end is closed (EOF or
// an error other than "would block").
bool drainSocket(int fd) {
  char buf[256];
  for (int i = 0; i < 16; ++i) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

// The peer's receive ring mapped into this process with cudaIpcOpenMemHandle. Destroy it with
// the device it was opened on current.
class IpcMapping {
 public:
  IpcMapping(const cudaIpcMemHandle_t& handle, const std::string& what) {
    cuda::check(cudaIpcOpenMemHandle(&ptr_, handle, cudaIpcMemLazyEnablePeerAccess), what.c_str());
  }
  IpcMapping(const IpcMapping&) = delete;
  IpcMapping& operator=(const IpcMapping&) = delete;
  ~IpcMapping() { (void)cudaIpcCloseMemHandle(ptr_); }
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// A ring whose peer may still write into it (see "Teardown" above), kept until it may go.
struct RetiredRing {
  cuda::DeviceBuffer ring;
  std::shared_ptr<Mapping> ctl;           // keeps `released` mapped
  const std::atomic<uint32_t>* released;  // the peer's flag for this ring
  Socket watch;                           // write side shut; EOF once the peer closed it
  int peerPid;
  bool otherProcess;
};

// Process-wide and never destroyed: no CUDA call may run from static destructors at exit (the
// driver frees what is left then).
std::mutex& retiredMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<std::unique_ptr<RetiredRing>>& retiredRings() {  // guarded by retiredMutex()
  static auto* rings = new std::vector<std::unique_ptr<RetiredRing>>;
  return *rings;
}

// Frees the retired rings whose peers released them or whose peer process is gone.
void reapRetired() {
  std::lock_guard<std::mutex> lock(retiredMutex());
  std::erase_if(retiredRings(), [](const std::unique_ptr<RetiredRing>& r) {
    if (r->released->load(std::memory_order_acquire) != 0) return true;
    return r->otherProcess && !drainSocket(r->watch.fd()) && ::kill(r->peerPid, 0) != 0 &&
           errno == ESRCH;
  });
}

void retire(std::unique_ptr<RetiredRing> r) {
  std::lock_guard<std::mutex> lock(retiredMutex());
  retiredRings().push_back(std::move(r));
}

// The copies of one direction: a stream of this rank's GPU, events used round-robin (at most
// events.size() recorded and not yet seen complete), and the pieces in flight in stream order.
struct CopyQueue {
  struct Piece {
    uint64_t endPos;  // the byte-stream position this piece ends at
    cuda::Event* event;
  };
  std::unique_ptr<cuda::Stream> stream;
  std::vector<std::unique_ptr<cuda::Event>> events;
  std::deque<Piece> inFlight;
  uint64_t seq = 0;
  uint64_t done = 0;  // stream position up to which every copy completed

  void create() {  // with the device current
    stream = std::make_unique<cuda::Stream>();
    for (size_t i = 0; i < kMaxInFlight; ++i) events.push_back(std::make_unique<cuda::Event>());
  }
  bool full() const { return inFlight.size() >= events.size(); }
  void copy(void* dst, const void* src, size_t n, uint64_t endPos, const char* what) {
    cuda::check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream->get()), what);
    cuda::Event* ev = events[seq++ % events.size()].get();
    ev->record(stream->get());
    inFlight.push_back(Piece{endPos, ev});
  }
  // Retires the completed pieces in order; true if any did. Throws Error(kCuda) for a failed copy.
  bool poll() {
    bool any = false;
    while (!inFlight.empty() && inFlight.front().event->query()) {
      done = inFlight.front().endPos;
      inFlight.pop_front();
      any = true;
    }
    return any;
  }
};

// Everything connect() sets up, handed to the connection.
struct ConnParts {
  int myRank = -1;
  int peerRank = -1;
  int device = -1;
  int peerPid = 0;
  bool otherProcess = false;
  bool lo = false;
  std::shared_ptr<Mapping> ctl;
  cuda::DeviceBuffer ring;  // this rank's receive ring
  uint8_t* peerRing = nullptr;
  size_t peerRingBytes = 0;
  std::unique_ptr<IpcMapping> peerMap;  // null for a peer in this process
  Socket watch;
  Fd wake;  // an eventfd that is always readable
  CopyQueue sendQ, recvQ;
};

class CudaIpcConnection : public Connection {
 public:
  explicit CudaIpcConnection(ConnParts p)
      : myRank_(p.myRank),
        peerRank_(p.peerRank),
        device_(p.device),
        peerPid_(p.peerPid),
        otherProcess_(p.otherProcess),
        ctl_(std::move(p.ctl)),
        ring_(std::move(p.ring)),
        ringBytes_(ring_.size()),
        recvSlice_(sliceFor(ringBytes_)),
        peerRing_(p.peerRing),
        peerRingBytes_(p.peerRingBytes),
        sendSlice_(sliceFor(peerRingBytes_)),
        peerMap_(std::move(p.peerMap)),
        watch_(std::move(p.watch)),
        wake_(std::move(p.wake)),
        sendQ_(std::move(p.sendQ)),
        recvQ_(std::move(p.recvQ)) {
    auto* seg = reinterpret_cast<CtlSegment*>(ctl_->data());
    out_ = &seg->dir[p.lo ? 0 : 1];
    in_ = &seg->dir[p.lo ? 1 : 0];
  }

  ~CudaIpcConnection() override {
    markClosed();
    try {
      cuda::DeviceGuard guard(device_);
      (void)cudaStreamSynchronize(sendQ_.stream->get());
      (void)cudaStreamSynchronize(recvQ_.stream->get());
      (void)cudaGetLastError();
      peerMap_.reset();
    } catch (...) {
      // A broken CUDA context: nothing more can be done for the copies.
    }
    out_->released.store(1, std::memory_order_seq_cst);
    ping();
    if (in_->released.load(std::memory_order_seq_cst) == 0) {
      ::shutdown(watch_.fd(), SHUT_WR);  // the peer sees EOF; this end still reads its EOF
      retire(std::unique_ptr<RetiredRing>(new RetiredRing{
          std::move(ring_), ctl_, &in_->released, std::move(watch_), peerPid_, otherProcess_}));
    }
    try {
      reapRetired();
    } catch (...) {
    }
  }

  const char* transportName() const override { return "cuda_ipc"; }
  bool readsDeviceMemory() const override { return true; }

  void isend(const WireHeader& header, const void* payload, TransferRequest* req) override {
    beginSend(header, payload, req);
    SendOp op;
    op.header = header;
    op.payload = static_cast<const uint8_t*>(payload);
    op.req = req;
    sends_.push_back(op);
  }

  void irecv(const WireHeader& expected, void* buf, size_t capacity,
             TransferRequest* req) override {
    beginRecv(buf, capacity, req);
    RecvOp op;
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
      if (!watchClosed_ && !drainSocket(watch_.fd())) watchClosed_ = true;
      // Read the flag before the counters: everything published before closing is then seen.
      const bool flagClosed = in_->closed.load(std::memory_order_acquire) != 0;
      const bool peerClosed = flagClosed || watchClosed_;
      std::optional<cuda::DeviceGuard> guard;
      bool wake = false;
      bool moved = pushSends(peerClosed, guard, wake);
      moved |= pullRecvs(guard, wake);
      if (wake) ping();
      // A send to a closed peer can never be read; a receive fails once the ring is drained.
      if (peerClosed && (!sends_.empty() || (!recvs_.empty() && recvStarved_)))
        raise(ErrorCode::kRemote, "rank ", peerRank_,
              flagClosed ? " closed the CUDA IPC connection to rank "
                         : " exited or was killed (its process closed the liveness socket to rank ",
              myRank_, flagClosed ? "" : ")", " with ", recvs_.size(), " receive(s) and ",
              sends_.size(), " send(s) still pending on rank ", myRank_);
      return moved;
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }

  void addWaitSources(WaitSources& sources) override {
    const bool shut = shut_.load(std::memory_order_acquire);
    const bool pending =
        !sends_.empty() || !sendsIssued_.empty() || !recvs_.empty() || !recvsIssued_.empty();
    if (!watchClosed_ && !shut) sources.fds.push_back(pollfd{watch_.fd(), POLLIN, 0});
    // Copies in flight complete without anyone writing to a socket: do not sleep on them.
    if (!sendQ_.inFlight.empty() || !recvQ_.inFlight.empty() || shut || (watchClosed_ && pending))
      sources.fds.push_back(pollfd{wake_.get(), POLLIN, 0});
  }

  void shutdown() override {
    markClosed();
    shut_.store(true, std::memory_order_release);
    watch_.shutdownBoth();
  }

 private:
  struct SendOp {
    WireHeader header;
    const uint8_t* payload = nullptr;
    uint64_t issued = 0;  // payload bytes whose copy was enqueued
    uint64_t endPos = 0;  // byte-stream position after the payload (once the header is out)
    bool headerOut = false;
    TransferRequest* req = nullptr;
  };
  struct RecvOp {
    WireHeader expected;
    WireHeader header;
    uint8_t* buf = nullptr;
    size_t capacity = 0;
    uint64_t issued = 0;
    uint64_t endPos = 0;
    bool haveHeader = false;
    TransferRequest* req = nullptr;
  };

  // One byte on the watch socket wakes the peer's executor; a full socket buffer means it has
  // wake-ups pending already.
  void ping() {
    const char byte = 0;
    (void)::send(watch_.fd(), &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }

  void markClosed() {
    if (closedSent_.exchange(true)) return;
    out_->closed.store(1, std::memory_order_release);
    ping();
  }

  void onDevice(std::optional<cuda::DeviceGuard>& guard) const {
    if (!guard) guard.emplace(device_);
  }

  // Publishes headers and enqueues payload copies into the peer's ring; completes the sends
  // whose copies landed. Returns true if anything moved.
  bool pushSends(bool peerClosed, std::optional<cuda::DeviceGuard>& guard, bool& wake) {
    bool moved = false;
    if (sendQ_.poll()) {
      out_->dataHead.store(sendQ_.done, std::memory_order_release);
      wake = moved = true;
    }
    // Nothing new goes to a closed peer (its process may be gone with its ring).
    if (!peerClosed && !sends_.empty()) {
      const uint64_t hdrTail = out_->hdrTail.load(std::memory_order_acquire);
      const uint64_t tail = out_->dataTail.load(std::memory_order_acquire);
      while (!sends_.empty()) {
        SendOp& op = sends_.front();
        if (!op.headerOut) {
          if (hdrHead_ - hdrTail >= kHeaderSlots) break;
          out_->slots[hdrHead_ % kHeaderSlots] = op.header;
          out_->hdrHead.store(++hdrHead_, std::memory_order_release);
          op.headerOut = true;
          op.endPos = sendPos_ + op.header.payloadBytes;
          wake = moved = true;
        }
        const uint64_t total = op.header.payloadBytes;
        while (op.issued < total && !sendQ_.full()) {
          const uint64_t space = peerRingBytes_ - (sendPos_ - tail);
          if (space == 0) break;
          const size_t off = static_cast<size_t>(sendPos_ % peerRingBytes_);
          const size_t n = static_cast<size_t>(
              std::min<uint64_t>({total - op.issued, space, peerRingBytes_ - off, sendSlice_}));
          onDevice(guard);
          sendQ_.copy(peerRing_ + off, op.payload + op.issued, n, sendPos_ + n,
                      "cudaMemcpyAsync of a payload piece into the peer's CUDA IPC ring");
          sendPos_ += n;
          op.issued += n;
          moved = true;
        }
        if (op.issued < total) break;
        sendsIssued_.push_back(op);
        sends_.pop_front();
      }
    }
    while (!sendsIssued_.empty() && sendsIssued_.front().endPos <= sendQ_.done) {
      SendOp& op = sendsIssued_.front();
      op.req->bytes = op.header.payloadBytes;
      op.req->done = true;
      sendsIssued_.pop_front();
      moved = true;
    }
    return moved;
  }

  // Checks arrived headers and enqueues copies out of this rank's ring into the posted buffers;
  // completes the receives whose copies landed. Sets recvStarved_ when the first unfinished
  // receive waits for the peer (a header or ring bytes not there yet). Returns true if anything
  // moved.
  bool pullRecvs(std::optional<cuda::DeviceGuard>& guard, bool& wake) {
    bool moved = false;
    if (recvQ_.poll()) {
      in_->dataTail.store(recvQ_.done, std::memory_order_release);
      wake = moved = true;
    }
    recvStarved_ = false;
    if (!recvs_.empty()) {
      const uint64_t hdrHead = in_->hdrHead.load(std::memory_order_acquire);
      const uint64_t head = in_->dataHead.load(std::memory_order_acquire);
      while (!recvs_.empty()) {
        RecvOp& op = recvs_.front();
        if (!op.haveHeader) {
          if (hdrTail_ == hdrHead) {
            recvStarved_ = true;
            break;
          }
          op.header = in_->slots[hdrTail_ % kHeaderSlots];
          checkHeader(op.expected, op.header, op.capacity, myRank_);
          in_->hdrTail.store(++hdrTail_, std::memory_order_release);
          op.haveHeader = true;
          op.endPos = recvPos_ + op.header.payloadBytes;
          wake = moved = true;
        }
        const uint64_t total = op.header.payloadBytes;
        while (op.issued < total && !recvQ_.full()) {
          const uint64_t avail = head - recvPos_;
          if (avail == 0) {
            recvStarved_ = true;
            break;
          }
          const size_t off = static_cast<size_t>(recvPos_ % ringBytes_);
          const size_t n = static_cast<size_t>(
              std::min<uint64_t>({total - op.issued, avail, ringBytes_ - off, recvSlice_}));
          onDevice(guard);
          recvQ_.copy(op.buf + op.issued, static_cast<const uint8_t*>(ring_.data()) + off, n,
                      recvPos_ + n, "cudaMemcpyAsync of a payload piece out of the CUDA IPC ring");
          recvPos_ += n;
          op.issued += n;
          moved = true;
        }
        if (op.issued < total) break;
        recvsIssued_.push_back(op);
        recvs_.pop_front();
      }
    }
    while (!recvsIssued_.empty() && recvsIssued_.front().endPos <= recvQ_.done) {
      RecvOp& op = recvsIssued_.front();
      op.req->header = op.header;
      op.req->bytes = op.header.payloadBytes;
      op.req->done = true;
      recvsIssued_.pop_front();
      moved = true;
    }
    return moved;
  }

  const int myRank_;
  const int peerRank_;
  const int device_;
  const int peerPid_;
  const bool otherProcess_;
  std::shared_ptr<Mapping> ctl_;
  DirCtl* out_ = nullptr;
  DirCtl* in_ = nullptr;
  cuda::DeviceBuffer ring_;  // this rank's receive ring (the peer writes it)
  const size_t ringBytes_;
  const size_t recvSlice_;
  uint8_t* const peerRing_;  // the peer's receive ring (this rank writes it)
  const size_t peerRingBytes_;
  const size_t sendSlice_;
  std::unique_ptr<IpcMapping> peerMap_;
  Socket watch_;  // liveness and doorbell; carries one-byte wake-ups only
  Fd wake_;
  CopyQueue sendQ_;
  CopyQueue recvQ_;
  // Sender state: sendPos_ is the byte-stream position of the next piece.
  uint64_t hdrHead_ = 0;
  uint64_t sendPos_ = 0;
  std::deque<SendOp> sends_;        // header or payload not yet all enqueued
  std::deque<SendOp> sendsIssued_;  // all enqueued, waiting for the copies
  // Receiver state.
  uint64_t hdrTail_ = 0;
  uint64_t recvPos_ = 0;
  std::deque<RecvOp> recvs_;
  std::deque<RecvOp> recvsIssued_;
  bool recvStarved_ = false;
  bool watchClosed_ = false;
  // shutdown() may come from another thread (an abort) while progress() runs.
  std::atomic<bool> shut_{false};
  std::atomic<bool> closedSent_{false};
  std::exception_ptr error_;  // the first error progress() threw; rethrown ever after
};

class CudaIpcTransport : public Transport {
 public:
  explicit CudaIpcTransport(const TransportContext& ctx)
      : myRank_(ctx.myRank),
        nranks_(ctx.nranks),
        commHash_(ctx.commHash),
        device_(ctx.config.device) {
    reapRetired();
  }

  const char* name() const override { return "cuda_ipc"; }

  bool canConnect(const PeerInfo& self, const PeerInfo& peer) const override {
    return device_ >= 0 && !self.hostId.empty() && self.hostId == peer.hostId &&
           self.rank != peer.rank;
  }

  std::unique_ptr<Connection> connect(const LinkSetup& setup) override {
    const int peer = setup.peer.rank;
    SQZ_ENFORCE(setup.myRank == myRank_ && peer != myRank_ && peer >= 0 && peer < nranks_,
                "cuda_ipc connect from rank ", setup.myRank, " to rank ", peer);
    SQZ_ENFORCE_EQ(setup.commHash, commHash_);
    const size_t ringBytes = setup.config.cudaIpcBufferBytes;
    SQZ_ENFORCE(ringBytes >= kMinRingBytes && ringBytes <= kMaxShmBufferBytes,
                "cudaIpcBufferBytes=", ringBytes);
    PeerLink& link = setup.link;
    std::optional<cuda::DeviceGuard> guard;  // this rank's GPU, while anything here uses it

    ConnParts parts;
    parts.myRank = myRank_;
    parts.peerRank = peer;
    parts.device = device_;
    parts.peerPid = setup.peer.pid;
    parts.otherProcess = setup.peer.pid != ::getpid();
    parts.lo = myRank_ < peer;

    SideInfo mine;
    std::memset(&mine, 0, sizeof mine);
    mine.magic = kSetupMagic;
    mine.version = kProtocolVersion;
    mine.rank = myRank_;
    mine.device = device_;
    mine.pid = ::getpid();
    mine.commHash = commHash_;
    // Without a GPU (SQZ_TRANSPORT chose cuda_ipc on one side only) this rank still sends its
    // info, so that both sides fail alike below instead of one waiting for the other.
    if (device_ >= 0) {
      guard.emplace(device_);
      parts.ring = cuda::DeviceBuffer(ringBytes);
      mine.ringBytes = ringBytes;
      cuda::check(cudaDeviceGetPCIBusId(mine.busId, kBusIdBytes, device_), "cudaDeviceGetPCIBusId");
      if (parts.otherProcess) {
        cuda::check(cudaIpcGetMemHandle(&mine.handle, parts.ring.data()),
                    "cudaIpcGetMemHandle of the CUDA IPC receive ring");
        mine.hasHandle = 1;
      } else {
        mine.ringAddr = reinterpret_cast<uintptr_t>(parts.ring.data());
      }
    }
    link.sendBytes(&mine, sizeof mine);
    SideInfo theirs;
    link.recvBytes(&theirs, sizeof theirs);
    theirs.busId[kBusIdBytes - 1] = '\0';
    if (theirs.magic != kSetupMagic || theirs.version != kProtocolVersion || theirs.rank != peer ||
        theirs.commHash != commHash_ || theirs.pid != setup.peer.pid)
      raise(ErrorCode::kRemote, "rank ", myRank_, ": rank ", peer,
            " sent a malformed cuda_ipc setup message (another Squeeze version, or not this "
            "communicator's rank ",
            peer, ")");
    if (device_ < 0 || theirs.device < 0) {
      const int without = device_ < 0 ? myRank_ : peer;
      raise(ErrorCode::kInvalidUsage, "the cuda_ipc transport was chosen between rank ", myRank_,
            " and rank ", peer, ", but rank ", without,
            " has no GPU (its device is -1). Give "
            "every rank on this host a GPU (sqzConfig_t.device, or cudaSetDevice before creating "
            "the communicator), or set SQZ_TRANSPORT=shm,tcp on every rank.");
    }
    if (theirs.ringBytes < kMinRingBytes || theirs.ringBytes > kMaxShmBufferBytes)
      raise(ErrorCode::kRemote, "rank ", peer, " announced a CUDA IPC ring of ", theirs.ringBytes,
            " bytes; expected ", kMinRingBytes, " to ", kMaxShmBufferBytes);
    parts.peerRingBytes = static_cast<size_t>(theirs.ringBytes);

    const bool samePci = std::strcmp(theirs.busId, mine.busId) == 0;
    const bool peerAccess = !samePci && enablePeerAccess(theirs.busId);
    if (parts.otherProcess) {
      if (theirs.hasHandle != 1)
        raise(ErrorCode::kRemote, "rank ", peer, " (another process) sent no CUDA IPC handle");
      parts.peerMap = std::make_unique<IpcMapping>(
          theirs.handle,
          strCat("cudaIpcOpenMemHandle of rank ", peer, "'s receive ring (GPU ", theirs.busId,
                 ") on rank ", myRank_, "'s GPU ", mine.busId,
                 "; if these GPUs cannot share memory (containers without a shared IPC "
                 "namespace, MIG), set SQZ_TRANSPORT=shm,tcp"));
      parts.peerRing = parts.peerMap->get();
    } else {
      parts.peerRing = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(theirs.ringAddr));
      if (!parts.peerRing || !cuda::pointerInfo(parts.peerRing).device)
        raise(ErrorCode::kRemote, "rank ", peer,
              " (this process) sent a ring address that is "
              "not device memory");
    }

    parts.ctl = setUpControl(link, peer, theirs.pid);
    parts.watch = link.openDataSocket(kWatchSocketIndex);
    parts.wake = Fd(::eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK));
    if (parts.wake.get() < 0) throw SysError("eventfd", errno);
    parts.sendQ.create();
    parts.recvQ.create();
    SQZ_INFO(kTransport, "cuda_ipc connection to rank ", peer, ": GPU ", mine.busId, " -> GPU ",
             theirs.busId, ", rings ", formatBytes(ringBytes), " in / ",
             formatBytes(parts.peerRingBytes), " out, ",
             parts.otherProcess ? "IPC handle" : "same process",
             samePci ? ", same GPU" : (peerAccess ? ", peer access" : ", no peer access"));
    return std::make_unique<CudaIpcConnection>(std::move(parts));
  }

 private:
  // Enables access from this rank's GPU to the peer's where possible; false where not (the
  // peer's GPU is not visible here, or not reachable): copies then go through the host.
  bool enablePeerAccess(const char* peerBusId) const {
    int peerOrdinal = -1;
    if (cudaDeviceGetByPCIBusId(&peerOrdinal, peerBusId) != cudaSuccess) {
      (void)cudaGetLastError();  // not visible in this process (CUDA_VISIBLE_DEVICES)
      return false;
    }
    if (peerOrdinal == device_) return false;
    int can = 0;
    cuda::check(cudaDeviceCanAccessPeer(&can, device_, peerOrdinal), "cudaDeviceCanAccessPeer");
    if (!can) return false;
    const cudaError_t rc = cudaDeviceEnablePeerAccess(peerOrdinal, 0);
    if (rc == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();
    else
      cuda::check(rc, "cudaDeviceEnablePeerAccess");
    return true;
  }

  // The pair's control segment: the lower rank creates it and sends its name; the higher rank
  // maps it, unlinks it and acknowledges; the lower rank unlinks it too (a no-op by then).
  std::shared_ptr<Mapping> setUpControl(PeerLink& link, int peer, int peerPid) {
    if (myRank_ < peer) {
      const std::string name = ctlName(commHash_, myRank_, peer, ::getpid());
      auto ctl = createControl(name);
      NameGuard nameGuard(name);
      auto* seg = new (ctl->data()) CtlSegment{};
      seg->version = kProtocolVersion;
      seg->loRank = myRank_;
      seg->hiRank = peer;
      seg->commHash = commHash_;
      seg->magic = kCtlMagic;
      link.sendString(name);
      uint32_t ack = 0;
      link.recvBytes(&ack, sizeof ack);
      nameGuard.unlink();
      if (ack != kAckMagic)
        raise(ErrorCode::kRemote, "rank ", peer, " sent a bad cuda_ipc setup acknowledgement");
      return ctl;
    }
    const std::string name = link.recvString(kMaxNameBytes);
    const std::string expected = ctlName(commHash_, peer, myRank_, peerPid);
    if (name != expected)
      raise(ErrorCode::kRemote, "rank ", peer, " sent '", name,
            "' as its CUDA IPC control segment; expected '", expected, "'");
    std::shared_ptr<Mapping> ctl;
    {
      NameGuard nameGuard(name);  // unlinked as soon as mapped, success or not
      ctl = openControl(name, peer);
    }
    const auto* seg = reinterpret_cast<const CtlSegment*>(ctl->data());
    if (seg->magic != kCtlMagic || seg->version != kProtocolVersion || seg->loRank != peer ||
        seg->hiRank != myRank_ || seg->commHash != commHash_)
      raise(ErrorCode::kRemote, "rank ", myRank_, ": CUDA IPC control segment ", name,
            " from rank ", peer, " is not one for this pair of this communicator");
    link.sendBytes(&kAckMagic, sizeof kAckMagic);
    return ctl;
  }

  const int myRank_;
  const int nranks_;
  const uint64_t commHash_;
  const int device_;
};

}  // namespace

std::unique_ptr<Transport> createCudaIpcTransport(const TransportContext& ctx) {
  return std::make_unique<CudaIpcTransport>(ctx);
}

}  // namespace squeeze
