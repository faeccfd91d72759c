// The CUDA stand-in runtime's internals (standin.h says what it emulates), shared by its files:
// runtime.cc (process state, devices, errors, driver entry points), counters.cc (what each
// thread asked of the device), driver_lock.cc (every exported call's entry: the driver lock),
// streams.cc (stream workers, hardware work queues, CUDA's stream ordering, events, host
// functions), stream_memops.cc (cuStreamWaitValue32, cuStreamWriteValue32), watchdog.cc (what a
// host thread blocked behind a held stream reports) and memory.cc (the allocation table, copies,
// pointer attributes, IPC). Nothing here is exported: the library's interface is the CUDA
// runtime's and standin.h's.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device/standin/standin.h"

#pragma GCC visibility push(hidden)

namespace squeeze::standin::detail {

struct Device;
struct Event;
struct Stream;
struct WorkQueue;

// What keeps a stream from finishing an item by itself: a wait on a 32-bit word that some
// other thread must store, or a host function. The watchdog names it.
struct Hold {
  const char* kind = nullptr;  // "cuStreamWaitValue32", "a host function"; null: not held
  const volatile uint32_t* word = nullptr;
  uint32_t value = 0;
  unsigned flags = 0;  // CU_STREAM_WAIT_VALUE_*
  void* fn = nullptr;  // the host function
};

// One piece of work on a stream. It starts after the items before it on its stream and after
// each dependency (another stream having completed an item): CUDA's legacy-stream ordering and
// cudaStreamWaitEvent.
struct Item {
  std::string what;                  // "kernel quantizeInt8", "cudaMemcpyAsync", ...
  std::function<void(Stream&)> run;  // empty for markers that only order
  bool runsAfterFailure = false;     // after a sticky error only bookkeeping still runs
  std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> deps;
  uint64_t seq = 0;
  uint64_t ticket = 0;  // its place on the stream's hardware work queue
};

// A hardware work queue (a "connection"): CUDA_DEVICE_MAX_CONNECTIONS of them per device, each
// stream bound to one round-robin when it is created. A queue is in order across its streams:
// an item starts only once every item enqueued before it on the queue, from any of its streams,
// has completed. Tickets are handed out at enqueue (under `mu`, inside the stream's lock, so
// one stream's tickets rise with its items); the worker whose item holds ticket `next` runs.
// Lock order: a stream's mu, then its queue's mu.
struct WorkQueue {
  int index = 0;
  int of = 8;  // the device's queues when this one was made
  std::mutex mu;
  std::condition_variable cv;    // `next` moved
  uint64_t issued = 0;           // the last ticket handed out
  uint64_t next = 1;             // the ticket that may run: every earlier one has completed
  std::shared_ptr<Stream> head;  // the stream whose item holds `next` while it runs (watchdog)
};

enum class StreamKind { kLegacy, kPerThread, kCreated };

// A stream: a FIFO of items run by one worker thread (started with the first item). `enqueued`
// and `completed` count items, so "everything enqueued before now" is a number to wait for.
struct Stream {
  Device* device = nullptr;
  StreamKind kind = StreamKind::kCreated;
  bool blocking = true;  // synchronizes with the legacy stream (not cudaStreamNonBlocking)
  unsigned flags = 0;

  std::mutex mu;
  std::condition_variable cv;  // completed moved, or work arrived
  std::deque<Item> queue;
  std::atomic<uint64_t> enqueued{0};
  std::atomic<uint64_t> completed{0};
  bool destroyed = false;  // cudaStreamDestroy: the worker ends once the queue is drained
  std::atomic<bool> capturing{false};  // between cudaStreamBeginCapture and EndCapture
  bool workerStarted = false;
  std::string state;  // what the worker does now, for the watchdog ("" when idle)
  Hold hold;
  std::shared_ptr<Stream> waitingOn;     // the stream whose item the worker's next item waits for
  std::shared_ptr<WorkQueue> workQueue;  // fixed at creation
  bool waitingForQueue = false;          // the worker's item waits for its turn on workQueue
};

// An emulated GPU: its streams (the legacy stream first), sticky error and host-function thread.
struct Device {
  int ordinal = 0;
  std::mutex mu;  // streams, peers
  std::vector<std::shared_ptr<Stream>> streams;
  std::shared_ptr<Stream> legacy;
  std::vector<bool> peerEnabled;
  std::atomic<int> sticky{cudaSuccess};
  // Lazy loading: the kernel names launched so far; all of them once loadKernels() ran.
  std::set<std::string> loadedKernels;
  std::set<std::string> loadedLibraries;  // standin::useLibrary (cuBLAS)
  bool allKernelsLoaded = false;
  // Hardware work queues (streams are bound round-robin; setWorkQueues replaces them for the
  // streams created after it).
  int maxConnections = 8;
  std::vector<std::shared_ptr<WorkQueue>> workQueues;
  size_t nextWorkQueue = 0;

  // Host functions run here, one at a time, as on a GPU's callback thread.
  std::mutex callbackMu;
  std::condition_variable callbackCv;
  std::deque<std::function<void()>> callbacks;
  bool callbackStarted = false;
};

// A tracked memory range.
enum class RegionKind { kDevice, kIpc, kPinned, kRegistered };
struct Region {
  uintptr_t base = 0;
  size_t size = 0;    // what was asked for: copies past it are errors
  size_t mapLen = 0;  // the mapping (page-rounded); 0 for registered ranges
  RegionKind kind = RegionKind::kDevice;
  int device = 0;
  int fd = -1;          // the memfd of a cudaMalloc allocation
  uint64_t serial = 0;  // unique per allocation in this process (IPC handles name it)
  uint64_t inode = 0;   // the memfd's inode (an IPC importer checks it)
  int ipcRefs = 0;      // kIpc: cudaIpcOpenMemHandle calls not yet closed
  uint64_t ipcPid = 0;  // kIpc: the exporter
};

// The driver lock: a host thread inside an implicit synchronization holds it, and every other
// host thread's CUDA call waits for it at entry (driver_lock.cc). What the holder waits for is
// kept here for the watchdog of the threads it blocks.
struct Target {
  std::shared_ptr<Stream> stream;
  uint64_t seq;
};
struct DriverLock {
  std::mutex mu;
  std::condition_variable cv;  // released
  bool held = false;
  uint64_t holder = 0;  // the holding thread's id (gettid)
  int depth = 0;        // nested holds by the holder
  std::string call;     // what the holder is in ("cudaFree")
  Device* device = nullptr;
  std::vector<Target> targets;  // what it waits for
};

// The process's emulated CUDA: created on first use, never destroyed (workers may still run at
// exit), and replaced in a fork()ed child, whose threads did not survive.
struct State {
  int deviceCount = 1;
  long hangMs = 20000;
  std::vector<std::unique_ptr<Device>> devices;

  std::mutex handlesMu;  // live cudaStream_t and cudaEvent_t handles
  std::unordered_map<const void*, std::shared_ptr<Stream>> streams;
  std::unordered_map<const void*, std::shared_ptr<Event>> events;

  DriverLock driverLock;

  std::shared_mutex memMu;
  std::map<uintptr_t, Region> regions;  // by base
  uint64_t nextSerial = 1;
};

State& state();
// The state if there is one (null before first use and in a fork()ed child until it calls
// CUDA): for thread-exit cleanup, which must not create one.
State* peekState();

// Per-thread CUDA state: the current device and the last error.
int& currentOrdinal();
// Records rc as the calling thread's last error (not cudaErrorNotReady) and returns it.
cudaError_t fail(cudaError_t rc);
// The current device, or an error (cudaErrorNoDevice, cudaErrorInvalidDevice).
cudaError_t currentDevice(Device** out);
Device* deviceAt(int ordinal);  // null when out of range
cudaError_t stickyError(const Device& d);
// Makes the device's error sticky (the first failure is printed); `what` says what failed.
void failDevice(Device& d, cudaError_t rc, const std::string& what);

// CUDA forbids a host function (and a kernel cannot) to wait for the device: from a stream's
// worker or the callback thread it would wait for itself. Blocking calls made there print why and
// return cudaErrorNotPermitted (as CUDA documents for host functions) instead of hanging.
cudaError_t refuseOnDevice(const char* call);
void markDeviceThread();

// The counters (counters.cc), for the calling thread and the process.
enum class Count {
  kLaunches,
  kCopies,
  kHostWaits,
  kImplicitSyncs,
  kAllocations,
  kApiCalls,
  kStreamOps,
  kDeviceToHostCopies,
  kPageableCopies,
  kPointerQueries,
  kStreamCreations,
  kEventCreations,
};
constexpr int kCountKinds = 12;
void count(Count c);
// Records the calling thread's name (pthread_getname_np) for countersOfThreadsNamed.
void captureThreadName();

// Every exported cuda*/cu* function (and standin::launch, loadKernels, useLibrary) opens with
// `const ApiCall api(__func__);` (driver_lock.cc): the outermost one on a thread counts one call
// and, on a host thread, waits at entry while another thread holds the driver lock.
class ApiCall {
 public:
  explicit ApiCall(const char* name);
  ~ApiCall();
  ApiCall(const ApiCall&) = delete;
  ApiCall& operator=(const ApiCall&) = delete;
};
// Holds the driver lock for the calling host thread while it waits for `targets` of `d` inside
// `call` (an implicit synchronization); waits for it first when another thread holds it.
class DriverLockHold {
 public:
  DriverLockHold(Device& d, const std::string& call, const std::vector<Target>& targets);
  ~DriverLockHold();
  DriverLockHold(const DriverLockHold&) = delete;
  DriverLockHold& operator=(const DriverLockHold&) = delete;

 private:
  DriverLock& lock_;
};
bool isDeviceThread();

// Streams (streams.cc).
std::shared_ptr<Stream> newStream(Device& d, StreamKind kind, bool blocking, unsigned flags);
// 0, cudaStreamLegacy, cudaStreamPerThread or a created stream; null with *rc set when invalid
// (findStream), or when it is capturing a graph (resolveStream: work cannot go onto it here).
std::shared_ptr<Stream> findStream(cudaStream_t handle, cudaError_t* rc);
std::shared_ptr<Stream> resolveStream(cudaStream_t handle, cudaError_t* rc);
// CUDA_DEVICE_MAX_CONNECTIONS fresh queues (newState, setWorkQueues).
std::vector<std::shared_ptr<WorkQueue>> newWorkQueues(int count);
// Enqueues with CUDA's blocking-stream ordering and a ticket on the stream's work queue; returns
// the item's sequence number.
uint64_t enqueue(const std::shared_ptr<Stream>& s, Item item);
// A host thread waits for every item enqueued so far on every stream of `d` (an implicit
// synchronization named `call`), with the deadlock watchdog. Counts it; returns the sticky error.
cudaError_t syncDevice(Device& d, const char* call);
// A host thread waits for `s` to complete `seq` inside `call` (a copy with pageable memory),
// with the watchdog, since the stream may be held by the thread that waits. A synchronous call
// (`implicitSync`: cudaMemcpy, cudaMemset) holds the driver lock while it waits.
cudaError_t waitWatched(const std::shared_ptr<Stream>& s, uint64_t seq, const char* call,
                        bool implicitSync);
std::string describe(const Stream& s);
std::string pointerText(const volatile void* p);
// Its queue's index, for messages ("hardware work queue 3 of 8").
std::string queueText(const Stream& s);

// The watchdog (watchdog.cc). heldTargets: what keeps the unfinished targets from finishing
// that no host thread's CUDA call will release: a stream held by a stream wait or host function,
// a stream waiting for another that is (legacy ordering, an event), or a stream waiting for its
// work queue behind a held stream. `ownHolds`: also a target held itself (false for
// cudaStreamSynchronize, whose stream is commonly held until another thread stores the word).
std::vector<std::string> heldTargets(const std::vector<Target>& targets, bool ownHolds);
// A host thread waits for every target inside `call`: reported after a second while held, and
// fatal after SQZ_STANDIN_HANG_MS.
void watchedWait(Device& d, const std::vector<Target>& targets, const std::string& call,
                 const char* scope, bool ownHolds);
// Prints every stream of `d` and aborts: `call` has waited `ms` for `scope`.
[[noreturn]] void reportHang(Device& d, const std::string& call, const std::string& scope, long ms);
long warnAfterMs();

// Memory (memory.cc).
bool findRegion(const void* p, Region* out);

// The driver entry points cudaGetDriverEntryPointByVersion hands out, with cuda.h's signatures.
void* streamWaitValue32Entry();   // stream_memops.cc
void* streamWriteValue32Entry();  // stream_memops.cc
void* memGetAddressRangeEntry();  // memory.cc

// Hold state of a stream's worker (streams.cc), for items that wait on something outside.
void setHold(Stream& s, const Hold& h);
// Error names without an API call (errors.cc), for messages from the device's threads.
const char* errorName(cudaError_t rc);

}  // namespace squeeze::standin::detail

#pragma GCC visibility pop
