// The CUDA stand-in's test fixture (tests/gpu/standin_test.cc, standin_models_test.cc): two
// emulated GPUs, kernels loaded, fresh hardware work queues per test, a kernel that waits to be
// released, and the driver entry points the tests call.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include "device/standin/standin.h"

namespace squeeze::standin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Before the stand-in's first call (its state reads the environment once).
const bool kTwoDevices = [] { return setenv("SQZ_STANDIN_DEVICES", "2", 1) == 0; }();

// A kernel that waits for the test to release it. It gives up after two seconds (so a broken
// model fails the test instead of hanging it) and says so in `timedOut`.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> timedOut{false};
  std::function<void()> kernel() {
    return [this] {
      const auto deadline = Clock::now() + 2s;
      while (!open.load()) {
        if (Clock::now() > deadline) {
          timedOut = true;
          return;
        }
        std::this_thread::sleep_for(100us);
      }
    };
  }
};

class StandinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kTwoDevices);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    // The ordering tests launch new kernels behind held ones; a first launch would wait for
    // them (lazy loading, which has tests of its own below).
    loadKernels();
    // Fresh hardware work queues for each test's streams, so which streams share one does not
    // depend on how many streams earlier tests made (the queue tests set their own).
    for (int dev : {1, 0}) {
      ASSERT_EQ(cudaSetDevice(dev), cudaSuccess);
      ASSERT_EQ(setWorkQueues(8), cudaSuccess);
    }
  }
};

// A host function that marks that it ran.
inline void CUDART_CB hostMark(void* data) {
  static_cast<std::atomic<bool>*>(data)->store(true);
}

template <class Fn>
Fn driverEntry(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  EXPECT_EQ(cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status),
            cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSuccess) << symbol;
  return reinterpret_cast<Fn>(fn);
}

using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

}  // namespace
}  // namespace squeeze::standin
