// The CUDA stand-in's model (device/standin/standin.h), part two: stream writes, hardware work
// queues, the driver lock, library loads, counters by thread name and the deadlock watchdog
// (part one: standin_test.cc). The binary links the stand-in library alone (no Squeeze), and
// runs with two emulated GPUs.
#include "device/standin/standin.h"

#include <cuda.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "standin_fixture.h"

namespace squeeze::standin {
namespace {

// ---- stream writes, hardware work queues, the driver lock, library loads, named counters ----

using WriteValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// A word in pinned memory that streams wait on and write.
struct PinnedWord {
  uint32_t* p = nullptr;
  PinnedWord() {
    EXPECT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&p), 64, 0), cudaSuccess);
    store(0);
  }
  ~PinnedWord() { EXPECT_EQ(cudaFreeHost(p), cudaSuccess); }
  CUdeviceptr dev() const { return reinterpret_cast<CUdeviceptr>(p); }
  uint32_t load() const { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  void store(uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
};

TEST_F(StandinTest, StreamWriteValue32StoresInStreamOrder) {
  auto write = driverEntry<WriteValueFn>("cuStreamWriteValue32");
  auto wait = driverEntry<WaitValueFn>("cuStreamWaitValue32");
  ASSERT_NE(write, nullptr);
  PinnedWord word;
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  Gate gate;
  ASSERT_EQ(launch(a, "before the write", gate.kernel()), cudaSuccess);
  ASSERT_EQ(write(reinterpret_cast<CUstream>(a), word.dev(), 7, CU_STREAM_WRITE_VALUE_DEFAULT),
            CUDA_SUCCESS);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(word.load(), 0u) << "the write passed the stream's earlier kernel";
  gate.open = true;
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(word.load(), 7u);
  EXPECT_FALSE(gate.timedOut);

  // One stream releases another, with no host thread in between; EQ waits for the exact value.
  std::atomic<bool> released{false};
  ASSERT_EQ(wait(reinterpret_cast<CUstream>(b), word.dev(), 9, CU_STREAM_WAIT_VALUE_EQ),
            CUDA_SUCCESS);
  ASSERT_EQ(launch(b, "released", [&] { released = true; }), cudaSuccess);
  ASSERT_EQ(write(reinterpret_cast<CUstream>(a), word.dev(), 10, 0), CUDA_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(released) << "EQ 9 was satisfied by 10";
  ASSERT_EQ(write(reinterpret_cast<CUstream>(a), word.dev(), 9, 0), CUDA_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_TRUE(released);

  // Only the default flags; only memory a GPU can reach.
  EXPECT_EQ(
      write(reinterpret_cast<CUstream>(a), word.dev(), 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER),
      CUDA_ERROR_INVALID_VALUE);
  uint32_t pageable = 0;
  EXPECT_EQ(write(reinterpret_cast<CUstream>(a), reinterpret_cast<CUdeviceptr>(&pageable), 1, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(write(reinterpret_cast<CUstream>(a), word.dev() + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

// Streams A then B, A held on a word: with one hardware work queue B's copy waits for A's wait
// (they share the queue, in order); with two, it runs at once.
void expectQueueSharing(int queues, bool stalls) {
  ASSERT_EQ(setWorkQueues(queues), cudaSuccess);
  auto wait = driverEntry<WaitValueFn>("cuStreamWaitValue32");
  PinnedWord word;
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(wait(reinterpret_cast<CUstream>(a), word.dev(), 1, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  uint32_t* pinned = word.p + 4;
  pinned[0] = 42;
  ASSERT_EQ(cudaMemcpyAsync(dev, pinned, 4, cudaMemcpyHostToDevice, b), cudaSuccess);
  if (stalls) {
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(cudaStreamQuery(b), cudaErrorNotReady)
        << "B's copy ran past A's held wait on their one work queue";
    word.store(1);
    ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  } else {
    ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);  // A is still held
    EXPECT_EQ(cudaStreamQuery(a), cudaErrorNotReady);
    word.store(1);
  }
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(*static_cast<uint32_t*>(dev), 42u);
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST_F(StandinTest, OneWorkQueueStallsTheStreamsSharingIt) { expectQueueSharing(1, true); }
TEST_F(StandinTest, TwoWorkQueuesKeepTwoStreamsApart) { expectQueueSharing(2, false); }

TEST_F(StandinTest, WorkQueueHookChecksItsCount) {
  EXPECT_EQ(setWorkQueues(0), cudaErrorInvalidValue);
  EXPECT_EQ(setWorkQueues(33), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

// CUDA_DEVICE_MAX_CONNECTIONS is read when the device is initialized: in a fresh process (the
// death-test child re-runs this binary), 1 makes two new streams share a queue; 0 is refused
// (said on stderr) and 8 are used.
int streamsShareAQueue() {
  loadKernels();
  auto wait = driverEntry<WaitValueFn>("cuStreamWaitValue32");
  uint32_t* word = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&word), 64, 0);
  *word = 0;
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  wait(reinterpret_cast<CUstream>(a), reinterpret_cast<CUdeviceptr>(word), 1,
       CU_STREAM_WAIT_VALUE_GEQ);
  launch(b, "b", [] {});
  std::this_thread::sleep_for(30ms);
  const bool shared = cudaStreamQuery(b) == cudaErrorNotReady;
  __atomic_store_n(word, 1u, __ATOMIC_RELEASE);
  cudaDeviceSynchronize();
  return shared ? 3 : 4;
}

TEST(StandinEnvTest, WorkQueuesComeFromTheEnvironment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
        std::_Exit(streamsShareAQueue());
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "0", 1);
        std::_Exit(streamsShareAQueue());
      },
      ::testing::ExitedWithCode(4), "ignoring CUDA_DEVICE_MAX_CONNECTIONS=0");
}

// While a thread is in cudaFree behind a held stream (an implicit synchronization: it holds the
// driver lock), another thread's cudaStreamQuery waits at entry until the stream is released and
// cudaFree returns.
TEST_F(StandinTest, DriverLockHoldsOtherThreadsCallsBehindAnImplicitSync) {
  auto wait = driverEntry<WaitValueFn>("cuStreamWaitValue32");
  PinnedWord word;
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
  cudaStream_t held, other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(wait(reinterpret_cast<CUstream>(held), word.dev(), 1, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  std::atomic<bool> freed{false}, queried{false};
  std::thread freer([&] {
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
    freed = true;
  });
  std::this_thread::sleep_for(30ms);  // freer is in cudaFree, waiting for `held`
  std::thread querier([&] {
    EXPECT_EQ(cudaStreamQuery(other), cudaSuccess);
    queried = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(freed);
  EXPECT_FALSE(queried) << "cudaStreamQuery ran while another thread was in cudaFree";
  word.store(1);
  freer.join();
  querier.join();
  EXPECT_TRUE(freed);
  EXPECT_TRUE(queried);
  EXPECT_EQ(cudaStreamDestroy(held), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
}

// cuBLAS's first use on a device loads it: an implicit synchronization, once per device, and
// none after loadKernels. In a fresh process (the death-test child re-runs this binary), since
// this one's fixture loads the kernels and another test leaves device 1 failed.
int libraryLoads() {
  auto syncsOf = [](auto fn) {
    const Counters before = threadCounters();
    if (fn() != cudaSuccess) return 100ul;
    return static_cast<unsigned long>((threadCounters() - before).implicitSyncs);
  };
  const auto use = [] { return useLibrary("cuBLAS"); };
  const unsigned long first = syncsOf(use), second = syncsOf(use);
  cudaSetDevice(1);
  loadKernels();
  const unsigned long afterLoad = syncsOf(use);
  return first == 1 && second == 0 && afterLoad == 0 ? 3 : 4;
}

TEST(StandinEnvTest, LibraryLoadsOnFirstUseUnlessKernelsWereLoaded) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(libraryLoads()), ::testing::ExitedWithCode(3), "");
}

// Every exported call counts once on its thread (a nested one, cudaStreamCreate calling
// cudaStreamCreateWithFlags, once), handed-out driver entry points too; and by thread name,
// after the thread has exited.
TEST_F(StandinTest, CountersOfThreadsNamedCountEveryCall) {
  auto write = driverEntry<WriteValueFn>("cuStreamWriteValue32");
  PinnedWord word;
  const Counters progress0 = countersOfThreadsNamed("sqz-progress-t");
  const Counters other0 = countersOfThreadsNamed("sqz-other-t");
  std::thread([&] {
    pthread_setname_np(pthread_self(), "sqz-progress-t");
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);                                     // 1
    ASSERT_EQ(write(reinterpret_cast<CUstream>(s), word.dev(), 1, 0), CUDA_SUCCESS);  // 2
    std::atomic<bool> marked{false};
    ASSERT_EQ(cudaLaunchHostFunc(s, hostMark, &marked), cudaSuccess);  // 3
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);                  // 4
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);                      // 5
    EXPECT_TRUE(marked);
    EXPECT_EQ(threadCounters().apiCalls, 5u);
    EXPECT_EQ(threadCounters().streamOps, 2u);
  }).join();
  std::thread([] {
    pthread_setname_np(pthread_self(), "sqz-other-t");
    (void)cudaGetLastError();
  }).join();
  const Counters progress = countersOfThreadsNamed("sqz-progress-t") - progress0;
  EXPECT_EQ(progress.apiCalls, 5u);
  EXPECT_EQ(progress.streamOps, 2u);
  EXPECT_EQ(progress.hostWaits, 1u);
  EXPECT_EQ((countersOfThreadsNamed("sqz-other-t") - other0).apiCalls, 1u);
  EXPECT_GE(countersOfThreadsNamed("sqz-").apiCalls, progress0.apiCalls + 6u);
  EXPECT_EQ(countersOfThreadsNamed("sqz-nobody").apiCalls, 0u);
  EXPECT_GE(threadCounters().apiCalls, 1u);  // this thread's driverEntry, at least
}

// For the death tests: SQZ_STANDIN_HANG_MS=300, a new stream (flags) held by a
// cuStreamWaitValue32 on a word nobody will store, and 64 bytes of device memory.
void* heldStreamAndBuffer(unsigned streamFlags) {
  setenv("SQZ_STANDIN_HANG_MS", "300", 1);
  auto wait = driverEntry<WaitValueFn>("cuStreamWaitValue32");
  uint32_t* word = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&word), 64, 0);
  *word = 0;
  void* p = nullptr;
  cudaMalloc(&p, 64);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, streamFlags);
  wait(s, reinterpret_cast<CUdeviceptr>(word), 1, CU_STREAM_WAIT_VALUE_GEQ);
  std::this_thread::sleep_for(20ms);
  return p;
}

// cudaFree while a stream waits for a word nobody will store: NCCL's deadlock. The stand-in says
// so at once and aborts after SQZ_STANDIN_HANG_MS.
TEST(StandinDeathTest, WatchdogAbortsAnImplicitSyncBehindAHeldStream) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        void* p = heldStreamAndBuffer(cudaStreamNonBlocking);
        cudaFree(p);
      },
      "sqz-cuda-standin: cudaFree waits for the whole device while stream 0x[0-9a-f]+ of device "
      "0 is held by cuStreamWaitValue32 on 0x[0-9a-f]+ \\(waiting for >= 1, now 0\\)(.|\n)*"
      "has waited [0-9]+ ms");
}

// A synchronous copy runs on the legacy default stream, which waits for every blocking stream:
// behind one held by its call, it is the deadlock of ranks as threads on one GPU (a rank's
// cudaMemcpy behind another rank's cudaStreamCreate stream). The watchdog follows that order.
TEST(StandinDeathTest, WatchdogFollowsTheLegacyStreamBehindAHeldBlockingStream) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        void* p = heldStreamAndBuffer(cudaStreamDefault);
        char host[64] = {};
        cudaMemcpy(p, host, sizeof host, cudaMemcpyHostToDevice);
      },
      "sqz-cuda-standin: cudaMemcpy waits for its stream while the legacy default stream of "
      "device 0 waits for stream 0x[0-9a-f]+ of device 0, which is held by cuStreamWaitValue32");
}

// A kernel's first launch loads it (CUDA's lazy loading, the default since 12.2), which may
// synchronize the device: behind a stream held for a call, the H100's hang of every device
// collective until gpuPrepareThread loaded the kernels (kernel_modules.cc).
TEST(StandinDeathTest, WatchdogAbortsAFirstLaunchBehindAHeldStream) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        heldStreamAndBuffer(cudaStreamNonBlocking);
        cudaStream_t other;
        cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
        launch(other, "neverLaunched", [] {});
      },
      "sqz-cuda-standin: loading kernel neverLaunched \\(CUDA's lazy loading\\) waits for the "
      "whole device while stream 0x[0-9a-f]+ of device 0 is held by cuStreamWaitValue32");
}

// With one work queue, a stream behind a held one on its queue never runs: cudaStreamSynchronize
// on it is the deadlock of a progress thread's copy behind the caller's held stream. The watchdog
// names both streams and what the held one waits for.
TEST(StandinDeathTest, WatchdogNamesAStreamStalledBehindItsWorkQueue) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
        heldStreamAndBuffer(cudaStreamNonBlocking);
        loadKernels();
        cudaStream_t other;
        cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
        launch(other, "behindTheQueue", [] {});
        cudaStreamSynchronize(other);
      },
      "sqz-cuda-standin: cudaStreamSynchronize waits for its stream while stream 0x[0-9a-f]+ of "
      "device 0 waits for its hardware work queue 0 of 1 \\(CUDA_DEVICE_MAX_CONNECTIONS\\) "
      "behind stream 0x[0-9a-f]+ of device 0 \\(they share it\\), which is held by "
      "cuStreamWaitValue32(.|\n)*has waited [0-9]+ ms");
}

// A thread in cudaFree behind a held stream holds the driver lock: another thread's call waits
// at entry, and the watchdog says behind what.
TEST(StandinDeathTest, WatchdogNamesAThreadBlockedOnTheDriverLock) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        void* p = heldStreamAndBuffer(cudaStreamNonBlocking);
        std::thread([p] { cudaFree(p); }).detach();
        std::this_thread::sleep_for(20ms);
        cudaStreamQuery(cudaStreamLegacy);
      },
      "sqz-cuda-standin: cudaStreamQuery waits for the driver lock, which cudaFree holds on "
      "another thread while it waits for the device, and stream 0x[0-9a-f]+ of device 0 is held "
      "by cuStreamWaitValue32");
}

// cuBLAS's first use (the stand-in's linear-algebra kernels) behind a held stream: the library
// load waits for the whole device, as lazy kernel loading does.
TEST(StandinDeathTest, WatchdogAbortsAFirstLibraryUseBehindAHeldStream) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        heldStreamAndBuffer(cudaStreamNonBlocking);
        useLibrary("cuBLAS");
      },
      "sqz-cuda-standin: loading cuBLAS \\(its first use on the device\\) waits for the whole "
      "device while stream 0x[0-9a-f]+ of device 0 is held by cuStreamWaitValue32");
}

}  // namespace
}  // namespace squeeze::standin
