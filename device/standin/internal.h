// The CUDA stand-in runtime's internals (standin.h says what it emulates), shared by its files:
// runtime.cc (process state, devices, errors, counters, driver entry points), streams.cc
// (stream workers, CUDA's stream ordering, events, host functions, waits and the watchdog) and
// memory.cc (the allocation table, copies, pointer attributes, IPC). Nothing here is exported:
// the library's interface is the CUDA runtime's and standin.h's.
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
  bool workerStarted = false;
  std::string state;  // what the worker does now, for the watchdog ("" when idle)
  Hold hold;
  Stream* waitingOn = nullptr;  // the stream whose item the worker's next item waits for
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
  bool allKernelsLoaded = false;

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

// The process's emulated CUDA: created on first use, never destroyed (workers may still run at
// exit), and replaced in a fork()ed child, whose threads did not survive.
struct State {
  int deviceCount = 1;
  long hangMs = 20000;
  std::vector<std::unique_ptr<Device>> devices;

  std::mutex handlesMu;  // live cudaStream_t and cudaEvent_t handles
  std::unordered_map<const void*, std::shared_ptr<Stream>> streams;
  std::unordered_map<const void*, std::shared_ptr<Event>> events;

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

enum class Count { kLaunches, kCopies, kHostWaits, kImplicitSyncs, kAllocations };
void count(Count c);

// Streams (streams.cc).
std::shared_ptr<Stream> newStream(Device& d, StreamKind kind, bool blocking, unsigned flags);
// 0, cudaStreamLegacy, cudaStreamPerThread or a created stream; null with *rc set when invalid.
std::shared_ptr<Stream> resolveStream(cudaStream_t handle, cudaError_t* rc);
// Enqueues with CUDA's blocking-stream ordering; returns the item's sequence number.
uint64_t enqueue(const std::shared_ptr<Stream>& s, Item item);
// A host thread waits for `s` to complete item `seq` (counted as a host wait by the caller).
void waitFor(Stream& s, uint64_t seq);
// A host thread waits for every item enqueued so far on every stream of `d` (an implicit
// synchronization named `call`), with the deadlock watchdog. Counts it; returns the sticky error.
cudaError_t syncDevice(Device& d, const char* call);
// A host thread waits for `s` to complete `seq` inside `call` (a copy with pageable memory),
// with the watchdog, since the stream may be held by the thread that waits.
cudaError_t waitWatched(const std::shared_ptr<Stream>& s, uint64_t seq, const char* call);
std::string describe(const Stream& s);

// Memory (memory.cc).
bool findRegion(const void* p, Region* out);

// The driver entry points cudaGetDriverEntryPointByVersion hands out, with cuda.h's signatures.
void* streamWaitValue32Entry();   // streams.cc
void* memGetAddressRangeEntry();  // memory.cc

}  // namespace squeeze::standin::detail

#pragma GCC visibility pop
