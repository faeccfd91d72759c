// The CUDA stand-in's deadlock watchdog (standin.h): a host thread that waits for streams (an
// implicit synchronization, a synchronous copy, cudaStreamSynchronize) or for the driver lock
// asks here what keeps them from finishing. A stream held by a stream wait or a host function,
// directly or through what it is ordered behind (the legacy stream, an event, a stream ahead of
// it on its hardware work queue), is what NCCL's rule forbids: said after a second, fatal with
// a listing of the device's streams after SQZ_STANDIN_HANG_MS, so a hang is a failure with a
// reason.
#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "device/standin/internal.h"

namespace squeeze::standin::detail {

using Clock = std::chrono::steady_clock;

namespace {

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

// Why `s` cannot finish its current item by itself: "is held by ...", "waits for <stream>,
// which ...", "waits for its hardware work queue ... behind <stream>, which ..."; empty when
// nothing held is in the way. Each stream's lock is taken alone (a snapshot), so the chain
// needs no lock order; `depth` bounds it.
std::string why(Stream& s, int depth, bool ownHold) {
  if (depth > 4) return {};
  Hold hold;
  std::shared_ptr<Stream> behind;
  std::shared_ptr<WorkQueue> queue;
  bool forQueue = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.completed.load() >= s.enqueued.load()) return {};
    hold = s.hold;
    behind = s.waitingOn;
    forQueue = s.waitingForQueue;
    queue = s.workQueue;
  }
  if (hold.kind) return ownHold ? "is held by " + holdText(hold) : std::string();
  if (behind) {
    const std::string r = why(*behind, depth + 1, true);
    return r.empty() ? r : "waits for " + describe(*behind) + ", which " + r;
  }
  if (forQueue && queue) {
    std::shared_ptr<Stream> head;
    {
      std::lock_guard<std::mutex> lock(queue->mu);
      head = queue->head;
    }
    if (!head || head.get() == &s) return {};
    const std::string r = why(*head, depth + 1, true);
    return r.empty() ? r
                     : "waits for its " + queueText(s) + " behind " + describe(*head) +
                           " (they share it), which " + r;
  }
  return {};
}

long sinceMs(Clock::time_point start) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
}

}  // namespace

std::vector<std::string> heldTargets(const std::vector<Target>& targets, bool ownHolds) {
  std::vector<std::string> held;
  for (const auto& t : targets) {
    if (t.stream->completed.load() >= t.seq) continue;
    const std::string r = why(*t.stream, 0, ownHolds);
    if (!r.empty()) held.push_back(describe(*t.stream) + " " + r);
  }
  return held;
}

long warnAfterMs() {
  const long hangMs = state().hangMs;
  return hangMs > 0 ? std::min(1000L, hangMs / 2) : 1000L;
}

void reportHang(Device& d, const std::string& call, const std::string& scope, long ms) {
  std::string text =
      "sqz-cuda-standin: " + call + " has waited " + std::to_string(ms) + " ms for " + scope +
      " behind a held stream (SQZ_STANDIN_HANG_MS=" + std::to_string(state().hangMs) + "): a " +
      "deadlock. The streams of device " + std::to_string(d.ordinal) + ":\n";
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    streams = d.streams;
  }
  for (const auto& s : streams) {
    const std::string r = why(*s, 0, true);
    std::lock_guard<std::mutex> l(s->mu);
    const uint64_t e = s->enqueued.load(), c = s->completed.load();
    text += "  " + describe(*s) + " (" + queueText(*s) + "): ";
    text += !r.empty() ? r : s->state.empty() ? std::string("idle") : "running " + s->state;
    text += "; " + std::to_string(e - c) + " item(s) not done (" + std::to_string(c) + " of " +
            std::to_string(e) + " completed)\n";
  }
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  std::abort();
}

void watchedWait(Device& d, const std::vector<Target>& targets, const std::string& call,
                 const char* scope, bool ownHolds) {
  const auto start = Clock::now();
  const long hangMs = state().hangMs, warnMs = warnAfterMs();
  bool warned = false;
  for (const auto& t : targets) {
    Stream& s = *t.stream;
    while (s.completed.load() < t.seq) {
      const long waited = sinceMs(start);
      if (waited >= warnMs) {
        const auto held = heldTargets(targets, ownHolds);
        if (!held.empty() && !warned) {
          warned = true;
          std::string text;
          for (const auto& h : held)
            text += "sqz-cuda-standin: " + call + " waits for " + scope + " while " + h +
                    ": NCCL's rule forbids this; it deadlocks when the holder waits for this "
                    "thread\n";
          std::fputs(text.c_str(), stderr);
        }
        if (!held.empty() && hangMs > 0 && waited >= hangMs) reportHang(d, call, scope, waited);
      }
      std::unique_lock<std::mutex> lock(s.mu);
      s.cv.wait_for(lock, std::chrono::milliseconds(10),
                    [&] { return s.completed.load() >= t.seq; });
    }
  }
}

}  // namespace squeeze::standin::detail
