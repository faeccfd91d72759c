// The shared-memory window of a communicator whose ranks all share this host over shm: every
// rank's window, mapped in every rank, so that a collective can read and write its peers' memory
// instead of sending them messages (the direct all-reduce, src/core/direct_allreduce.h).
//
// A rank's window lives in its own shm segment, after its doorbell page (the segment every local
// peer maps anyway, transports/shm/shm_transport.h). It holds a control page and two buffer sets:
//   control: a header (magic, version, rank, ranks, communicator, capacity), then counters that
//            only the owner writes, each on its own cache line (published, reduced, consumed: the
//            last round whose step the owner finished; closed), then a WireHeader per buffer set
//            (the call the set's data belongs to, which readers check before trusting it);
//            its last 2 KiB are the stream area of device calls (device/stream_collectives.h);
//   set s:   input (capacity bytes), then result (capacity / ranks, rounded up, plus one element).
// The owner publishes a counter with a release store and rings every peer's doorbell; a reader
// that waits polls for spinUs, yielding the core, then sleeps on its own doorbell.
//
// A peer that failed sets its closed flag (shutdown(), from any thread) and rings everyone; one
// whose process died is seen through the liveness socket of its shm connection (a dup of it),
// which the kernel closes with the process. Either way a waiter returns kPeerClosed or
// kPeerGone, never waits forever; the caller words the error.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/fd.h"
#include "base/wire.h"

namespace squeeze {

class Doorbell;
class Mapping;

// The window's smallest and largest capacity (SQZ_SHM_DIRECT_BYTES), checked before any size
// arithmetic on a peer's header.
constexpr size_t kMinWindowBytes = 4096;
constexpr size_t kMaxWindowBytes = size_t{1} << 30;

// Bytes a window of `capacity` takes after the doorbell page, for `nranks` ranks.
size_t windowSegmentBytes(size_t capacity, int nranks);

// Writes the control header of this rank's window into `window` (its segment past the doorbell
// page, zero-filled, windowSegmentBytes(capacity, nranks) long).
void initWindow(uint8_t* window, int rank, int nranks, uint64_t commHash, size_t capacity);

// Whether a rank's segment (doorbell page, then maybe a window) has a window at all: a rank with
// SQZ_SHM_DIRECT_BYTES=0 has none, and then no rank of the communicator uses one.
bool holdsWindow(const Mapping& segment);

enum class WindowCounter : uint8_t { kPublished, kReduced, kConsumed };

enum class WaitResult : uint8_t {
  kReady,       // the counter reached the value
  kAborted,     // the caller's abort flag, or this rank's own window was shut down
  kPeerClosed,  // the peer shut its window down (it failed, or was destroyed)
  kPeerGone,    // the peer's process exited or was killed
  kTimeout,     // nothing changed for timeoutMs
};

struct WindowWait {
  int timeoutMs;
  int spinUs;
  const std::atomic<bool>* aborted;
};

// One rank's segment as the window sees it: its mapping (doorbell page, then window), and the
// dup of the liveness socket to that rank (invalid for this rank).
struct WindowSegment {
  std::shared_ptr<const Mapping> map;
  Fd watch;
};

class ShmWindow {
 public:
  /// Assembles the window from every rank's segment (segments[rank]; this rank's own too).
  /// Validates each peer's header (Error kRemote naming the rank when it is not a window of this
  /// communicator) and uses the smallest capacity of all, so every rank agrees on it.
  ShmWindow(int rank, int nranks, uint64_t commHash, std::vector<WindowSegment> segments);
  ~ShmWindow();
  ShmWindow(const ShmWindow&) = delete;
  ShmWindow& operator=(const ShmWindow&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  /// Bytes of input per round: the smallest capacity of every rank's window.
  size_t capacity() const { return capacity_; }

  /// Rank p's input and result buffers of set s (0 or 1), and its WireHeader of set s.
  uint8_t* input(int p, int s) const;
  uint8_t* result(int p, int s) const;
  WireHeader* header(int p, int s) const;

  /// The last kStreamAreaBytes of rank p's control page, zero at creation, for the stream
  /// all-reduce of device buffers (device/stream_collectives.h), which lays them out.
  uint8_t* streamArea(int p) const;
  static constexpr size_t kStreamAreaBytes = 2048;
  /// Every rank's segment mapping, held for as long as the result lives (not the window: its
  /// liveness sockets close with it): for memory registered with CUDA, which must stay mapped
  /// until it is unregistered.
  std::shared_ptr<const void> holdMappings() const;
  /// Whether rank p shut its window down (it failed or was destroyed) or its process is gone.
  /// Thread-safe (a system call each time): for watchers other than the call's thread.
  bool peerDown(int p) const;

  /// This rank's counter := value (release), waking every peer that sleeps.
  void publish(WindowCounter c, uint64_t value);
  /// Rank p's counter (acquire).
  uint64_t counter(int p, WindowCounter c) const;
  /// Waits until rank p's counter reaches value. Thread: the one thread that runs this rank's
  /// collective.
  WaitResult waitFor(int p, WindowCounter c, uint64_t value, const WindowWait& w);

  /// Marks this rank's window closed and wakes every rank, this one included, so that no peer
  /// waits for it. Thread-safe, idempotent.
  void shutdown();

 private:
  struct Rank;
  bool peerGone(int p);

  const int rank_;
  const int nranks_;
  size_t capacity_ = 0;
  std::vector<Rank> ranks_;
};

}  // namespace squeeze
