// The CUDA stand-in's streams (standin.h): one worker thread per stream runs its items in
// order, after CUDA's ordering between blocking streams and the legacy default stream; events
// are markers on a stream; host functions run on the device's one callback thread;
// cuStreamWaitValue32 polls a word. Host threads that wait for the whole device (implicit
// synchronization) go through the deadlock watchdog here.
#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "device/standin/internal.h"

namespace squeeze::standin::detail {

using Clock = std::chrono::steady_clock;

#pragma GCC visibility push(hidden)

// A cudaEventRecord: done once its stream ran the marker, which took the time.
struct RecordPoint {
  std::shared_ptr<Stream> stream;
  uint64_t seq = 0;
  std::atomic<bool> done{false};
  Clock::time_point at;
};

struct Event {
  Device* device = nullptr;
  unsigned flags = 0;
  std::mutex mu;
  std::shared_ptr<RecordPoint> last;  // the latest record; null: never recorded
};

#pragma GCC visibility pop

namespace {

// The calling thread's per-thread default streams (cudaStreamPerThread), one per device, retired
// when the thread exits (their pending work still runs).
struct PerThreadStreams {
  State* owner = nullptr;
  std::vector<std::shared_ptr<Stream>> byDevice;
  ~PerThreadStreams();
};
thread_local PerThreadStreams tlsPerThread;

void unlist(const std::shared_ptr<Stream>& s) {
  Device& d = *s->device;
  std::lock_guard<std::mutex> lock(d.mu);
  for (auto it = d.streams.begin(); it != d.streams.end(); ++it) {
    if (*it == s) {
      d.streams.erase(it);
      break;
    }
  }
}

// As cudaStreamDestroy: the worker finishes what is queued, then ends.
void retire(const std::shared_ptr<Stream>& s) {
  bool idle;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->destroyed = true;
    idle = !s->workerStarted;
  }
  s->cv.notify_all();
  if (idle) unlist(s);
}

PerThreadStreams::~PerThreadStreams() {
  // A fork()ed child's copy names the parent's streams, whose locks may be held by threads that
  // no longer exist: leave them alone.
  if (!owner || owner != peekState()) return;
  for (auto& s : byDevice)
    if (s) retire(s);
}

std::shared_ptr<Stream> perThreadStream(Device& d) {
  State& st = state();
  if (tlsPerThread.owner != &st) {
    tlsPerThread.owner = &st;
    tlsPerThread.byDevice.assign(st.deviceCount, nullptr);
  }
  auto& s = tlsPerThread.byDevice[d.ordinal];
  // The per-thread default stream is a blocking stream: it synchronizes with the legacy stream.
  if (!s) s = newStream(d, StreamKind::kPerThread, true, 0);
  return s;
}

void setState(Stream& s, std::string what) {
  std::lock_guard<std::mutex> lock(s.mu);
  s.state = std::move(what);
}

void setHold(Stream& s, const Hold& h) {
  std::lock_guard<std::mutex> lock(s.mu);
  s.hold = h;
}

void workerLoop(std::shared_ptr<Stream> s) {
  markDeviceThread();
  Device& d = *s->device;
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return !s->queue.empty() || s->destroyed; });
      if (s->queue.empty()) break;
      item = std::move(s->queue.front());
      s->queue.pop_front();
    }
    for (const auto& dep : item.deps) {
      Stream& t = *dep.first;
      const uint64_t seq = dep.second;
      if (t.completed.load() >= seq) continue;
      setState(*s, "waiting for " + describe(t) + " before " + item.what);
      {
        std::lock_guard<std::mutex> own(s->mu);
        s->waitingOn = &t;
      }
      {
        std::unique_lock<std::mutex> lock(t.mu);
        t.cv.wait(lock, [&] { return t.completed.load() >= seq; });
      }
      std::lock_guard<std::mutex> own(s->mu);
      s->waitingOn = nullptr;
    }
    setState(*s, item.what);
    // After a sticky error the device runs nothing more (kernels, copies, host functions), as a
    // GPU context that faulted; waits still complete so no host thread hangs on it.
    if (item.run && (item.runsAfterFailure || stickyError(d) == cudaSuccess)) {
      try {
        item.run(*s);
      } catch (const std::exception& e) {
        failDevice(d, cudaErrorLaunchFailure, item.what + " failed: " + e.what());
      } catch (...) {
        failDevice(d, cudaErrorLaunchFailure, item.what + " failed (a non-standard exception)");
      }
    }
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->completed.store(item.seq);
      s->state.clear();
      s->hold = Hold{};
    }
    s->cv.notify_all();
  }
  unlist(s);
}

void callbackLoop(Device* d) {
  markDeviceThread();
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(d->callbackMu);
      d->callbackCv.wait(lock, [&] { return !d->callbacks.empty(); });
      fn = std::move(d->callbacks.front());
      d->callbacks.pop_front();
    }
    fn();
  }
}

// Runs fn on the device's callback thread and waits for it to return: one host function at a
// time per device, so one that blocks holds back the others, as on a GPU.
void runOnCallbackThread(Device& d, std::function<void()> fn) {
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;  // rethrown on the stream, which then fails
  };
  auto done = std::make_shared<Done>();
  {
    std::lock_guard<std::mutex> lock(d.callbackMu);
    d.callbacks.push_back([fn = std::move(fn), done] {
      std::exception_ptr error;
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> l(done->mu);
      done->error = error;
      done->done = true;
      done->cv.notify_all();
    });
    if (!d.callbackStarted) {
      d.callbackStarted = true;
      std::thread(callbackLoop, &d).detach();
    }
  }
  d.callbackCv.notify_one();
  std::unique_lock<std::mutex> lock(done->mu);
  done->cv.wait(lock, [&] { return done->done; });
  if (done->error) std::rethrow_exception(done->error);
}

std::string pointerText(const volatile void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
  return buf;
}

bool waitSatisfied(uint32_t now, uint32_t value, unsigned flags) {
  switch (flags & ~CU_STREAM_WAIT_VALUE_FLUSH) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return static_cast<int32_t>(now - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return now == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (now & value) != 0;
    default:
      return ~(now | value) != 0;  // CU_STREAM_WAIT_VALUE_NOR
  }
}

std::string holdText(const Hold& h) {
  if (h.word) {
    const uint32_t now = __atomic_load_n(h.word, __ATOMIC_ACQUIRE);
    const char* op = "";
    switch (h.flags & ~CU_STREAM_WAIT_VALUE_FLUSH) {
      case CU_STREAM_WAIT_VALUE_GEQ:
        op = ">= ";
        break;
      case CU_STREAM_WAIT_VALUE_EQ:
        op = "== ";
        break;
      case CU_STREAM_WAIT_VALUE_AND:
        op = "a bit of ";
        break;
      default:
        op = "a zero bit of ~";
        break;
    }
    return std::string(h.kind) + " on " + pointerText(h.word) + " (waiting for " + op +
           std::to_string(h.value) + ", now " + std::to_string(now) + ")";
  }
  return std::string(h.kind) + " (" + pointerText(h.fn) + ", from cudaLaunchHostFunc)";
}

struct Target {
  std::shared_ptr<Stream> stream;
  uint64_t seq;
};

// The targets still short of their item that are held right now.
std::vector<std::string> heldTargets(const std::vector<Target>& targets) {
  std::vector<std::string> held;
  for (const auto& t : targets) {
    std::lock_guard<std::mutex> lock(t.stream->mu);
    if (t.stream->completed.load() >= t.seq) continue;
    if (t.stream->hold.kind) {
      held.push_back(describe(*t.stream) + " is held by " + holdText(t.stream->hold));
    } else if (Stream* behind = t.stream->waitingOn) {
      // One level of ordering: the legacy stream behind a blocking stream, or a
      // cudaStreamWaitEvent behind another stream; its lock is taken after this one's only.
      std::lock_guard<std::mutex> other(behind->mu);
      if (behind->hold.kind)
        held.push_back(describe(*t.stream) + " waits for " + describe(*behind) +
                       ", which is held by " + holdText(behind->hold));
    }
  }
  return held;
}

[[noreturn]] void reportHang(Device& d, const std::string& call, const char* scope, long ms) {
  std::string text =
      "sqz-cuda-standin: " + call + " has waited " + std::to_string(ms) + " ms for " + scope +
      " behind a held stream (SQZ_STANDIN_HANG_MS=" + std::to_string(state().hangMs) + "): a " +
      "deadlock. The streams of device " + std::to_string(d.ordinal) + ":\n";
  std::lock_guard<std::mutex> lock(d.mu);
  for (const auto& s : d.streams) {
    std::lock_guard<std::mutex> l(s->mu);
    const uint64_t e = s->enqueued.load(), c = s->completed.load();
    text += "  " + describe(*s) + ": ";
    text += s->hold.kind       ? "held by " + holdText(s->hold)
            : s->state.empty() ? std::string("idle")
                               : "running " + s->state;
    text += "; " + std::to_string(e - c) + " item(s) not done (" + std::to_string(c) + " of " +
            std::to_string(e) + " completed)\n";
  }
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  std::abort();
}

// A host thread waits for every target inside `call`. A target held by a stream wait or a host
// function is the deadlock NCCL's rule forbids: said once the wait has lasted a second (a holder
// about to be released by another thread is only a stall), and fatal after SQZ_STANDIN_HANG_MS.
void watchedWait(Device& d, const std::vector<Target>& targets, const std::string& call,
                 const char* scope) {
  const auto start = Clock::now();
  const long hangMs = state().hangMs;
  bool warned = false;
  const long warnMs = hangMs > 0 ? std::min(1000L, hangMs / 2) : 1000L;
  for (const auto& t : targets) {
    Stream& s = *t.stream;
    while (s.completed.load() < t.seq) {
      const auto held = heldTargets(targets);
      const long soFar = static_cast<long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
      if (!held.empty() && !warned && soFar >= warnMs) {
        warned = true;
        std::string text;
        for (const auto& h : held)
          text += "sqz-cuda-standin: " + call + " waits for " + scope + " while " + h +
                  ": NCCL's rule forbids this; it deadlocks when the holder waits for this "
                  "thread\n";
        std::fputs(text.c_str(), stderr);
      }
      const long waited = static_cast<long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
      if (!held.empty() && hangMs > 0 && waited >= hangMs) reportHang(d, call, scope, waited);
      std::unique_lock<std::mutex> lock(s.mu);
      s.cv.wait_for(lock, std::chrono::milliseconds(10),
                    [&] { return s.completed.load() >= t.seq; });
    }
  }
}

std::shared_ptr<Event> findEvent(cudaEvent_t e) {
  if (!e) return nullptr;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.handlesMu);
  auto it = st.events.find(e);
  return it == st.events.end() ? nullptr : it->second;
}

CUresult CUDAAPI streamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                   unsigned int flags) {
  cudaError_t rc;
  auto s = resolveStream(reinterpret_cast<cudaStream_t>(stream), &rc);
  if (!s) return static_cast<CUresult>(rc);  // the numbers agree (400: invalid handle)
  if ((flags & ~CU_STREAM_WAIT_VALUE_FLUSH) > CU_STREAM_WAIT_VALUE_NOR)
    return CUDA_ERROR_INVALID_VALUE;
  auto* word = reinterpret_cast<const volatile uint32_t*>(addr);
  if (!word || addr % 4 || !isDeviceAccessible(const_cast<const uint32_t*>(word)))
    return CUDA_ERROR_INVALID_VALUE;  // a GPU can only wait on memory it can read
  if (stickyError(*s->device)) return CUDA_ERROR_LAUNCH_FAILED;
  Item item;
  item.what = "cuStreamWaitValue32";
  item.run = [word, value, flags](Stream& self) {
    setHold(self, Hold{"cuStreamWaitValue32", word, value, flags, nullptr});
    auto pause = std::chrono::microseconds(1);
    while (!waitSatisfied(__atomic_load_n(word, __ATOMIC_ACQUIRE), value, flags)) {
      if (stickyError(*self.device)) return;  // a failed context stops waiting
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
  };
  enqueue(s, std::move(item));
  return CUDA_SUCCESS;
}

}  // namespace

void* streamWaitValue32Entry() { return reinterpret_cast<void*>(&streamWaitValue32); }

std::shared_ptr<Stream> newStream(Device& d, StreamKind kind, bool blocking, unsigned flags) {
  auto s = std::make_shared<Stream>();
  s->device = &d;
  s->kind = kind;
  s->blocking = blocking;
  s->flags = flags;
  std::lock_guard<std::mutex> lock(d.mu);
  d.streams.push_back(s);
  return s;
}

std::shared_ptr<Stream> resolveStream(cudaStream_t handle, cudaError_t* rc) {
  *rc = cudaSuccess;
  if (!handle || handle == cudaStreamLegacy || handle == cudaStreamPerThread) {
    Device* d = nullptr;
    if ((*rc = currentDevice(&d)) != cudaSuccess) return nullptr;
    return handle == cudaStreamPerThread ? perThreadStream(*d) : d->legacy;
  }
  State& st = state();
  std::lock_guard<std::mutex> lock(st.handlesMu);
  auto it = st.streams.find(handle);
  if (it != st.streams.end()) return it->second;
  *rc = cudaErrorInvalidResourceHandle;
  return nullptr;
}

uint64_t enqueue(const std::shared_ptr<Stream>& s, Item item) {
  Device& d = *s->device;
  auto after = [&](const std::shared_ptr<Stream>& t) {
    const uint64_t e = t->enqueued.load();
    if (t->completed.load() < e) item.deps.emplace_back(t, e);
  };
  // CUDA's legacy default stream: its work waits for all earlier work on the device's blocking
  // streams, and theirs for all earlier work on it. Non-blocking streams do neither.
  if (s->kind == StreamKind::kLegacy) {
    std::lock_guard<std::mutex> lock(d.mu);
    for (const auto& t : d.streams)
      if (t != s && t->blocking) after(t);
  } else if (s->blocking) {
    after(d.legacy);
  }
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    seq = s->enqueued.load() + 1;
    item.seq = seq;
    s->queue.push_back(std::move(item));
    s->enqueued.store(seq);
    if (!s->workerStarted) {
      s->workerStarted = true;
      std::thread(workerLoop, s).detach();
    }
  }
  s->cv.notify_all();
  return seq;
}

void waitFor(Stream& s, uint64_t seq) {
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&] { return s.completed.load() >= seq; });
}

cudaError_t syncDevice(Device& d, const char* call) {
  if (cudaError_t rc = refuseOnDevice(call)) return rc;
  count(Count::kImplicitSyncs);
  count(Count::kHostWaits);
  std::vector<Target> targets;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    for (const auto& s : d.streams) {
      const uint64_t e = s->enqueued.load();
      if (s->completed.load() < e) targets.push_back({s, e});
    }
  }
  watchedWait(d, targets, call, "the whole device");
  return stickyError(d);
}

cudaError_t waitWatched(const std::shared_ptr<Stream>& s, uint64_t seq, const char* call) {
  if (cudaError_t rc = refuseOnDevice(call)) return rc;
  count(Count::kHostWaits);
  watchedWait(*s->device, {{s, seq}}, call, "its stream");
  return stickyError(*s->device);
}

std::string describe(const Stream& s) {
  const std::string dev = " of device " + std::to_string(s.device->ordinal);
  switch (s.kind) {
    case StreamKind::kLegacy:
      return "the legacy default stream" + dev;
    case StreamKind::kPerThread:
      return "a per-thread default stream (" + pointerText(&s) + ")" + dev;
    default:
      return "stream " + pointerText(&s) + dev;
  }
}

}  // namespace squeeze::standin::detail

namespace squeeze::standin {

using namespace detail;

namespace {

// True when `kernel` is loaded on `d`; marks it loaded (its first launch loads it).
bool kernelLoaded(Device& d, const std::string& kernel) {
  static const bool eager = [] {
    const char* mode = std::getenv("CUDA_MODULE_LOADING");
    return mode && std::string(mode) == "EAGER";
  }();
  std::lock_guard<std::mutex> lock(d.mu);
  return eager || d.allKernelsLoaded || !d.loadedKernels.insert(kernel).second;
}

}  // namespace

void loadKernels() {
  Device* d = deviceAt(currentOrdinal());
  if (!d) return;
  std::lock_guard<std::mutex> lock(d->mu);
  d->allKernelsLoaded = true;
}

cudaError_t launch(cudaStream_t stream, const char* kernel, std::function<void()> body) {
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  // As CUDA: a kernel goes to a stream of the current device.
  if (s->device->ordinal != currentOrdinal()) return fail(cudaErrorInvalidResourceHandle);
  if ((rc = stickyError(*s->device))) return fail(rc);
  const std::string name = kernel ? kernel : "?";
  if (!kernelLoaded(*s->device, name)) {
    const std::string call = "loading kernel " + name + " (CUDA's lazy loading)";
    if ((rc = syncDevice(*s->device, call.c_str()))) return fail(rc);
  }
  count(Count::kLaunches);
  Item item;
  item.what = "kernel " + name;
  item.run = [body = std::move(body)](Stream&) { body(); };
  enqueue(s, std::move(item));
  return cudaSuccess;
}

}  // namespace squeeze::standin

using namespace squeeze::standin::detail;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  if (!pStream || (flags & ~cudaStreamNonBlocking)) return fail(cudaErrorInvalidValue);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  auto s = newStream(*d, StreamKind::kCreated, !(flags & cudaStreamNonBlocking), flags);
  State& st = state();
  std::lock_guard<std::mutex> lock(st.handlesMu);
  st.streams[s.get()] = s;
  *pStream = reinterpret_cast<cudaStream_t>(s.get());
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int) {
  return cudaStreamCreateWithFlags(pStream, flags);  // priorities change nothing here
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::shared_ptr<Stream> s;
  {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.handlesMu);
    auto it = st.streams.find(stream);
    if (it == st.streams.end()) return fail(cudaErrorInvalidResourceHandle);
    s = std::move(it->second);
    st.streams.erase(it);
  }
  retire(s);  // what is queued still runs, as cudaStreamDestroy documents
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  if ((rc = refuseOnDevice("cudaStreamSynchronize"))) return fail(rc);
  count(Count::kHostWaits);
  waitFor(*s, s->enqueued.load());
  return fail(stickyError(*s->device));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  if ((rc = stickyError(*s->device))) return fail(rc);
  return s->completed.load() >= s->enqueued.load() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  *device = s->device->ordinal;
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (!flags) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  *flags = s->flags;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (flags & ~cudaEventWaitExternal) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  auto ev = findEvent(event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  if ((rc = stickyError(*s->device))) return fail(rc);
  std::shared_ptr<RecordPoint> rp;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    rp = ev->last;
  }
  if (!rp) return cudaSuccess;  // never recorded: nothing to wait for
  Item item;
  item.what = "cudaStreamWaitEvent";
  if (!rp->done.load(std::memory_order_acquire)) item.deps.emplace_back(rp->stream, rp->seq);
  enqueue(s, std::move(item));
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (!fn) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  if ((rc = stickyError(*s->device))) return fail(rc);
  Item item;
  item.what = "a host function";
  item.run = [fn, userData](Stream& self) {
    setHold(self, Hold{"a host function", nullptr, 0, 0, reinterpret_cast<void*>(fn)});
    runOnCallbackThread(*self.device, [fn, userData] { fn(userData); });
  };
  enqueue(s, std::move(item));
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  return fail(syncDevice(*d, "cudaDeviceSynchronize"));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  constexpr unsigned kKnown =
      cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~kKnown)) return fail(cudaErrorInvalidValue);
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return fail(cudaErrorInvalidValue);  // as CUDA: interprocess events cannot time
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  auto ev = std::make_shared<Event>();
  ev->device = d;
  ev->flags = flags;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.handlesMu);
  st.events[ev.get()] = ev;
  *event = reinterpret_cast<cudaEvent_t>(ev.get());
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.handlesMu);
  if (!event || !st.events.erase(event)) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;  // a record still queued keeps what it needs
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto ev = findEvent(event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  if (s->device != ev->device) return fail(cudaErrorInvalidResourceHandle);  // as CUDA
  if ((rc = stickyError(*s->device))) return fail(rc);
  auto rp = std::make_shared<RecordPoint>();
  rp->stream = s;
  Item item;
  item.what = "cudaEventRecord";
  item.runsAfterFailure = true;
  item.run = [rp](Stream&) {
    rp->at = Clock::now();
    rp->done.store(true, std::memory_order_release);
  };
  // The record point is published with its number; the marker only sets `at` and `done`.
  std::lock_guard<std::mutex> lock(ev->mu);
  rp->seq = enqueue(s, std::move(item));
  ev->last = rp;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  auto ev = findEvent(event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t rc = stickyError(*ev->device)) return fail(rc);
  std::lock_guard<std::mutex> lock(ev->mu);
  if (!ev->last || ev->last->done.load(std::memory_order_acquire)) return cudaSuccess;
  return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  auto ev = findEvent(event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<RecordPoint> rp;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    rp = ev->last;
  }
  if (cudaError_t rc = refuseOnDevice("cudaEventSynchronize")) return fail(rc);
  count(Count::kHostWaits);
  if (rp) waitFor(*rp->stream, rp->seq);
  return fail(stickyError(*ev->device));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  auto a = findEvent(start), b = findEvent(end);
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<RecordPoint> ra, rb;
  {
    std::lock_guard<std::mutex> lock(a->mu);
    ra = a->last;
  }
  {
    std::lock_guard<std::mutex> lock(b->mu);
    rb = b->last;
  }
  if (!ra || !rb) return fail(cudaErrorInvalidResourceHandle);  // never recorded
  if (!ra->done.load(std::memory_order_acquire) || !rb->done.load(std::memory_order_acquire))
    return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(rb->at - ra->at).count();
  return cudaSuccess;
}

}  // extern "C"
