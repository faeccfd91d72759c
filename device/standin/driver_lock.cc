// The CUDA stand-in's driver lock (standin.h): every exported CUDA call enters through ApiCall,
// which counts it for the calling thread and, on a host thread, waits while another host thread
// is inside an implicit synchronization (cudaFree, cudaMalloc, cudaHostAlloc, cudaHostRegister,
// a synchronous copy, cudaDeviceSynchronize, a lazy module or library load). The CUDA driver
// serializes those under one lock, so on a GPU a progress thread's harmless cudaStreamQuery
// waits behind another thread's cudaFree, which waits for a stream that only the progress
// thread can release: the stand-in makes that wait happen, and its watchdog name it. The
// stream workers and the callback thread are the GPU, and never wait here.
#include <cstdio>

#include "device/standin/internal.h"

namespace squeeze::standin::detail {

using Clock = std::chrono::steady_clock;

namespace {

std::atomic<uint64_t> gNextThreadId{0};
thread_local uint64_t tlsThreadId = 0;
thread_local int tlsApiDepth = 0;  // nested exported calls (cudaStreamCreate calls ...WithFlags)

uint64_t threadId() {
  if (!tlsThreadId) tlsThreadId = ++gNextThreadId;
  return tlsThreadId;
}

// Returns (with lk, on L.mu, held) once no other thread holds the driver lock. Behind a holder
// that waits for a held stream this is the deadlock the watchdog reports: said after a second,
// fatal after SQZ_STANDIN_HANG_MS, naming the holder's call and what it waits for.
void waitForLock(DriverLock& L, std::unique_lock<std::mutex>& lk, const std::string& call) {
  const uint64_t me = threadId();
  const auto free = [&] { return !L.held || L.holder == me; };
  if (free()) return;
  const auto start = Clock::now();
  const long hangMs = state().hangMs, warnMs = warnAfterMs();
  bool warned = false;
  while (!free()) {
    const long waited = static_cast<long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
    if (waited >= warnMs) {
      const std::string holderCall = L.call;
      Device* d = L.device;
      const std::vector<Target> targets = L.targets;
      lk.unlock();
      const auto held = heldTargets(targets, true);
      if (!held.empty() && !warned) {
        warned = true;
        std::string text;
        for (const auto& h : held)
          text += "sqz-cuda-standin: " + call + " waits for the driver lock, which " + holderCall +
                  " holds on another thread while it waits for the device, and " + h +
                  ": NCCL's rule forbids this; it deadlocks when the holder waits for this "
                  "thread\n";
        std::fputs(text.c_str(), stderr);
      }
      if (!held.empty() && hangMs > 0 && waited >= hangMs)
        reportHang(*d, call + " (at entry, behind " + holderCall + ")", "the driver lock", waited);
      lk.lock();
    }
    L.cv.wait_for(lk, std::chrono::milliseconds(10), free);
  }
}

}  // namespace

ApiCall::ApiCall(const char* name) {
  if (tlsApiDepth++ > 0) return;  // the outermost call counts, and waited at its entry
  captureThreadName();
  count(Count::kApiCalls);
  if (isDeviceThread()) return;
  State* st = peekState();
  if (!st) return;  // nothing initialized yet: nobody holds the lock
  std::unique_lock<std::mutex> lk(st->driverLock.mu);
  waitForLock(st->driverLock, lk, name);
}

ApiCall::~ApiCall() { --tlsApiDepth; }

DriverLockHold::DriverLockHold(Device& d, const std::string& call,
                               const std::vector<Target>& targets)
    : lock_(state().driverLock) {
  std::unique_lock<std::mutex> lk(lock_.mu);
  waitForLock(lock_, lk, call);
  if (lock_.held) {  // this thread's already (a nested synchronization)
    ++lock_.depth;
    return;
  }
  lock_.held = true;
  lock_.holder = threadId();
  lock_.depth = 1;
  lock_.call = call;
  lock_.device = &d;
  lock_.targets = targets;
}

DriverLockHold::~DriverLockHold() {
  {
    std::lock_guard<std::mutex> lk(lock_.mu);
    if (--lock_.depth > 0) return;
    lock_.held = false;
    lock_.holder = 0;
    lock_.call.clear();
    lock_.device = nullptr;
    lock_.targets.clear();
  }
  lock_.cv.notify_all();
}

}  // namespace squeeze::standin::detail
