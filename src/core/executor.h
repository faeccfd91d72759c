// The executor runs one rank's Schedule over its peer Connections on the calling thread.
//
// Per peer it keeps the schedule's sends and receives in order (the transport contract pairs the
// k-th send with the k-th receive), posts each as soon as its dependencies are done, keeps up to
// kRecvWindow receives in flight per peer (into payload buffers, for combining), and runs local
// ops (copy, finalize) when they become ready. What becomes ready together (a peer's ready
// sends, arrived payloads, ready local ops) goes to the context as one batch of pieces
// (Context::beginBatch), so a GPU launches each of the codec's kernels once for them. On a
// device call with a codec whose schedule runs in step order (ring, rhd), a step's receives
// from a peer are posted together and handed on together once all have arrived: the step's
// combine is then one batch, not one per piece, whatever the timing. When nothing can move it
// polls on for spinUs (yielding the core), then sleeps on the connections' wait sources; a
// stretch of timeoutMs without progress is an Error(kTimeout) naming the call, the peers and what
// was outstanding.
//
// Where the bytes are and where the work runs is the call's execution context (device/context.h):
// the executor asks it for payload buffers, copies and the codec's kernels, and treats its work
// as it treats a socket: post, then test. A step that hands work to the context (encode,
// combine, decode, a local copy) records a mark; the op counts as done, and a payload it made is
// sent, only once the context has reached the mark, so on a GPU the progress thread never waits
// for the device in the executor itself. On a device call, a connection that does not read device
// memory (tcp, shm) gets and gives host copies of payloads: the codec's kernels always read and
// write the context's own memory.
// With an encode pool (SQZ_ENCODE_THREADS > 1; host calls with a codec), the pieces of one batch
// that need an encode (sends the fused combine did not encode, finalizes) are encoded first, in
// parallel, and parked until their op runs: each piece's encode reads its own input and writes its
// own payload and residual range, so the results and residuals are one thread's bits (the norms,
// summed per piece, to rounding: their order follows the arrivals, as with one thread).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "base/schedule.h"
#include "base/types.h"
#include "base/wire.h"
#include "core/encode_pool.h"
#include "device/context.h"
#include "transports/transport.h"

namespace squeeze {

// What one call runs with: this rank, its connections, its limits, and the execution context
// (the communicator's host context, or its CUDA context for a call on device buffers).
struct CallEnv {
  int rank;
  int nranks;
  std::vector<std::unique_ptr<Connection>>& conns;  // by rank
  int timeoutMs;
  int spinUs;  // poll (yielding) this long after the last progress before sleeping
  const std::atomic<bool>& aborted;
  device::Context& ctx;
  // SQZ_ENCODE_THREADS > 1, a compressed call on host memory: encodes the pieces of a step that
  // are ready together in parallel (null: one thread).
  EncodePool* encodePool = nullptr;
};

class Executor {
 public:
  static constexpr size_t kRecvWindow = 4;

  // `base` carries the call's identity (comm hash, seq, collective, count, dtype, op, root,
  // codec); the executor fills in source rank, step, offset and size per message.
  void run(const CollRequest& req, const Schedule& sched, const WireHeader& base, CallEnv& env);

  // Payload bytes (headers not counted) this executor has handed to its connections, over
  // every call: what a codec saves shows here.
  uint64_t payloadBytesSent() const { return payloadBytesSent_; }

 private:
  uint64_t payloadBytesSent_ = 0;
};

}  // namespace squeeze
