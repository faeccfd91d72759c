// The CUDA stand-in's model (device/standin/standin.h), part one: stream order, CUDA's
// blocking-stream and implicit synchronization rules, events, host functions, stream waits on a
// word, sticky kernel failures, pointer attributes, counters, IPC between processes and lazy
// loading. Part two (standin_models_test.cc): stream writes, hardware work queues, the driver
// lock, library loads, counters by thread name and the deadlock watchdog. The binaries link the
// stand-in library alone (no Squeeze), and run with two emulated GPUs.
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

TEST_F(StandinTest, DevicesAndBusIds) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 2);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 1), cudaSuccess);
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(prop.multiProcessorCount, 4);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(sms, 4);
  char bus[16];
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus, sizeof(bus), 1), cudaSuccess);
  EXPECT_STREQ(bus, "0000:01:00.0");
  int dev = -1;
  ASSERT_EQ(cudaDeviceGetByPCIBusId(&dev, bus), cudaSuccess);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  int can = -1;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 1);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  (void)cudaGetLastError();
  EXPECT_STREQ(cudaGetErrorName(cudaErrorLaunchFailure), "cudaErrorLaunchFailure");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
}

TEST_F(StandinTest, StreamRunsItsItemsInOrder) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::vector<int> order;
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(launch(s, "append",
                     [&order, i] {
                       if (i % 10 == 0) std::this_thread::sleep_for(1ms);
                       order.push_back(i);
                     }),
              cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(launch(s, "stale", [] {}), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);

  // A kernel goes to a stream of the current device.
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_EQ(launch(s, "elsewhere", [] {}), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST_F(StandinTest, LegacyStreamOrdersBlockingStreamsOnly) {
  cudaStream_t blocking, nonBlocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonBlocking, cudaStreamNonBlocking), cudaSuccess);
  Gate gate;
  ASSERT_EQ(launch(cudaStreamLegacy, "held", gate.kernel()), cudaSuccess);
  std::atomic<bool> ranNonBlocking{false}, ranBlocking{false};
  ASSERT_EQ(launch(nonBlocking, "free", [&] { ranNonBlocking = true; }), cudaSuccess);
  ASSERT_EQ(launch(blocking, "behind legacy", [&] { ranBlocking = true; }), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nonBlocking), cudaSuccess);  // does not wait for legacy
  EXPECT_TRUE(ranNonBlocking);
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(ranBlocking);
  EXPECT_EQ(cudaStreamQuery(blocking), cudaErrorNotReady);
  gate.open = true;
  ASSERT_EQ(cudaStreamSynchronize(blocking), cudaSuccess);
  EXPECT_TRUE(ranBlocking);
  EXPECT_FALSE(gate.timedOut);

  // And the other way: legacy work waits for earlier work on a blocking stream.
  Gate gate2;
  std::atomic<bool> ranLegacy{false};
  ASSERT_EQ(launch(blocking, "held", gate2.kernel()), cudaSuccess);
  ASSERT_EQ(launch(0, "behind blocking", [&] { ranLegacy = true; }), cudaSuccess);
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(ranLegacy);
  gate2.open = true;
  ASSERT_EQ(cudaStreamSynchronize(0), cudaSuccess);
  EXPECT_TRUE(ranLegacy);
  EXPECT_FALSE(gate2.timedOut);
  EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(nonBlocking), cudaSuccess);
}

TEST_F(StandinTest, CudaFreeWaitsForEveryStreamButFreeAsyncDoesNot) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  std::atomic<bool> done{false};
  ASSERT_EQ(launch(s, "slow",
                   [&] {
                     std::this_thread::sleep_for(60ms);
                     done = true;
                   }),
            cudaSuccess);
  const Counters before = threadCounters();
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_TRUE(done) << "cudaFree returned before earlier work on a non-blocking stream finished";
  const Counters d = threadCounters() - before;
  EXPECT_EQ(d.implicitSyncs, 1u);
  EXPECT_EQ(d.hostWaits, 1u);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // freed already
  (void)cudaGetLastError();

  // cudaFreeAsync: stream-ordered, no waiting. The kernel waits for this thread, so a free that
  // waited for the stream would hold the kernel until its gate timed out.
  Gate gate;
  void* q = nullptr;
  ASSERT_EQ(cudaMallocAsync(&q, 1000, s), cudaSuccess);
  ASSERT_EQ(launch(s, "held", gate.kernel()), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(q, s), cudaSuccess);
  EXPECT_TRUE(isDeviceMemory(q));  // the stream has not reached the free yet
  gate.open = true;
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_FALSE(gate.timedOut);
  EXPECT_FALSE(isDeviceMemory(q));
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST_F(StandinTest, EventsAndStreamWaitEvent) {
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t start, stop;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(stop), cudaSuccess);  // never recorded

  Gate gate;
  std::atomic<int> step{0};
  int aDone = -1, bRan = -1;
  ASSERT_EQ(cudaEventRecord(start, a), cudaSuccess);
  ASSERT_EQ(launch(a, "held", gate.kernel()), cudaSuccess);
  ASSERT_EQ(launch(a, "sleep",
                   [&] {
                     std::this_thread::sleep_for(20ms);
                     aDone = step++;
                   }),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(stop, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, stop, 0), cudaSuccess);
  ASSERT_EQ(launch(b, "after the event", [&] { bRan = step++; }), cudaSuccess);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(cudaEventQuery(stop), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not-ready is no error
  EXPECT_EQ(cudaStreamQuery(b), cudaErrorNotReady);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaErrorNotReady);
  gate.open = true;
  ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(stop), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(aDone, 0);
  EXPECT_EQ(bRan, 1);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_GE(ms, 35.0f);  // 20 ms held, 20 ms asleep
  EXPECT_LT(ms, 2000.0f);

  // cudaStreamWaitEvent waits for the record made before the call, not for a later one.
  Gate gate2;
  ASSERT_EQ(launch(a, "held again", gate2.kernel()), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(stop, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, stop, 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(stop, 0), cudaSuccess);  // done at once: a is non-blocking
  ASSERT_EQ(cudaStreamSynchronize(0), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(stop), cudaSuccess);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(cudaStreamQuery(b), cudaErrorNotReady);
  gate2.open = true;
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_FALSE(gate2.timedOut);

  cudaEvent_t noTiming;
  ASSERT_EQ(cudaEventCreateWithFlags(&noTiming, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, noTiming, stop), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  for (auto e : {start, stop, noTiming}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

void CUDART_CB hostBlock(void* data) {
  auto* gate = static_cast<Gate*>(data);
  gate->kernel()();
}

void CUDART_CB hostSynchronizes(void* data) {
  *static_cast<cudaError_t*>(data) = cudaDeviceSynchronize();
}

TEST_F(StandinTest, HostFunctionsRunOneAtATime) {
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  Gate gate;
  std::atomic<bool> marked{false};
  ASSERT_EQ(cudaLaunchHostFunc(a, hostBlock, &gate), cudaSuccess);
  std::this_thread::sleep_for(10ms);
  ASSERT_EQ(cudaLaunchHostFunc(b, hostMark, &marked), cudaSuccess);
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(marked) << "a host function ran while another one blocked the callback thread";
  gate.open = true;
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_TRUE(marked);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_FALSE(gate.timedOut);

  // A host function may not wait for the device (it would wait for itself): refused, not hung.
  cudaError_t inside = cudaSuccess;
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(cudaLaunchHostFunc(a, hostSynchronizes, &inside), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("sqz-cuda-standin"), std::string::npos);
  EXPECT_EQ(inside, cudaErrorNotPermitted);
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

TEST_F(StandinTest, StreamWaitValue32ReleasedByAHostStore) {
  auto wait = driverEntry<WaitValueFn>("cuStreamWaitValue32");
  ASSERT_NE(wait, nullptr);
  void* fn = reinterpret_cast<void*>(1);
  cudaDriverEntryPointQueryResult status{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &status),
            cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);

  uint32_t* word = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&word), 64, cudaHostAllocMapped), cudaSuccess);
  void* dword = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&dword, word, 0), cudaSuccess);
  EXPECT_EQ(dword, word);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  *word = 0;
  std::atomic<bool> after{false};
  ASSERT_EQ(wait(s, reinterpret_cast<CUdeviceptr>(dword), 3, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  ASSERT_EQ(launch(s, "after the wait", [&] { after = true; }), cudaSuccess);
  __atomic_store_n(word, 2u, __ATOMIC_RELEASE);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(after);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  __atomic_store_n(word, 3u, __ATOMIC_RELEASE);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_TRUE(after);

  // GEQ is a wrapping comparison: 1 is "after" 0xfffffffe.
  ASSERT_EQ(wait(s, reinterpret_cast<CUdeviceptr>(dword), 0xfffffffeu, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  __atomic_store_n(word, 1u, __ATOMIC_RELEASE);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  // Pageable memory is not something a GPU can wait on.
  uint32_t pageableWord = 0;
  EXPECT_EQ(wait(s, reinterpret_cast<CUdeviceptr>(&pageableWord), 1, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(word), cudaSuccess);
}

TEST_F(StandinTest, PointerAttributesAndBounds) {
  void* dev = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 1000), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 1000), cudaSuccess);
  int local = 0;
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(dev) + 10), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  ASSERT_EQ(cudaPointerGetAttributes(&a, pinned), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&a, &local), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  EXPECT_TRUE(isDeviceMemory(dev));
  EXPECT_FALSE(isDeviceMemory(pinned));
  EXPECT_TRUE(isDeviceAccessible(pinned));
  EXPECT_FALSE(isDeviceAccessible(&local));

  auto range = driverEntry<AddressRangeFn>("cuMemGetAddressRange");
  ASSERT_NE(range, nullptr);
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(range(&base, &size, reinterpret_cast<CUdeviceptr>(dev) + 999), CUDA_SUCCESS);
  EXPECT_EQ(base, reinterpret_cast<CUdeviceptr>(dev));
  EXPECT_EQ(size, 1000u);
  EXPECT_EQ(range(&base, &size, reinterpret_cast<CUdeviceptr>(&local)), CUDA_ERROR_NOT_FOUND);

  char host[1000];
  std::memset(host, 7, sizeof(host));
  EXPECT_EQ(cudaMemcpy(dev, host, 1000, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(static_cast<char*>(dev) + 1, host, 1000, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(&local, 0, sizeof(local)), cudaErrorInvalidValue);  // pageable
  (void)cudaGetLastError();
  ASSERT_EQ(cudaMemset(static_cast<char*>(dev) + 500, 9, 500), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, dev, 1000, cudaMemcpyDefault, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(0), cudaSuccess);
  EXPECT_EQ(static_cast<char*>(pinned)[499], 7);
  EXPECT_EQ(static_cast<char*>(pinned)[500], 9);

  void* none = reinterpret_cast<void*>(1);
  EXPECT_EQ(cudaMalloc(&none, 0), cudaSuccess);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(cudaFree(pinned), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
  EXPECT_FALSE(isDeviceMemory(dev));
}

TEST_F(StandinTest, CountersPerThreadAndProcess) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 256, 0), cudaSuccess);
  const Counters t0 = threadCounters(), p0 = processCounters();
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 256), cudaSuccess);                                    // alloc, sync
  ASSERT_EQ(launch(s, "k", [] {}), cudaSuccess);                                    // launch
  ASSERT_EQ(cudaMemcpyAsync(dev, pinned, 256, cudaMemcpyDefault, s), cudaSuccess);  // copy
  ASSERT_EQ(cudaMemsetAsync(dev, 0, 256, s), cudaSuccess);                          // copy
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);                                 // wait
  std::thread([] {
    ASSERT_EQ(launch(cudaStreamPerThread, "elsewhere", [] {}), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
  }).join();
  const Counters t = threadCounters() - t0, p = processCounters() - p0;
  EXPECT_EQ(t.launches, 1u);
  EXPECT_EQ(t.copies, 2u);
  EXPECT_EQ(t.allocations, 1u);
  EXPECT_EQ(t.implicitSyncs, 1u);
  EXPECT_EQ(t.hostWaits, 2u);
  EXPECT_GE(p.launches, 2u);
  EXPECT_GE(p.hostWaits, 3u);
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST_F(StandinTest, IpcHandleOpensInAnotherProcess) {
  constexpr size_t kBytes = 1 << 16;
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(buf, 0, kBytes), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // a memset of device memory returns early
  cudaIpcMemHandle_t handle;
  ASSERT_EQ(cudaIpcGetMemHandle(&handle, buf), cudaSuccess);
  void* mine = nullptr;
  EXPECT_EQ(cudaIpcOpenMemHandle(&mine, handle, cudaIpcMemLazyEnablePeerAccess),
            cudaErrorDeviceUninitialized);  // as CUDA: not in the exporting process
  (void)cudaGetLastError();

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a fresh emulated runtime; only _exit from here
    void* peer = nullptr;
    int rc = 10;
    if (cudaIpcOpenMemHandle(&peer, handle, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess) {
      rc = 11;
      cudaPointerAttributes a{};
      if (cudaPointerGetAttributes(&a, peer) == cudaSuccess && a.type == cudaMemoryTypeDevice &&
          cudaMemset(peer, 0x5a, kBytes - 1) == cudaSuccess &&
          cudaDeviceSynchronize() == cudaSuccess && cudaIpcCloseMemHandle(peer) == cudaSuccess)
        rc = 0;
    }
    _exit(rc);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::vector<unsigned char> host(kBytes);
  ASSERT_EQ(cudaMemcpy(host.data(), buf, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host[0], 0x5a);
  EXPECT_EQ(host[kBytes - 2], 0x5a);
  EXPECT_EQ(host[kBytes - 1], 0);
  EXPECT_EQ(cudaFree(buf), cudaSuccess);
}

// Device 1 only: the failure is sticky for the rest of the process.
TEST_F(StandinTest, FailingKernelMakesTheDeviceErrorSticky) {
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  bool ranAfter = false;
  // Captured from before the launch: the stream's worker may run the kernel, and report it, at
  // once.
  ::testing::internal::CaptureStderr();
  const cudaError_t launched =
      launch(s, "faulty", [] { throw std::runtime_error("an illegal address"); });
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(launched, cudaSuccess);
  EXPECT_NE(err.find("faulty"), std::string::npos) << err;
  EXPECT_NE(err.find("an illegal address"), std::string::npos) << err;
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // sticky
  EXPECT_EQ(launch(s, "later", [&] { ranAfter = true; }), cudaErrorLaunchFailure);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_FALSE(ranAfter);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);               // the other device is fine
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // this thread's last error, once
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// After loadKernels (SetUp), a kernel launched for the first time runs beside a held stream, as
// on a GPU after cuFuncLoad; without it, the first launch waits for the device (the death test).
TEST_F(StandinTest, LoadedKernelsLaunchBesideAHeldStream) {
  auto wait = driverEntry<WaitValueFn>("cuStreamWaitValue32");
  uint32_t* word = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&word), 64, cudaHostAllocMapped), cudaSuccess);
  *word = 0;
  cudaStream_t held, other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(wait(held, reinterpret_cast<CUdeviceptr>(word), 1, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  const Counters before = threadCounters();
  std::atomic<bool> ran{false};
  ASSERT_EQ(launch(other, "first launch after loadKernels", [&] { ran = true; }), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  EXPECT_TRUE(ran);
  EXPECT_EQ((threadCounters() - before).implicitSyncs, 0u);
  __atomic_store_n(word, 1u, __ATOMIC_RELEASE);
  ASSERT_EQ(cudaStreamSynchronize(held), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(held), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(word), cudaSuccess);
}

}  // namespace
}  // namespace squeeze::standin
