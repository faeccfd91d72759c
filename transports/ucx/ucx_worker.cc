// UcxWorker (see ucx_worker.h).
#include "transports/ucx/ucx_worker.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <ucs/debug/log_def.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/logging.h"
#include "base/strings.h"

namespace squeeze {
namespace {

// ucp_worker_progress calls per progress(): enough to drain a burst of completions, few enough
// that one busy worker cannot starve the executor's other work (combines, encodes).
constexpr int kMaxProgressCalls = 64;
// The longest a rank with requests pending sleeps before it looks at the worker again (see
// UcxWorker::addTick). 2 ms: measured on the tree all-reduce over UCX's tcp, where the event fd
// alone left calls waiting for the executor's 200 ms slice; 1 ms is no faster, 10 ms 2.5x slower.
constexpr int kWakeupTickMs = 2;

void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<EpHealth*>(arg)->status.store(status, std::memory_order_release);
}

// Silences UCX's own log lines (all but fatal ones) on this thread for one scope: the probe for
// peer error handling fails by design on shared-memory lanes, and UCX logs that as an ERROR.
// Other threads' lines pass through; the mutex keeps communicators' push/pop pairs nested.
thread_local bool tQuietUcx = false;
std::mutex gQuietUcxMu;

ucs_log_func_rc_t quietUcxHandler(const char*, unsigned, const char*, ucs_log_level_t level,
                                  const ucs_log_component_config_t*, const char*, va_list) {
  return tQuietUcx && level != UCS_LOG_LEVEL_FATAL ? UCS_LOG_FUNC_RC_STOP
                                                   : UCS_LOG_FUNC_RC_CONTINUE;
}

class QuietUcxLog {
 public:
  QuietUcxLog() : lock_(gQuietUcxMu) {
    ucs_log_push_handler(quietUcxHandler);
    tQuietUcx = true;
  }
  ~QuietUcxLog() {
    tQuietUcx = false;
    ucs_log_pop_handler();
  }
  QuietUcxLog(const QuietUcxLog&) = delete;
  QuietUcxLog& operator=(const QuietUcxLog&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
};

}  // namespace

std::string ucxFailure(const char* call, ucs_status_t status) {
  return strCat(call, " failed: ", ucs_status_string(status));
}

std::shared_ptr<UcxWorker> UcxWorker::create(int myRank, int nranks, std::string* error) {
  std::shared_ptr<UcxWorker> w(new UcxWorker());
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) {
    *error = ucxFailure("ucp_config_read", s);
    return nullptr;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.estimated_num_eps = static_cast<size_t>(std::max(nranks - 1, 1));
  params.name = "squeeze";
  s = ucp_init(&params, config, &w->context_);
  ucp_config_release(config);
  if (s != UCS_OK) {
    w->context_ = nullptr;
    *error = ucxFailure("ucp_init", s);
    return nullptr;
  }
  // SERIALIZED: the communicator's calls may come from different threads (a host call, the
  // device queue's thread), never two at once. shutdown() never touches the worker.
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  s = ucp_worker_create(w->context_, &wp, &w->worker_);
  if (s != UCS_OK) {
    w->worker_ = nullptr;
    *error = ucxFailure("ucp_worker_create", s);
    return nullptr;
  }
  s = ucp_worker_get_efd(w->worker_, &w->efd_);
  if (s != UCS_OK) {
    *error = ucxFailure("ucp_worker_get_efd", s);
    return nullptr;
  }
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  s = ucp_worker_get_address(w->worker_, &addr, &len);
  if (s != UCS_OK) {
    *error = ucxFailure("ucp_worker_get_address", s);
    return nullptr;
  }
  w->address_.assign(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(w->worker_, addr);
  // readyFd: written once, never read, so always readable; idleFd: never written; tickFd:
  // the one-shot timer that caps a wait with requests pending (addTick).
  w->readyFd_.reset(::eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK));
  w->tickFd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
  w->idleFd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (w->readyFd_.get() < 0 || w->idleFd_.get() < 0 || w->tickFd_.get() < 0) {
    *error = strCat("eventfd() or timerfd_create() failed: ", std::strerror(errno));
    return nullptr;
  }
  SQZ_INFO(kTransport, "rank ", myRank, ": ucx worker ready (", len,
           "-byte address; UCX_TLS=", envOr("UCX_TLS", "all"),
           ", UCX_NET_DEVICES=", envOr("UCX_NET_DEVICES", "all"), ")");
  return w;
}

UcxWorker::~UcxWorker() {
  if (worker_) ucp_worker_destroy(worker_);
  if (context_) ucp_cleanup(context_);
  // readyFd_, idleFd_ and tickFd_ close after this, as members.
}

UcxWorker::Endpoint UcxWorker::connect(const std::string& address, int myRank, int peer) {
  std::lock_guard<std::mutex> lock(setupMu_);
  Endpoint e{nullptr, &health_.emplace_back(), true};
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_handler.cb = onEndpointError;
  params.err_handler.arg = e.health;
  ucs_status_t peerStatus = UCS_ERR_UNSUPPORTED;
  if (peerMode_ != Support::kNo) {
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    if (peerMode_ == Support::kUnknown) {
      QuietUcxLog quiet;
      peerStatus = ucp_ep_create(worker_, &params, &e.ep);
    } else {
      peerStatus = ucp_ep_create(worker_, &params, &e.ep);
    }
    if (peerStatus == UCS_OK) {
      peerMode_ = Support::kYes;
      return e;
    }
    if (peerMode_ == Support::kUnknown) {
      peerMode_ = Support::kNo;
      SQZ_INFO(kTransport, "rank ", myRank, ": UCX's lanes cannot report a failed peer (",
               ucs_status_string(peerStatus),
               " with UCP_ERR_HANDLING_MODE_PEER); endpoints "
               "use mode NONE and the watch sockets alone detect a peer that is gone");
    }
  }
  e.peerMode = false;
  params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  const ucs_status_t s = ucp_ep_create(worker_, &params, &e.ep);
  if (s != UCS_OK)
    raise(ErrorCode::kSystem, "rank ", myRank, ": UCX cannot reach rank ", peer, " (",
          ucxFailure("ucp_ep_create", s), peerStatus == UCS_ERR_UNSUPPORTED ? "" : ", and ",
          peerStatus == UCS_ERR_UNSUPPORTED ? "" : ucs_status_string(peerStatus),
          peerStatus == UCS_ERR_UNSUPPORTED ? "" : " with peer error handling",
          "); check that UCX_TLS and UCX_NET_DEVICES name transports both ranks share");
  return e;
}

bool UcxWorker::progress(uint64_t& seen) {
  if (seen != generation_) {
    seen = generation_;
    return false;
  }
  unsigned events = 0;
  int calls = 0;
  while (calls < kMaxProgressCalls && (events = ucp_worker_progress(worker_)) != 0) ++calls;
  seen = ++generation_;
  drained_ = events == 0;
  return calls == kMaxProgressCalls;
}

void UcxWorker::addWaitSources(WaitSources& ws) {
  if (drained_ && armedGeneration_ != generation_) {
    const ucs_status_t s = ucp_worker_arm(worker_);
    if (s == UCS_ERR_BUSY) {
      drained_ = false;
    } else if (s != UCS_OK) {
      raise(ErrorCode::kSystem, ucxFailure("ucp_worker_arm", s));
    } else {
      armedGeneration_ = generation_;
    }
  }
  addOnce(ws, drained_ ? efd_ : readyFd_.get());
}

void UcxWorker::addTick(WaitSources& ws) {
  for (const pollfd& p : ws.fds)
    if (p.fd == tickFd_.get()) return;
  uint64_t expirations;
  while (::read(tickFd_.get(), &expirations, sizeof expirations) > 0) {
  }
  itimerspec its{};
  its.it_value.tv_nsec = kWakeupTickMs * 1000000L;
  if (::timerfd_settime(tickFd_.get(), 0, &its, nullptr) != 0)
    throw SysError("timerfd_settime()", errno);
  ws.fds.push_back(pollfd{tickFd_.get(), POLLIN, 0});
}

ucs_status_t UcxWorker::waitFor(void* req, Deadline deadline) {
  for (;;) {
    while (ucp_worker_progress(worker_) != 0) {
    }
    ++generation_;
    const ucs_status_t s = ucp_request_check_status(req);
    if (s != UCS_INPROGRESS) return s;
    const int left = remainingMs(deadline);
    if (left == 0) return UCS_INPROGRESS;
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) continue;
    if (armed != UCS_OK) return armed;
    pollfd p{efd_, POLLIN, 0};
    ::poll(&p, 1, std::min(left, kWakeupTickMs));  // the tick: see addTick
  }
}

void UcxWorker::addOnce(WaitSources& ws, int fd) {
  for (const pollfd& p : ws.fds)
    if (p.fd == fd) return;
  ws.fds.push_back(pollfd{fd, POLLIN, 0});
}

const char* UcxWorker::envOr(const char* key, const char* fallback) {
  const char* v = std::getenv(key);
  return v && *v ? v : fallback;
}

}  // namespace squeeze
