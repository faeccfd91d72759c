// The CUDA stand-in's counters (standin.h): what the emulated device was asked to do, for the
// process and per thread. Each thread that calls CUDA gets a record, kept after it exits, with
// the thread's name as of its latest call, so a test can ask what every thread of a kind (the
// library's "sqz-progress" threads) asked of the device: a progress thread may make no CUDA
// call while a caller's stream holds its work (DESIGN.md, "Memory, streams, threads").
#include <pthread.h>
#include <sys/prctl.h>

#include <cstdio>
#include <cstring>

#include "device/standin/internal.h"

namespace squeeze::standin {

namespace detail {

namespace {

struct ThreadRecord {
  std::atomic<uint64_t> counts[kCountKinds] = {};
  std::mutex nameMu;   // name
  char name[16] = {};  // the thread's name at its latest call (pthread_getname_np)
};

// Every thread's record, alive or exited (never freed: threads are few).
struct Registry {
  std::mutex mu;  // records
  std::vector<std::unique_ptr<ThreadRecord>> records;
};

Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

// A fork()ed child keeps the records (its counts are since the process started, as the
// parent's) and must find the registry's lock free.
const int kAtFork = pthread_atfork([] { registry().mu.lock(); }, [] { registry().mu.unlock(); },
                                   [] { registry().mu.unlock(); });

std::atomic<uint64_t> gCounts[kCountKinds];
thread_local ThreadRecord* tlsRecord = nullptr;

void readName(ThreadRecord& r) {
  char name[16] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);  // the calling thread's, as pthread_getname_np reads it
  std::lock_guard<std::mutex> lock(r.nameMu);
  std::memcpy(r.name, name, sizeof(name));
}

ThreadRecord& record() {
  if (tlsRecord) return *tlsRecord;
  (void)kAtFork;
  auto r = std::make_unique<ThreadRecord>();
  readName(*r);
  tlsRecord = r.get();
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().records.push_back(std::move(r));
  return *tlsRecord;
}

Counters toCounters(const uint64_t (&c)[kCountKinds]) {
  Counters r;
  r.launches = c[0];
  r.copies = c[1];
  r.hostWaits = c[2];
  r.implicitSyncs = c[3];
  r.allocations = c[4];
  r.apiCalls = c[5];
  r.streamOps = c[6];
  r.deviceToHost = c[7];
  r.pageable = c[8];
  r.pointerQueries = c[9];
  r.streamCreations = c[10];
  r.eventCreations = c[11];
  return r;
}

Counters load(const std::atomic<uint64_t> (&c)[kCountKinds]) {
  uint64_t v[kCountKinds];
  for (int i = 0; i < kCountKinds; ++i) v[i] = c[i].load(std::memory_order_relaxed);
  return toCounters(v);
}

}  // namespace

void count(Count c) {
  const auto i = static_cast<int>(c);
  gCounts[i].fetch_add(1, std::memory_order_relaxed);
  record().counts[i].fetch_add(1, std::memory_order_relaxed);
}

void captureThreadName() { readName(record()); }

}  // namespace detail

using namespace detail;

Counters operator-(const Counters& a, const Counters& b) {
  Counters r;
  r.launches = a.launches - b.launches;
  r.copies = a.copies - b.copies;
  r.hostWaits = a.hostWaits - b.hostWaits;
  r.implicitSyncs = a.implicitSyncs - b.implicitSyncs;
  r.allocations = a.allocations - b.allocations;
  r.apiCalls = a.apiCalls - b.apiCalls;
  r.streamOps = a.streamOps - b.streamOps;
  r.deviceToHost = a.deviceToHost - b.deviceToHost;
  r.pageable = a.pageable - b.pageable;
  r.pointerQueries = a.pointerQueries - b.pointerQueries;
  r.streamCreations = a.streamCreations - b.streamCreations;
  r.eventCreations = a.eventCreations - b.eventCreations;
  return r;
}

Counters processCounters() { return load(gCounts); }

std::string perCall(const Counters& c, uint64_t calls) {
  const double n = calls ? static_cast<double>(calls) : 1.0;
  auto f = [&](uint64_t v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", static_cast<double>(v) / n);
    return std::string(text);
  };
  return f(c.launches) + " launches, " + f(c.hostWaits) + " host waits, " + f(c.copies) +
         " copies (" + f(c.deviceToHost) + " to the host, " + f(c.pageable) + " pageable), " +
         f(c.streamOps) + " stream ops, " + f(c.allocations) + " allocations, " +
         f(c.streamCreations) + " streams and " + f(c.eventCreations) + " events made, " +
         f(c.pointerQueries) + " pointer queries";
}

Counters threadCounters() { return load(record().counts); }

Counters countersOfThreadsNamed(const char* prefix) {
  const size_t n = prefix ? std::strlen(prefix) : 0;
  uint64_t sum[kCountKinds] = {};
  std::lock_guard<std::mutex> lock(registry().mu);
  for (const auto& r : registry().records) {
    {
      std::lock_guard<std::mutex> name(r->nameMu);
      if (std::strncmp(r->name, prefix ? prefix : "", n) != 0) continue;
    }
    for (int i = 0; i < kCountKinds; ++i) sum[i] += r->counts[i].load(std::memory_order_relaxed);
  }
  return toCounters(sum);
}

}  // namespace squeeze::standin
