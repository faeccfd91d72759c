// The executor runs one rank's Schedule over its peer Connections on the calling thread.
//
// Per peer it keeps the schedule's sends and receives in order (the transport contract pairs the
// k-th send with the k-th receive), posts each as soon as its dependencies are done, keeps up to
// kRecvWindow receives in flight per peer (into scratch, for combining), and runs local ops
// (copy, finalize) when they become ready. When nothing can move it sleeps on the connections'
// wait sources; a stretch of timeoutMs without progress is an Error(kTimeout) naming the call,
// the peers and what was outstanding.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "core/schedule.h"
#include "core/types.h"
#include "core/wire.h"
#include "transports/transport.h"

namespace squeeze {

struct ExecContext {
  int rank;
  int nranks;
  std::vector<std::unique_ptr<Connection>>& conns;  // by rank
  int timeoutMs;
  const std::atomic<bool>& aborted;
};

class Executor {
 public:
  static constexpr size_t kRecvWindow = 4;

  // `base` carries the call's identity (comm hash, seq, collective, count, dtype, op, root,
  // codec); the executor fills in source rank, step, offset and size per message.
  void run(const CollRequest& req, const Schedule& sched, const WireHeader& base,
           ExecContext& ctx);

 private:
  int acquireScratch(size_t bytes);
  void releaseScratch(int index) { freeScratch_.push_back(index); }

  std::vector<std::vector<char>> scratch_;  // receive payloads awaiting combine; reused
  std::vector<char> work_;                   // BufferRole::kScratch; reused across calls
  std::vector<int> freeScratch_;
};

}  // namespace squeeze
