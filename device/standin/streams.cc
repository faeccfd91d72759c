// The CUDA stand-in's streams (standin.h): one worker thread per stream runs its items in
// order, after CUDA's ordering between blocking streams and the legacy default stream and after
// every earlier item of the stream's hardware work queue (shared round-robin by
// CUDA_DEVICE_MAX_CONNECTIONS queues per device); events are markers on a stream; host functions
// run on the device's one callback thread. Host threads that wait for the whole device
// (implicit synchronization) hold the driver lock and go through the watchdog (watchdog.cc).
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

// The queue's order: the worker's item starts once every item ahead of it on its hardware work
// queue, from any stream, has completed (held there, the stream stalls, as behind a held
// stream sharing its connection on a GPU). The item then holds the queue until it completes.
void takeTurn(const std::shared_ptr<Stream>& s, const Item& item) {
  WorkQueue& q = *s->workQueue;
  std::unique_lock<std::mutex> lock(q.mu);
  if (q.next != item.ticket) {
    lock.unlock();
    setState(*s, "waiting for its " + queueText(*s) + " before " + item.what);
    {
      std::lock_guard<std::mutex> own(s->mu);
      s->waitingForQueue = true;
    }
    lock.lock();
    q.cv.wait(lock, [&] { return q.next == item.ticket; });
    lock.unlock();
    {
      std::lock_guard<std::mutex> own(s->mu);
      s->waitingForQueue = false;
    }
    lock.lock();
  }
  q.head = s;
}

void passTurn(WorkQueue& q) {
  {
    std::lock_guard<std::mutex> lock(q.mu);
    ++q.next;
    q.head.reset();
  }
  q.cv.notify_all();
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
    takeTurn(s, item);
    for (const auto& dep : item.deps) {
      Stream& t = *dep.first;
      const uint64_t seq = dep.second;
      if (t.completed.load() >= seq) continue;
      setState(*s, "waiting for " + describe(t) + " before " + item.what);
      {
        std::lock_guard<std::mutex> own(s->mu);
        s->waitingOn = dep.first;
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
    passTurn(*s->workQueue);
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

std::shared_ptr<Event> findEvent(cudaEvent_t e) {
  if (!e) return nullptr;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.handlesMu);
  auto it = st.events.find(e);
  return it == st.events.end() ? nullptr : it->second;
}

}  // namespace

std::shared_ptr<Stream> newStream(Device& d, StreamKind kind, bool blocking, unsigned flags) {
  auto s = std::make_shared<Stream>();
  s->device = &d;
  s->kind = kind;
  s->blocking = blocking;
  s->flags = flags;
  std::lock_guard<std::mutex> lock(d.mu);
  // Round-robin over the device's hardware work queues, as CUDA binds streams to connections.
  s->workQueue = d.workQueues[d.nextWorkQueue++ % d.workQueues.size()];
  d.streams.push_back(s);
  return s;
}

std::vector<std::shared_ptr<WorkQueue>> newWorkQueues(int count) {
  std::vector<std::shared_ptr<WorkQueue>> queues;
  for (int i = 0; i < count; ++i) {
    queues.push_back(std::make_shared<WorkQueue>());
    queues.back()->index = i;
    queues.back()->of = count;
  }
  return queues;
}

void setHold(Stream& s, const Hold& h) {
  std::lock_guard<std::mutex> lock(s.mu);
  s.hold = h;
}

std::shared_ptr<Stream> findStream(cudaStream_t handle, cudaError_t* rc) {
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

std::shared_ptr<Stream> resolveStream(cudaStream_t handle, cudaError_t* rc) {
  auto s = findStream(handle, rc);
  if (s && s->capturing.load()) {
    *rc = cudaErrorStreamCaptureUnsupported;  // the stand-in records no graphs (below)
    return nullptr;
  }
  return s;
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
    {
      std::lock_guard<std::mutex> q(s->workQueue->mu);
      item.ticket = ++s->workQueue->issued;
    }
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
  // Every other host thread's CUDA call now waits at entry until this one returns.
  const DriverLockHold hold(d, call, targets);
  watchedWait(d, targets, call, "the whole device", true);
  return stickyError(d);
}

cudaError_t waitWatched(const std::shared_ptr<Stream>& s, uint64_t seq, const char* call,
                        bool implicitSync) {
  if (cudaError_t rc = refuseOnDevice(call)) return rc;
  count(Count::kHostWaits);
  const std::vector<Target> targets = {{s, seq}};
  std::unique_ptr<DriverLockHold> hold;
  if (implicitSync) hold = std::make_unique<DriverLockHold>(*s->device, call, targets);
  watchedWait(*s->device, targets, call, "its stream", true);
  return stickyError(*s->device);
}

std::string pointerText(const volatile void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
  return buf;
}

std::string queueText(const Stream& s) {
  return "hardware work queue " + std::to_string(s.workQueue->index) + " of " +
         std::to_string(s.workQueue->of) + " (CUDA_DEVICE_MAX_CONNECTIONS)";
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
  const ApiCall api(__func__);
  Device* d = deviceAt(currentOrdinal());
  if (!d) return;
  std::lock_guard<std::mutex> lock(d->mu);
  d->allKernelsLoaded = true;
}

cudaError_t useLibrary(const char* library) {
  const ApiCall api(__func__);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  const std::string name = library ? library : "?";
  {
    std::lock_guard<std::mutex> lock(d->mu);
    if (d->allKernelsLoaded || !d->loadedLibraries.insert(name).second) return cudaSuccess;
  }
  const std::string call = "loading " + name + " (its first use on the device)";
  return fail(syncDevice(*d, call.c_str()));
}

cudaError_t setWorkQueues(int count) {
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  if (count < 1 || count > 32) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(d->mu);
  d->maxConnections = count;
  d->workQueues = newWorkQueues(count);
  d->nextWorkQueue = 0;
  return cudaSuccess;
}

cudaError_t launch(cudaStream_t stream, const char* kernel, std::function<void()> body) {
  const ApiCall api(__func__);
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
  const ApiCall api(__func__);
  if (!pStream || (flags & ~cudaStreamNonBlocking)) return fail(cudaErrorInvalidValue);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  count(Count::kStreamCreations);
  auto s = newStream(*d, StreamKind::kCreated, !(flags & cudaStreamNonBlocking), flags);
  State& st = state();
  std::lock_guard<std::mutex> lock(st.handlesMu);
  st.streams[s.get()] = s;
  *pStream = reinterpret_cast<cudaStream_t>(s.get());
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  const ApiCall api(__func__);
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int) {
  const ApiCall api(__func__);
  return cudaStreamCreateWithFlags(pStream, flags);  // priorities change nothing here
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  const ApiCall api(__func__);
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
  const ApiCall api(__func__);
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  if ((rc = refuseOnDevice("cudaStreamSynchronize"))) return fail(rc);
  count(Count::kHostWaits);
  // Watched for a stream stalled behind another held one (its queue, the legacy stream, an
  // event); its own hold is the usual wait for another thread's store.
  watchedWait(*s->device, {{s, s->enqueued.load()}}, "cudaStreamSynchronize", "its stream", false);
  return fail(stickyError(*s->device));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  const ApiCall api(__func__);
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  if ((rc = stickyError(*s->device))) return fail(rc);
  return s->completed.load() >= s->enqueued.load() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  const ApiCall api(__func__);
  if (!device) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = findStream(stream, &rc);
  if (!s) return fail(rc);
  *device = s->device->ordinal;
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  const ApiCall api(__func__);
  if (!flags) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = findStream(stream, &rc);
  if (!s) return fail(rc);
  *flags = s->flags;
  return cudaSuccess;
}

// ---- stream capture (CUDA graphs) --------------------------------------------------------------
// The stand-in records no graphs: a capture marks the stream, work enqueued on it meanwhile is
// refused (cudaErrorStreamCaptureUnsupported, where CUDA would record it), and the graph that
// ends it is empty. Enough for what a library must do with a capturing stream: ask, and refuse.
struct CUgraph_st {};  // the graph handle's type, incomplete in CUDA's headers

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  const ApiCall api(__func__);
  (void)mode;
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  if (s->kind != StreamKind::kCreated) return fail(cudaErrorStreamCaptureUnsupported);
  s->capturing.store(true);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  const ApiCall api(__func__);
  if (!status) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = findStream(stream, &rc);
  if (!s) return fail(rc);
  *status = s->capturing.load() ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  const ApiCall api(__func__);
  if (!graph) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = findStream(stream, &rc);
  if (!s) return fail(rc);
  if (!s->capturing.exchange(false)) return fail(cudaErrorIllegalState);
  *graph = new CUgraph_st;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  const ApiCall api(__func__);
  if (!graph) return fail(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  const ApiCall api(__func__);
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
  const ApiCall api(__func__);
  if (!fn) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = resolveStream(stream, &rc);
  if (!s) return fail(rc);
  if ((rc = stickyError(*s->device))) return fail(rc);
  count(Count::kStreamOps);
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
  const ApiCall api(__func__);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  return fail(syncDevice(*d, "cudaDeviceSynchronize"));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  const ApiCall api(__func__);
  constexpr unsigned kKnown =
      cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~kKnown)) return fail(cudaErrorInvalidValue);
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return fail(cudaErrorInvalidValue);  // as CUDA: interprocess events cannot time
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  count(Count::kEventCreations);
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
  const ApiCall api(__func__);
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  const ApiCall api(__func__);
  State& st = state();
  std::lock_guard<std::mutex> lock(st.handlesMu);
  if (!event || !st.events.erase(event)) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;  // a record still queued keeps what it needs
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  const ApiCall api(__func__);
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
  const ApiCall api(__func__);
  auto ev = findEvent(event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  if (cudaError_t rc = stickyError(*ev->device)) return fail(rc);
  std::lock_guard<std::mutex> lock(ev->mu);
  if (!ev->last || ev->last->done.load(std::memory_order_acquire)) return cudaSuccess;
  return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  const ApiCall api(__func__);
  auto ev = findEvent(event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<RecordPoint> rp;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    rp = ev->last;
  }
  if (cudaError_t rc = refuseOnDevice("cudaEventSynchronize")) return fail(rc);
  count(Count::kHostWaits);
  if (rp)
    watchedWait(*rp->stream->device, {{rp->stream, rp->seq}}, "cudaEventSynchronize", "its event",
                false);
  return fail(stickyError(*ev->device));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const ApiCall api(__func__);
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
