// What every kernel file of device/cuda/ shares on the host side of a launch: the block size,
// the grid for a grid-stride loop (device/memory.h's syncStream waits), and scratch kept
// per calling thread and per device (ranks run as threads on one GPU, so no two callers may
// share a kernel's scratch, and a thread may drive several devices).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "device/cuda/runtime.h"
#include "device/memory.h"

namespace squeeze::device {

constexpr int kThreads = 256;
// Grid-stride kernels stop growing the grid here: more blocks only add scheduling.
constexpr size_t kMaxBlocks = 4096;

// Blocks for `items` work items, `perBlock` to a block: at least 1, at most maxBlocks.
inline unsigned gridFor(size_t items, size_t perBlock = kThreads, size_t maxBlocks = kMaxBlocks) {
  return static_cast<unsigned>(
      std::clamp<size_t>((items + perBlock - 1) / perBlock, 1, maxBlocks));
}

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

// Each kernel file's per-thread scratch of fixed size (pinned result slots, cuBLAS's handle),
// made by gpuPrepareThread (device/memory.h).
void prepareSparseThread();
void prepareQuantizeThread();
void prepareLinalgThread(cudaStream_t stream);

}  // namespace squeeze::device
