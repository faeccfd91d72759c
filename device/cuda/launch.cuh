// What every kernel file of device/cuda/ shares on the host side of a launch: the block size,
// the grid for a grid-stride loop, the wait for a result the host reads, and scratch kept
// per calling thread and per device (ranks run as threads on one GPU, so no two callers may
// share a kernel's scratch, and a thread may drive several devices).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "device/batch.h"
#include "device/cuda/runtime.h"
#include "device/hd.h"

namespace squeeze::device {

constexpr int kThreads = 256;
// Grid-stride kernels stop growing the grid here: more blocks only add scheduling.
constexpr size_t kMaxBlocks = 4096;

// Blocks for `items` work items, `perBlock` to a block: at least 1, at most maxBlocks.
inline unsigned gridFor(size_t items, size_t perBlock = kThreads, size_t maxBlocks = kMaxBlocks) {
  return static_cast<unsigned>(
      std::clamp<size_t>((items + perBlock - 1) / perBlock, 1, maxBlocks));
}

// A batched kernel's argument (device/batch.h): its jobs, job j for grid row j.
template <class Job>
struct JobTable {
  Job job[kBatchJobs];
};

// The jobs that have work (n > 0), in order.
template <class Job>
std::vector<Job> liveJobs(const Job* jobs, size_t count) {
  std::vector<Job> live;
  for (size_t j = 0; j < count; ++j)
    if (jobs[j].n > 0) live.push_back(jobs[j]);
  return live;
}

// Scatter-add's first step, on a GPU as on the stand-in: dst = local (a stream-ordered copy)
// for each job where they differ; returns the jobs with entries to add.
inline std::vector<ScatterJob> copyScatterAddLocals(const ScatterJob* jobs, size_t count,
                                                    GpuStream stream) {
  std::vector<ScatterJob> entries;
  for (const ScatterJob& s : liveJobs(jobs, count)) {
    if (s.dst != s.local)
      cuda::check(cudaMemcpyAsync(s.dst, s.local, s.n * sizeof(float), cudaMemcpyDefault, stream),
                  "cudaMemcpyAsync");
    if (s.k > 0) entries.push_back(s);
  }
  return entries;
}

#if defined(__CUDACC__)
// Launches `jobs` kBatchJobs at a time: launch(grid, table) with grid.y the table's jobs and
// grid.x the most blocks any of them needs (blocks(job)); a job's extra blocks find no work.
template <class Job, class Blocks, class Launch>
void launchJobs(const std::vector<Job>& jobs, Blocks&& blocks, Launch&& launch) {
  static_assert(sizeof(JobTable<Job>) + 64 <= 4096, "a kernel argument of at most 4 KiB");
  for (size_t first = 0; first < jobs.size(); first += kBatchJobs) {
    JobTable<Job> table{};
    const size_t count = std::min(kBatchJobs, jobs.size() - first);
    unsigned x = 1;
    for (size_t j = 0; j < count; ++j) {
      table.job[j] = jobs[first + j];
      x = std::max<unsigned>(x, blocks(table.job[j]));
    }
    launch(dim3(x, static_cast<unsigned>(count)), table);
  }
}
#endif

// The calling thread's T for the current device, made by make(device) (a unique_ptr<T>) on
// first use.
template <class T, class Make>
T& perThreadDevice(Make make) {
  thread_local std::vector<std::unique_ptr<T>> perDevice;
  const int dev = cuda::currentDevice();
  if (perDevice.size() <= static_cast<size_t>(dev)) perDevice.resize(dev + 1);
  std::unique_ptr<T>& s = perDevice[dev];
  if (!s) s = make(dev);
  return *s;
}

// The same per calling thread, device and stream: for scratch that work still queued on the
// stream may use, since nothing waits for it to be free (streams are few per thread).
template <class T, class Make>
T& perThreadDeviceStream(GpuStream stream, Make make) {
  struct Keyed {
    int dev;
    GpuStream stream;
    std::unique_ptr<T> value;
  };
  thread_local std::vector<Keyed> all;
  const int dev = cuda::currentDevice();
  for (Keyed& k : all)
    if (k.dev == dev && k.stream == stream) return *k.value;
  all.push_back(Keyed{dev, stream, make(dev)});
  return *all.back().value;
}

// Waits for what was enqueued on `stream` (null: the legacy default stream) before the host
// reads a kernel's result; a failed kernel or copy throws Error(kCuda) naming `what`.
inline void syncStream(GpuStream stream, const char* what) {
  cuda::check(cudaStreamSynchronize(stream), what);
}

// Loads the kernel modules and makes the calling thread's kernel scratch on the current device
// that is made once and never grown (pinned result slots). cudaHostAlloc may wait for the whole
// device, so a progress thread calls this when it starts, before any caller's stream waits for it
// (DESIGN.md, "Memory, streams, threads"); the CUDA execution context's prepareThread. (The
// selections' scratch and cuBLAS's handle are the context's own: prepareSlots.)
void gpuPrepareThread(GpuStream stream);

// Kernel modules loaded ahead of use (kernel_modules.cc says why). Each file that includes this
// header registers its module at load time, through a kernel of its own (below);
// loadKernelModules loads all of them into the current device's context, once per device.
bool registerKernelModule(const void* anchor, const char* file);
void loadKernelModules();

#if defined(__CUDACC__)
namespace {
// This file's module, for registerKernelModule: a kernel every module has, never launched.
__global__ void moduleAnchorKernel() {}
[[maybe_unused]] const bool kModuleRegistered =
    registerKernelModule(reinterpret_cast<const void*>(&moduleAnchorKernel), __BASE_FILE__);
}  // namespace
#endif

// Each kernel file's part of it (pinned result slots).
void prepareQuantizeThread();

}  // namespace squeeze::device
