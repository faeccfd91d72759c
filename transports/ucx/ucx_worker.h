// UcxWorker: one communicator's ucp context and worker, shared by the ucx transport
// (ucx_transport.cc) and all of its connections: start-up, endpoints (with peer error handling
// where UCX's lanes have it), progress, and what the executor sleeps on.
//
// Progress: the worker is shared, so it is progressed once per executor round, by the first
// connection that finds nobody progressed it since its own last call (UcxWorker::progress); the
// others only look at their requests. The wait: after a round in which the worker drained
// (ucp_worker_progress returned 0, nothing posted since), the worker is armed and its event fd
// polled; if arming reports pending events (UCS_ERR_BUSY) or the worker did not drain, an
// always-readable eventfd makes the wait return at once, so the executor progresses again
// instead of sleeping on pending work, and never spins on an idle worker. While requests are
// pending the wait is also capped at kWakeupTickMs (a timerfd), because UCX 1.13's event fd can
// miss an event over tcp (UcxWorker::addTick); an idle rank sleeps until something happens.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "base/fd.h"
#include "transports/transport.h"

namespace squeeze {

// "CALL failed: <ucs_status_string>".
std::string ucxFailure(const char* call, ucs_status_t status);

// Where UCX's err_handler records an endpoint's failure. Owned by the worker (stable address for
// its whole life), so a late callback never lands in a destroyed Connection.
struct EpHealth {
  std::atomic<int> status{UCS_OK};
};

// The communicator's ucp context and worker, shared by the transport and its connections.
// Endpoint creation is serialized on setupMu_; everything else is used by the one thread that
// drives the connections.
class UcxWorker {
 public:
  // Returns nullptr and sets *error (which UCX call failed, and why) when UCX cannot start.
  static std::shared_ptr<UcxWorker> create(int myRank, int nranks, std::string* error);

  ~UcxWorker();

  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h handle() const { return worker_; }
  const std::string& address() const { return address_; }

  struct Endpoint {
    ucp_ep_h ep;
    EpHealth* health;  // owned by the worker
    bool peerMode;     // UCP_ERR_HANDLING_MODE_PEER (else NONE: UCX cannot report a dead peer)
  };

  // Creates an endpoint to a peer's worker address, with peer error handling where the lanes
  // support it. UCX 1.13's shared-memory lanes (posix, sysv) have none, so PEER finds no lane
  // for them: the first endpoint probes quietly and later ones go straight to the mode that
  // works. Throws Error(kSystem) when neither mode reaches the peer. connect() may overlap.
  Endpoint connect(const std::string& address, int myRank, int peer);

  // Something was posted: the worker has work that no progress call has seen yet.
  void notePosted() { drained_ = false; }

  // The n-th progress of the worker: a connection whose `seen` is behind knows another
  // connection progressed the worker since its own last call (this round), and skips.
  uint64_t generation() const { return generation_; }

  // Progresses the worker unless another connection did so since this one's last call (`seen`).
  // Returns true when the worker is still busy (the call bound was hit).
  bool progress(uint64_t& seen);

  // What the executor sleeps on for this worker (see the top of this file).
  void addWaitSources(WaitSources& ws);

  // Caps the coming wait at kWakeupTickMs, for a connection with requests pending: UCX 1.13's
  // event fd can stay quiet over tcp although a message arrived or a send could go on (fixed
  // with protocols v2 in UCX 1.14; see rapidsai/ucxx#15), so a waiting rank looks again at
  // that pace instead of sleeping the executor's whole slice. Idle ranks do not tick.
  void addTick(WaitSources& ws);

  // For a connection that must not wake the executor (shut down locally): a bounded sleep.
  void addIdleSource(WaitSources& ws) { addOnce(ws, idleFd_.get()); }

  // Progresses until `req` completes or the deadline passes, sleeping on the event fd when the
  // worker is idle. Returns the request's status (UCS_INPROGRESS on timeout).
  ucs_status_t waitFor(void* req, Deadline deadline);

 private:
  UcxWorker() = default;

  // Every connection of the worker adds the same fds; poll needs each once.
  static void addOnce(WaitSources& ws, int fd);

  static const char* envOr(const char* key, const char* fallback);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;  // the worker's event fd: UCX owns it, we never close it
  Fd readyFd_;
  Fd idleFd_;
  Fd tickFd_;  // one-shot timer: the wait's cap while requests are pending
  std::string address_;
  uint64_t generation_ = 1;
  uint64_t armedGeneration_ = 0;
  bool drained_ = false;
  enum class Support { kUnknown, kYes, kNo };
  std::mutex setupMu_;  // protects endpoint creation, health_ and peerMode_ (connect() overlaps)
  std::deque<EpHealth> health_;           // deque: stable addresses for the err_handler's arg
  Support peerMode_ = Support::kUnknown;  // whether PEER error handling finds lanes
};

}  // namespace squeeze
