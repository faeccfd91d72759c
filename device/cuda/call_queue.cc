// CallQueue (see device/call_queue.h) over the CUDA runtime: compiled for the CUDA build and
// the CUDA stand-in (device/no_cuda.cc says why a build without CUDA has none). The stream
// program is written here, on the caller's thread; the progress thread's loop below touches
// only host memory: staging, the words, its own buffers.
#include "device/call_queue.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>

#include "base/logging.h"
#include "device/cuda/runtime.h"

namespace squeeze::device {

namespace {

using Clock = std::chrono::steady_clock;
using cuda::reached;

// Words live in pinned pages that are never freed: a stream may still wait on or write its
// word when the communicator goes away, and freeing the page under it is undefined. One 64-byte
// slot per word (the stream's and the host's words never share a cache line).
cuda::StreamWord newWord() {
  static std::mutex mu;
  static char* page = nullptr;
  static size_t used = 0;
  constexpr size_t kPage = 4096, kSlot = 64;
  std::lock_guard<std::mutex> lock(mu);
  if (!page || used == kPage) {
    void* p = nullptr;
    cuda::check(cudaHostAlloc(&p, kPage, cudaHostAllocPortable | cudaHostAllocMapped),
                "cudaHostAlloc of stream words");
    page = static_cast<char*>(p);
    used = 0;
  }
  auto* word = reinterpret_cast<volatile uint32_t*>(page + used);
  used += kSlot;
  *word = 0;
  return {word, cuda::devicePointer(word)};
}

// The queue whose progress thread this is (null on every other thread).
thread_local const CallQueue* tlsProgressOf = nullptr;

// Hardware work queues: a process has CUDA_DEVICE_MAX_CONNECTIONS of them per GPU (8 unless
// set), and streams beyond that share them, each queue in order. Ranks of one communicator in
// this process (threads) each keep their stream held while their call's host side runs, and
// that host side needs the other ranks' copies: with fewer queues than such ranks, two of their
// streams would share one and the second's copies would wait behind the first's hold for ever.
// (Communicators of one rank, as a split makes, do not wait for each other within a call.)
int workQueues() {
  const char* v = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (!v || !*v) return 8;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return (*end == '\0' && n >= 1 && n <= 32) ? static_cast<int>(n) : 8;
}

std::mutex ranksMu;
std::map<std::pair<int, uint64_t>, int> ranksOnDevice;  // live call queues, by GPU and group

struct RankSlot {
  std::pair<int, uint64_t> key;
  RankSlot(int device, uint64_t group, int rank) : key(device, group) {
    std::lock_guard<std::mutex> lock(ranksMu);
    const int held = ++ranksOnDevice[key];
    const int queues = workQueues();
    if (held > queues) {
      if (--ranksOnDevice[key] == 0) ranksOnDevice.erase(key);
      const char* set = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
      raise(ErrorCode::kInvalidUsage, "rank ", rank, ": this process would hold ", held,
            " ranks of one communicator on GPU ", device, ", but it has ", queues,
            " hardware work queues there (CUDA_DEVICE_MAX_CONNECTIONS", set ? "=" : " ",
            set ? set : "unset: 8", "): their streams would share a queue, and one rank's held "
            "stream would stall another's copies for ever. Set CUDA_DEVICE_MAX_CONNECTIONS to at "
            "least ", held, " (at most 32) before the process's first CUDA call, or run one rank "
            "per process.");
    }
  }
  ~RankSlot() {
    std::lock_guard<std::mutex> lock(ranksMu);
    if (--ranksOnDevice[key] == 0) ranksOnDevice.erase(key);
  }
};

// The fallback where the driver has no stream memory operations: a host function on the stream
// that stores the word, or waits until it is >= value.
struct HostWordOp {
  volatile uint32_t* word;
  uint32_t value;
  bool wait;
};
void CUDART_CB wordOpOnHost(void* data) {
  std::unique_ptr<HostWordOp> op(static_cast<HostWordOp*>(data));
  if (!op->wait) {
    __atomic_store_n(op->word, op->value, __ATOMIC_RELEASE);
    return;
  }
  while (!reached(op->word, op->value)) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void nameThisThread() {
  // The stand-in counts CUDA calls by thread name; a test asserts this one makes none.
  pthread_setname_np(pthread_self(), "sqz-progress");
}

}  // namespace

void* HostCopies::at(const void* p) const {
  if (!p) return nullptr;
  const char* c = static_cast<const char*>(p);
  // Inside a region first: buffers may be adjacent, and one's end is then the next one's start.
  for (const Region& r : regions_)
    if (c >= r.device && c < r.device + r.bytes) return r.host + (c - r.device);
  for (const Region& r : regions_)
    if (c == r.device + r.bytes) return r.host + r.bytes;
  return nullptr;
}

struct CallQueue::Cuda {
  RankSlot slot;
  cuda::PinnedBuffer staging;
  cuda::StreamWord streamDone = newWord();
  cuda::StreamWord hostDone = newWord();
  Cuda(int device, uint64_t group, int rank, size_t stagingBytes)
      : slot(device, group, rank), staging(stagingBytes) {}
};

CallQueue::CallQueue(int device, uint64_t group, int rank, size_t stagingBytes, int timeoutMs,
                     std::function<void(const Error&)> fail)
    : device_(device),
      rank_(rank),
      timeoutMs_(timeoutMs),
      stagingBytes_(std::max<size_t>(stagingBytes & ~size_t(127), 256)),
      fail_(std::move(fail)) {
  {
    cuda::DeviceGuard guard(device_);
    cuda_ = std::make_unique<Cuda>(device_, group, rank_, stagingBytes_);
  }
  thread_ = std::thread([this] { loop(); });
}

CallQueue::~CallQueue() {
  drain();  // calls already enqueued complete (or fail within the timeout), as the user expects
  stopThread();
  // The streams may still be copying results out of staging: it goes back to the pool (where
  // another communicator may take it) only once they are done. No CUDA call: the words say. A
  // stream still busy with the caller's own work after a short while keeps it for good.
  const int waitMs = std::min(timeoutMs_, 2000);
  const auto deadline = Clock::now() + std::chrono::milliseconds(waitMs);
  while (!reached(cuda_->streamDone.host, issued_) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  if (!reached(cuda_->streamDone.host, issued_)) {
    SQZ_INFO(kDevice, "rank ", rank_, ": a stream has not finished its last call's copies ",
             waitMs, " ms after the communicator's end; its ", stagingBytes_,
             " bytes of pinned staging are left to it (not reused)");
    new cuda::PinnedBuffer(std::move(cuda_->staging));  // leaked on purpose
  }
}

void CallQueue::stopThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // enqueue refuses from now on: issued_ stays
    tasks_.clear();
  }
  halt_ = true;
  cv_.notify_all();
  if (thread_.joinable() && !onProgressThread()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  storeHostDone(issued_);
}

bool CallQueue::onProgressThread() const { return tlsProgressOf == this; }

char* CallQueue::half(uint32_t seq) const {
  return static_cast<char*>(cuda_->staging.data()) + (seq % 2) * (stagingBytes_ / 2);
}

void CallQueue::enqueue(GpuStream stream, const std::vector<DeviceSpan>& spans,
                        std::function<void(const HostCopies&)> task, std::string what) {
  // The regions: the spans' union, overlapping spans merged (an in-place call is one region).
  std::vector<const DeviceSpan*> sorted;
  for (const DeviceSpan& s : spans)
    if (s.data && s.bytes && (s.read || s.write)) sorted.push_back(&s);
  std::sort(sorted.begin(), sorted.end(),
            [](const DeviceSpan* a, const DeviceSpan* b) { return a->data < b->data; });
  Task t;
  t.what = std::move(what);
  t.run = std::move(task);
  for (const DeviceSpan* s : sorted) {
    const char* b = static_cast<const char*>(s->data);
    if (!t.regions.empty() && b < t.regions.back().device + t.regions.back().bytes) {
      auto& r = t.regions.back();
      r.bytes = std::max<size_t>(r.bytes, b + s->bytes - r.device);
    } else {
      t.regions.push_back({b, s->bytes, nullptr});
    }
  }
  // What each region copies in and out: the union of its spans read, and of those written.
  struct Run {
    int region;
    size_t offset, bytes;
  };
  auto runsOf = [&](bool in) {
    std::vector<Run> runs;
    for (const DeviceSpan* s : sorted) {
      if (in ? !s->read : !s->write) continue;
      const char* b = static_cast<const char*>(s->data);
      int r = 0;
      while (!(b >= t.regions[r].device && b < t.regions[r].device + t.regions[r].bytes)) ++r;
      const size_t off = b - t.regions[r].device;
      if (!runs.empty() && runs.back().region == r && off <= runs.back().offset + runs.back().bytes)
        runs.back().bytes = std::max(runs.back().bytes, off + s->bytes - runs.back().offset);
      else
        runs.push_back({r, off, s->bytes});
    }
    return runs;
  };
  const std::vector<Run> ins = runsOf(true), outs = runsOf(false);
  const size_t pieceMax = stagingBytes_ / 2;

  cuda::DeviceGuard guard(device_);
  std::lock_guard<std::mutex> lock(mu_);
  SQZ_ENFORCE(!stop_, "enqueue on a destroyed communicator");
  const bool trace = logEnabled(LogLevel::kTrace, LogSubsys::kDevice);
  const cuda::StreamWord& sd = cuda_->streamDone;
  const cuda::StreamWord& hd = cuda_->hostDone;
  size_t ops = 0;
  std::string program;
  auto note = [&](const std::string& op) {
    ++ops;
    if (trace) program += strCat("\n  ", ops, ". ", op);
  };
  // A wait on the word (>= value) or a store into it; a host function where the driver has no
  // stream memory operations.
  auto wordOp = [&](bool wait, const cuda::StreamWord& w, const char* name, uint32_t value) {
    if (!(wait ? cuda::streamWaitWord(stream, w, value) : cuda::streamWriteWord(stream, w, value))) {
      auto* op = new HostWordOp{w.host, value, wait};
      cudaError_t rc = cudaLaunchHostFunc(stream, wordOpOnHost, op);
      if (rc != cudaSuccess) delete op;
      cuda::check(rc, "a host function on the caller's stream");
    }
    note(strCat(wait ? "wait " : "write ", name, wait ? " >= " : " = ", value));
  };
  auto wait = [&](const cuda::StreamWord& w, const char* name, uint32_t value) {
    wordOp(true, w, name, value);
  };
  auto write = [&](const cuda::StreamWord& w, const char* name, uint32_t value) {
    wordOp(false, w, name, value);
  };
  auto copy = [&](void* dst, const void* src, size_t n, const char* how) {
    cuda::check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream),
                strCat(t.what, ": copying on the caller's stream").c_str());
    note(strCat("copy ", n, " bytes ", how));
  };
  uint32_t p = issued_;
  try {
    bool first = true;
    for (const Run& r : ins)
      for (size_t off = 0; off < r.bytes; off += pieceMax) {
        const size_t n = std::min(pieceMax, r.bytes - off);
        if (first) wait(sd, "streamDone", p);  // earlier calls, on any stream, are through
        first = false;
        wait(hd, "hostDone", p - 1);  // the host took what this half held
        copy(half(p), t.regions[r.region].device + r.offset + off, n,
             strCat("device -> staging half ", p % 2).c_str());
        write(sd, "streamDone", p + 1);
        t.pieces.push_back({p++, true, r.region, r.offset + off, n});
      }
    for (const Run& r : outs)
      for (size_t off = 0; off < r.bytes; off += pieceMax) {
        const size_t n = std::min(pieceMax, r.bytes - off);
        wait(hd, "hostDone", p + 1);  // the host put this piece of the result there
        copy(const_cast<char*>(t.regions[r.region].device) + r.offset + off, half(p), n,
             strCat("staging half ", p % 2, " -> device").c_str());
        write(sd, "streamDone", p + 1);
        t.pieces.push_back({p++, false, r.region, r.offset + off, n});
      }
  } catch (const Error& e) {
    // Part of the program is on the stream: the communicator cannot go on. Every stream is
    // released (the host owes every piece handed out, this call's too).
    issued_ = p;
    stop_ = true;
    tasks_.clear();
    halt_ = true;
    storeHostDone(issued_);
    cv_.notify_all();
    fail_(e);
    throw;
  }
  issued_ = p;
  t.end = p;
  if (trace)
    SQZ_TRACE(kDevice, "rank ", rank_, ": ", t.what, ": stream program, ", ops, " operations:",
              program);
  tasks_.push_back(std::move(t));
  cv_.notify_all();
}

void CallQueue::copyOnStream(GpuStream stream, void* dst, const void* src, size_t bytes,
                             const std::string& what) {
  if (bytes == 0 || dst == src) return;
  cuda::DeviceGuard guard(device_);
  cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
              strCat(what, ": copying on the caller's stream").c_str());
}

void CallQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return (tasks_.empty() && !running_) || stop_; });
}

void CallQueue::abort() {
  halt_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.clear();
    // With a call running, the loop releases every piece when it returns (it sees halt_).
    if (!running_) storeHostDone(issued_);
  }
  cv_.notify_all();
}

void CallQueue::storeHostDone(uint32_t value) {
  // Monotonic: a failed call's release never moves the word back.
  if (!reached(cuda_->hostDone.host, value))
    __atomic_store_n(cuda_->hostDone.host, value, __ATOMIC_RELEASE);
}

void CallQueue::awaitStream(uint32_t value, const Task& task, const Piece& piece) {
  const volatile uint32_t* word = cuda_->streamDone.host;
  const auto start = Clock::now();
  bool warned = false;
  auto pause = std::chrono::microseconds(1);
  while (!reached(word, value)) {
    if (halt_)
      raise(ErrorCode::kRemote, task.what, " was dropped: the communicator was aborted or "
            "destroyed");
    // A caller's stream may be busy with its own work for as long as it likes: not an error.
    if (!warned && Clock::now() - start > std::chrono::milliseconds(timeoutMs_)) {
      warned = true;
      SQZ_WARN(kDevice, "rank ", rank_, ": ", task.what, " has waited ", timeoutMs_,
               " ms for the caller's stream to ", piece.in ? "copy in" : "pass", " piece ",
               piece.seq, " (", piece.bytes, " bytes): the stream's word streamDone is ",
               *word, ", the host waits for ", value, "; the stream is still running the "
               "work enqueued before this call, or is stopped");
    }
    if (Clock::now() - start < std::chrono::microseconds(50)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
  }
}

void CallQueue::runTask(Task& task) {
  if (hostBuffers_.size() < task.regions.size()) hostBuffers_.resize(task.regions.size());
  HostCopies copies;
  for (size_t i = 0; i < task.regions.size(); ++i) {
    auto& buf = hostBuffers_[i];
    if (buf.size() < task.regions[i].bytes) {
      buf = std::vector<char>();  // grown, not copied
      buf.resize(task.regions[i].bytes);
    }
    task.regions[i].host = buf.data();
  }
  copies.regions_ = task.regions;
  size_t next = 0;
  for (; next < task.pieces.size() && task.pieces[next].in; ++next) {
    const Piece& pc = task.pieces[next];
    awaitStream(pc.seq + 1, task, pc);
    std::memcpy(task.regions[pc.region].host + pc.offset, half(pc.seq), pc.bytes);
    storeHostDone(pc.seq + 1);
  }
  task.run(copies);
  for (; next < task.pieces.size(); ++next) {
    const Piece& pc = task.pieces[next];
    awaitStream(pc.seq - 1, task, pc);  // the stream copied out what this half held
    std::memcpy(half(pc.seq), task.regions[pc.region].host + pc.offset, pc.bytes);
    storeHostDone(pc.seq + 1);
  }
}

void CallQueue::loop() {
  setLogRank(rank_);
  tlsProgressOf = this;
  nameThisThread();
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      running_ = true;
    }
    try {
      runTask(task);
    } catch (const Error& e) {
      SQZ_WARN(kDevice, e.what());  // the error names the rank
      fail_(e);
    } catch (const std::exception& e) {
      fail_(Error(ErrorCode::kInternal, strCat("internal error in ", task.what, ": ", e.what())));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
      // After an abort every piece is released; otherwise this call's (the rest of them where
      // it failed).
      storeHostDone(halt_ ? issued_ : task.end);
    }
    cv_.notify_all();
  }
}

}  // namespace squeeze::device
