// The direct all-reduce: where every rank of a communicator shares one host over shm, a dense
// all-reduce on host memory reads and writes the ranks' shared-memory windows
// (transports/shm/window.h) instead of sending messages: the "two-shot" all-reduce of MPI's
// shared-memory collectives and of NCCL-era custom all-reduce kernels.
//
// The buffer goes in rounds of at most the window's capacity. Round t uses buffer set t % 2:
//   1. wait until every peer has consumed round t - 2 (the last round on this set);
//   2. copy the parts of the round that other ranks own into this rank's input buffer, write the
//      call's header for the set, publish `published` = t;
//   3. for the part this rank owns (partStart: near-equal parts, rank q owns part q): wait for
//      every peer's `published`, check its header, reduce x_0 op x_1 op ... op x_(P-1) in rank
//      order (its own input from the caller's buffer, the others' from their windows) into its
//      result buffer, divide for avg, copy it to the output, publish `reduced` = t;
//   4. copy every other part's result out of its owner's window once `reduced` says it is there,
//      then publish `consumed` = t.
// Per rank that is (P-1)/P n copied in, n read and n/P written by the reduction, (P-1)/P n
// copied out: less memory traffic than any schedule of messages moves (each message is copied
// into a ring and out of it), and three waits per round instead of a step per message. Two sets
// let a fast rank copy in round t + 1 while a slow one still reads round t.
//
// Every rank reduces its part in the same order, and every other rank copies the owner's result,
// so every rank ends with the same bits. A rank whose call differs (count, datatype, op, call
// number) is told so by the header check, as a message's header would; a peer that fails or dies
// ends the wait with Error(kRemote), and one that makes no progress for SQZ_TIMEOUT_MS with
// Error(kTimeout).
//
// Why not a schedule for the executor: its steps are loads and stores in peers' memory guarded by
// counters, not messages on connections in order, which is all a schedule can say.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "base/types.h"
#include "base/wire.h"

namespace squeeze {

class ShmWindow;

class DirectAllReduce {
 public:
  explicit DirectAllReduce(std::shared_ptr<ShmWindow> window);

  /// Runs one dense all-reduce of req (host buffers; req.count > 0) over the window. `base` is
  /// the call's header (sequence number, collective, count, ...); the window checks it against
  /// every peer's. Thread: the communicator's call thread, one call at a time.
  void run(const CollRequest& req, const WireHeader& base, int timeoutMs, int spinUs,
           const std::atomic<bool>& aborted);

  /// Bytes this rank has written into its window for peers to read, over every call.
  uint64_t bytesPublished() const { return bytesPublished_; }

  /// Peers waiting for this rank stop waiting (Communicator::fail). Thread-safe.
  void shutdown();

 private:
  std::shared_ptr<ShmWindow> window_;
  uint64_t round_ = 0;  // rounds run so far, over every call: the counters' values
  uint64_t bytesPublished_ = 0;
};

}  // namespace squeeze
