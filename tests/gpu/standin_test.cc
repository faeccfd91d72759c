// The CUDA stand-in's model (device/standin/standin.h): stream order, CUDA's blocking-stream and
// implicit synchronization rules, events, host functions, stream waits on and writes of a word,
// hardware work queues, the driver lock, library loads, sticky kernel failures, pointer
// attributes, counters (per thread, and by thread name), IPC between processes and the
// deadlock watchdog. The binary links the stand-in library alone (no Squeeze), and runs with
// two emulated GPUs.
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

void CUDART_CB hostMark(void* data) { static_cast<std::atomic<bool>*>(data)->store(true); }

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
