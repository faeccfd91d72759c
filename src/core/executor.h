// The executor runs one rank's Schedule over its peer Connections on the calling thread.
//
// Per peer it keeps the schedule's sends and receives in order (the transport contract pairs the
// k-th send with the k-th receive), posts each as soon as its dependencies are done, keeps up to
// kRecvWindow receives in flight per peer (into scratch, for combining), and runs local ops
// (copy, finalize) when they become ready. When nothing can move it sleeps on the connections'
// wait sources; a stretch of timeoutMs without progress is an Error(kTimeout) naming the call,
// the peers and what was outstanding.
//
// Device calls (ExecContext::stream set): spans are device memory and go through unchanged; the
// codec runs its GPU kernels (ChunkInfo::stream); payloads sit in CallMemory's device or pinned
// buffers, whichever the peer's connection reads; a device span sent over, or received from, a
// connection that does not read device memory is staged through a pinned buffer, one pipeline
// piece at a time, so the copy of one piece overlaps the transfer of the pieces around it. Each
// local stage (combine, encode, decode, copy) synchronizes the stream before its result is sent
// or counted done.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "base/schedule.h"
#include "base/types.h"
#include "base/wire.h"
#include "core/call_memory.h"
#include "transports/transport.h"

namespace squeeze {

struct ExecContext {
  int rank;
  int nranks;
  std::vector<std::unique_ptr<Connection>>& conns;  // by rank
  int timeoutMs;
  const std::atomic<bool>& aborted;
  // Device calls: the communicator's internal stream (null: the call's buffers are host memory).
  device::GpuStream stream = nullptr;
};

class Executor {
 public:
  static constexpr size_t kRecvWindow = 4;

  // `base` carries the call's identity (comm hash, seq, collective, count, dtype, op, root,
  // codec); the executor fills in source rank, step, offset and size per message.
  void run(const CollRequest& req, const Schedule& sched, const WireHeader& base,
           ExecContext& ctx);

  // Payload bytes (headers not counted) this executor has handed to its connections, over
  // every call: what a codec saves shows here.
  uint64_t payloadBytesSent() const { return payloadBytesSent_; }

 private:
  CallMemory mem_;  // payload buffers and BufferRole::kScratch, reused across calls
  uint64_t payloadBytesSent_ = 0;
};

}  // namespace squeeze
