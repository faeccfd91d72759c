// The shared-memory window (see window.h): its layout, the counters and the waits.
#include "transports/shm/window.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <new>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/strings.h"
#include "transports/shm/doorbell.h"
#include "transports/shm/segment.h"

namespace squeeze {
namespace {

constexpr uint64_t kWindowMagic = 0x574f444e'495a5153ull;  // "SQZINDOW"
constexpr uint32_t kWindowVersion = 1;
// How often a waiter looks at the peers' liveness sockets (a system call), at most.
constexpr int kLivenessCheckMs = 100;

struct alignas(64) CounterLine {
  std::atomic<uint64_t> value{0};
};
struct alignas(64) HeaderLine {
  WireHeader header{};
};

// The control page of a window. Counters and headers are written by the owner only.
struct WindowCtl {
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  int32_t nranks;
  uint32_t reserved;
  uint64_t commHash;
  uint64_t capacity;
  CounterLine counters[3];  // by WindowCounter
  CounterLine closed;
  HeaderLine headers[2];
};
static_assert(sizeof(WindowCtl) <= kPageBytes - ShmWindow::kStreamAreaBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "window counters live in shared memory");

// A set's result buffer holds the largest part a rank owns: ceil(elements / nranks) elements
// of at most 8 bytes, rounded up to a cache line.
size_t resultBytes(size_t capacity, int nranks) {
  return (capacity / static_cast<size_t>(nranks) + 8 + 63) / 64 * 64;
}
size_t setBytes(size_t capacity, int nranks) {
  return roundUpToPage(capacity) + roundUpToPage(resultBytes(capacity, nranks));
}

// The kernel closes the liveness socket's far end with the peer's process: a peek then reads
// end-of-file (or an error).
bool livenessSocketEnded(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace

size_t windowSegmentBytes(size_t capacity, int nranks) {
  return kPageBytes + 2 * setBytes(capacity, nranks);
}

void initWindow(uint8_t* window, int rank, int nranks, uint64_t commHash, size_t capacity) {
  auto* ctl = new (window) WindowCtl{};
  ctl->version = kWindowVersion;
  ctl->rank = rank;
  ctl->nranks = nranks;
  ctl->commHash = commHash;
  ctl->capacity = capacity;
  ctl->magic = kWindowMagic;
}

bool holdsWindow(const Mapping& segment) {
  return segment.size() >= 2 * kPageBytes &&
         reinterpret_cast<const WindowCtl*>(segment.data() + kPageBytes)->magic == kWindowMagic;
}

struct ShmWindow::Rank {
  std::shared_ptr<const Mapping> map;
  Fd watch;
  Doorbell* bell = nullptr;
  WindowCtl* ctl = nullptr;
  uint8_t* sets = nullptr;  // set 0's input; set 1 follows at setBytes(cap, nranks)
  size_t cap = 0;           // this rank's own capacity (its layout)
  bool gone = false;
  SteadyClock::time_point nextLivenessCheck{};
};

ShmWindow::ShmWindow(int rank, int nranks, uint64_t commHash, std::vector<WindowSegment> segments)
    : rank_(rank), nranks_(nranks), ranks_(static_cast<size_t>(nranks)) {
  SQZ_ENFORCE(
      nranks > 1 && rank >= 0 && rank < nranks && segments.size() == static_cast<size_t>(nranks),
      "window of rank ", rank, " of ", nranks, " from ", segments.size(), " segments");
  capacity_ = kMaxWindowBytes;
  for (int p = 0; p < nranks; ++p) {
    Rank& r = ranks_[p];
    r.map = std::move(segments[p].map);
    r.watch = std::move(segments[p].watch);
    SQZ_ENFORCE(r.map != nullptr, "no segment for rank ", p);
    uint8_t* base = r.map->data();
    const size_t size = r.map->size();
    const auto* ctl = reinterpret_cast<const WindowCtl*>(base + kPageBytes);
    const bool headerFits = size >= 2 * kPageBytes;
    const bool ok = headerFits && ctl->magic == kWindowMagic && ctl->version == kWindowVersion &&
                    ctl->rank == p && ctl->nranks == nranks && ctl->commHash == commHash &&
                    ctl->capacity >= kMinWindowBytes && ctl->capacity <= kMaxWindowBytes &&
                    size >= kPageBytes + windowSegmentBytes(ctl->capacity, nranks);
    if (!ok)
      raise(ErrorCode::kRemote, "rank ", rank, ": rank ", p, "'s shared-memory segment (", size,
            " bytes) holds no direct-all-reduce window of this communicator");
    r.bell = reinterpret_cast<Doorbell*>(base);
    r.ctl = reinterpret_cast<WindowCtl*>(base + kPageBytes);
    r.cap = ctl->capacity;
    r.sets = base + 2 * kPageBytes;
    capacity_ = std::min(capacity_, r.cap);
  }
}

ShmWindow::~ShmWindow() { shutdown(); }

uint8_t* ShmWindow::input(int p, int s) const {
  const Rank& r = ranks_[p];
  return r.sets + static_cast<size_t>(s) * setBytes(r.cap, nranks_);
}

uint8_t* ShmWindow::result(int p, int s) const {
  return input(p, s) + roundUpToPage(ranks_[p].cap);
}

WireHeader* ShmWindow::header(int p, int s) const { return &ranks_[p].ctl->headers[s].header; }

uint8_t* ShmWindow::streamArea(int p) const {
  return reinterpret_cast<uint8_t*>(ranks_[p].ctl) + kPageBytes - kStreamAreaBytes;
}

std::shared_ptr<const void> ShmWindow::holdMappings() const {
  auto maps = std::make_shared<std::vector<std::shared_ptr<const Mapping>>>();
  for (const Rank& r : ranks_) maps->push_back(r.map);
  return maps;
}

bool ShmWindow::peerDown(int p) const {
  const Rank& r = ranks_[p];
  if (r.ctl->closed.value.load(std::memory_order_acquire) != 0) return true;
  return r.watch.get() >= 0 && livenessSocketEnded(r.watch.get());
}

void ShmWindow::publish(WindowCounter c, uint64_t value) {
  ranks_[rank_].ctl->counters[static_cast<int>(c)].value.store(value, std::memory_order_release);
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) ranks_[p].bell->ring();
}

uint64_t ShmWindow::counter(int p, WindowCounter c) const {
  return ranks_[p].ctl->counters[static_cast<int>(c)].value.load(std::memory_order_acquire);
}

void ShmWindow::shutdown() {
  Rank& me = ranks_[rank_];
  if (me.ctl->closed.value.exchange(1, std::memory_order_acq_rel) != 0) return;
  for (Rank& r : ranks_) r.bell->ring();
}

// Looked at every kLivenessCheckMs at most.
bool ShmWindow::peerGone(int p) {
  Rank& r = ranks_[p];
  if (r.gone || r.watch.get() < 0) return r.gone;
  const auto now = SteadyClock::now();
  if (now < r.nextLivenessCheck) return false;
  r.nextLivenessCheck = now + std::chrono::milliseconds(kLivenessCheckMs);
  r.gone = livenessSocketEnded(r.watch.get());
  return r.gone;
}

WaitResult ShmWindow::waitFor(int p, WindowCounter c, uint64_t value, const WindowWait& w) {
  const std::atomic<uint64_t>& word = ranks_[p].ctl->counters[static_cast<int>(c)].value;
  if (word.load(std::memory_order_acquire) >= value) return WaitResult::kReady;
  Doorbell& bell = *ranks_[rank_].bell;
  const auto start = SteadyClock::now();
  const auto spinUntil = start + std::chrono::microseconds(w.spinUs);
  const auto deadline = start + std::chrono::milliseconds(w.timeoutMs);
  for (;;) {
    const uint32_t seen = bell.snapshot();
    if (word.load(std::memory_order_acquire) >= value) return WaitResult::kReady;
    if (w.aborted->load(std::memory_order_relaxed) ||
        ranks_[rank_].ctl->closed.value.load(std::memory_order_acquire) != 0)
      return WaitResult::kAborted;
    // The peer publishes before it closes: a counter read after the flag is final.
    if (ranks_[p].ctl->closed.value.load(std::memory_order_acquire) != 0)
      return word.load(std::memory_order_acquire) >= value ? WaitResult::kReady
                                                           : WaitResult::kPeerClosed;
    const auto now = SteadyClock::now();
    if (now < spinUntil) {  // ranks share cores: let the one we wait for run
      std::this_thread::yield();
      continue;
    }
    if (peerGone(p))
      return word.load(std::memory_order_acquire) >= value ? WaitResult::kReady
                                                           : WaitResult::kPeerGone;
    if (now >= deadline) return WaitResult::kTimeout;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    bell.wait(seen, static_cast<int>(std::min<int64_t>(left.count() + 1, kLivenessCheckMs)));
  }
}

}  // namespace squeeze
