// What one call on device buffers asks of the GPU, counted by the CUDA stand-in
// (standin::Counters: kernel launches, copies, host waits): the device path's cost in launches and
// round trips, which a GPU's timings hide among its noise and a machine without one cannot time
// at all. The figures are ceilings recorded from the code as it is: a change that makes a call
// launch or wait more fails here, and one that makes it less lowers them. The stand-in counts
// what each gpu* entry point's host side does (device/standin/kernels.cc mirrors
// device/cuda/*.cu, its launches included: a CUB algorithm counts as one).
//   - a one-rank all-reduce without a codec is one copy on the caller's stream (none in place):
//     no launch, no host wait, nothing for the progress thread;
//   - a 2-rank call on device buffers, plain or compressed (int8, top-k, PowerSGD), per rank and
//     call, at two sizes: a stream program of two copies and a few word operations that the
//     caller's thread enqueues without waiting, no kernel launch, and no CUDA call at all on
//     the progress threads (the stand-in counts calls by thread name); a call larger than the
//     staging moves in pieces and stays exact;
//   - a top-k selection, either route, waits for nothing: its count is k, known before it runs.
// Stand-in builds only (scripts/standin.sh); a GPU has no such counters.
#include <cuda_runtime_api.h>

#include <barrier>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "../collective/test_util.h"
#include "device/sparse.h"
#include "device/standin/standin.h"

namespace sqztest {
namespace {

using squeeze::standin::Counters;
using squeeze::standin::countersOfThreadsNamed;
using squeeze::standin::processCounters;
using squeeze::standin::threadCounters;

// Device memory of n floats, filled with a gradient-like pattern, allocated and freed
// stream-ordered on `stream`: ranks are threads sharing one GPU, and a cudaMalloc would wait for
// the whole device while the other rank's stream is held by its call (NCCL's rule).
struct DeviceFloats {
  DeviceFloats(size_t n, cudaStream_t stream) : n(n), stream(stream) {
    EXPECT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&ptr), n * sizeof(float), stream),
              cudaSuccess);
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = float(int((i * 2654435761u) % 2001) - 1000) / 1000.0f;
    EXPECT_EQ(cudaMemcpyAsync(ptr, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  ~DeviceFloats() {
    cudaFreeAsync(ptr, stream);
    cudaStreamSynchronize(stream);
  }
  std::vector<float> get() const {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpyAsync(h.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return h;
  }
  float* ptr = nullptr;
  size_t n;
  cudaStream_t stream;
};

// A non-blocking stream, destroyed last.
struct Stream {
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};

TEST(CallCounts, OneRankAllReduceIsOneCopyOnTheCallersStream) {
  RunOptions opts;
  opts.transports = "shm";
  RunResult run = runRanks(1, opts, [&](sqzComm_t& comm, int) {
    Stream stream;
    cudaStream_t s = stream.s;
    DeviceFloats in(4096, s), out(4096, s);
    for (bool inPlace : {false, true}) {
      float* dst = inPlace ? in.ptr : out.ptr;
      const Counters t0 = threadCounters(), p0 = processCounters();
      ASSERT_EQ(sqzAllReduce(in.ptr, dst, in.n, sqzFloat32, sqzSum, comm, s), sqzSuccess)
          << sqzGetLastError(comm);
      const Counters t = threadCounters() - t0;
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      const Counters p = processCounters() - p0;
      EXPECT_EQ(t.copies, inPlace ? 0u : 1u) << (inPlace ? "in place" : "out of place");
      EXPECT_EQ(t.launches, 0u);
      EXPECT_EQ(t.hostWaits, 0u) << "sqzAllReduce waited for the device";
      // The progress thread took no part: the only host wait is the test's synchronize.
      EXPECT_EQ(p.launches, 0u);
      EXPECT_EQ(p.hostWaits, 1u);
    }
    EXPECT_EQ(in.get(), out.get());
  });
  EXPECT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

// A call on device buffers is a stream program (device/call_queue.h): per piece of staging, a
// copy and the words' writes and waits on the caller's stream, enqueued by the caller's thread,
// which waits for nothing; the progress thread does the rest on the host and makes no CUDA call
// at all. So per rank and call: no kernel launch anywhere, no host wait but the test's own, and
// copies that grow with the call's bytes over half the staging, not with the schedule's pieces
// (128 KiB here, 1 a step at 64K floats, 16 at 1M).
struct Counted {
  double launches, waits, copies, streamOps, progressCalls;
  bool exact;
};

// Per rank and call, for `count` floats through `spec` ("" for a plain all-reduce).
Counted countCalls(const char* spec, size_t count, const char* staging = nullptr) {
  constexpr int kRanks = 2, kWarmCalls = 2, kCalls = 3;
  ScopedEnv env;
  env.set("SQZ_ALGO", "ring");
  env.set("SQZ_TUNER_CALIBRATE", "0");
  if (staging) env.set("SQZ_DEVICE_STAGING_BYTES", staging);
  RunOptions opts;
  opts.transports = "shm";
  opts.chunkBytes = 128 << 10;
  std::barrier sync(kRanks);
  Counters before, total;
  uint64_t callerCopies = 0, callerStreamOps = 0;  // both ranks' enqueues (atomics below)
  std::mutex callerMu;
  const Counters progress0 = countersOfThreadsNamed("sqz-progress");
  bool exact[kRanks] = {true, true};
  RunResult run = runRanks(kRanks, opts, [&](sqzComm_t& comm, int rank) {
    Stream stream;
    cudaStream_t s = stream.s;
    DeviceFloats in(count, s), out(count, s);
    const std::vector<float> mine = in.get();
    sqzCodec_t codec = nullptr;
    if (*spec)
      ASSERT_EQ(sqzCodecCreate(&codec, spec, count, sqzFloat32, comm), sqzSuccess)
          << sqzGetLastError(comm);
    auto enqueue = [&] {
      if (codec)
        EXPECT_EQ(sqzAllReduceCompressed(in.ptr, out.ptr, count, sqzFloat32, sqzSum, codec, comm,
                                         s), sqzSuccess) << sqzGetLastError(comm);
      else
        EXPECT_EQ(sqzAllReduce(in.ptr, out.ptr, count, sqzFloat32, sqzSum, comm, s), sqzSuccess)
            << sqzGetLastError(comm);
    };
    auto call = [&] {
      enqueue();
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    };
    for (int i = 0; i < kWarmCalls; ++i) call();
    sync.arrive_and_wait();
    if (rank == 0) before = processCounters();
    sync.arrive_and_wait();  // before either rank's first counted call enqueues anything
    for (int i = 0; i < kCalls; ++i) {
      const Counters t0 = threadCounters();
      enqueue();
      const Counters t = threadCounters() - t0;
      {
        std::lock_guard<std::mutex> lock(callerMu);
        callerCopies += t.copies;
        callerStreamOps += t.streamOps;
      }
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    }
    sync.arrive_and_wait();
    if (rank == 0) total = processCounters() - before;
    sync.arrive_and_wait();
    // Both ranks' inputs are the same pattern: a plain sum is twice it, exactly.
    if (!codec) {
      const std::vector<float> got = out.get();
      for (size_t i = 0; i < count && exact[rank]; ++i) {
        exact[rank] = got[i] == 2 * mine[i];
        if (!exact[rank])
          std::printf("  rank %d: element %zu is %g, expected %g\n", rank, i, double(got[i]),
                      2.0 * mine[i]);
      }
    }
    if (codec) sqzCodecDestroy(codec);
  });
  EXPECT_TRUE(run.initErrors.empty()) << run.initErrors[0];
  const Counters progress = countersOfThreadsNamed("sqz-progress") - progress0;
  // Both ranks' calls, less the test's own stream synchronizations.
  const uint64_t calls = kRanks * kCalls;
  const Counted k{double(total.launches) / calls, double(total.hostWaits - calls) / calls,
                  double(callerCopies) / calls, double(callerStreamOps) / calls,
                  double(progress.apiCalls), exact[0] && exact[1]};
  std::printf("  %-30s %8zu floats, staging %-4s: %4.1f launches, %4.1f host waits, %5.1f copies, "
              "%5.1f stream operations a call; progress threads: %.0f CUDA calls\n",
              *spec ? spec : "(plain)", count, staging ? staging : "16M", k.launches, k.waits,
              k.copies, k.streamOps, k.progressCalls);
  return k;
}

class StagedCallCounts : public ::testing::TestWithParam<const char*> {};

TEST_P(StagedCallCounts, ACallIsTwoCopiesAndNoLaunchOrWaitAtEverySize) {
  const char* spec = GetParam();
  for (size_t count : {size_t(1) << 16, size_t(1) << 20}) {
    const Counted k = countCalls(spec, count);
    EXPECT_EQ(k.launches, 0) << spec << ": a device call launched a kernel";
    EXPECT_EQ(k.waits, 0) << spec << ": a device call made a host thread wait for the device";
    EXPECT_EQ(k.copies, 2) << spec << ": one copy in and one out, whatever the schedule's pieces";
    // Word operations (the copies are counted apart): in, wait for the earlier calls, wait for
    // the half, write; out, wait, write.
    EXPECT_LE(k.streamOps, 5) << spec;
    EXPECT_EQ(k.progressCalls, 0) << spec << ": a progress thread made a CUDA call";
  }
}

INSTANTIATE_TEST_SUITE_P(Stand, StagedCallCounts,
                         ::testing::Values("", "int8:auto_dense=0",
                                           "topk:ratio=0.01,auto_dense=0",
                                           "powersgd:rank=4,auto_dense=0"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = *info.param ? info.param : "plain";
                           for (char& ch : name)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

// A call larger than the staging moves in pieces of half of it, a copy and two word operations
// each way and piece, and is still exact.
TEST(CallCounts, ACallLargerThanTheStagingMovesInPiecesAndIsExact) {
  const Counted k = countCalls("", size_t(1) << 18, "64K");  // 1 MiB through 32 KiB halves
  EXPECT_TRUE(k.exact) << "the sum through staging pieces differs from 2x the input";
  EXPECT_EQ(k.copies, 64) << "32 pieces in, 32 out";
  EXPECT_LE(k.streamOps, 64 * 2 + 1);
  EXPECT_EQ(k.launches, 0);
  EXPECT_EQ(k.progressCalls, 0);
}

TEST(CallCounts, TopkSelectionHostWaits) {
  Stream stream;
  cudaStream_t s = stream.s;
  DeviceFloats x(1 << 20, s);
  uint32_t* idx = nullptr;
  const size_t k = 1 << 10;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&idx), k * sizeof(uint32_t)), cudaSuccess);
  for (bool sampled : {false, true}) {
    squeeze::device::gpuSelectTopk(x.ptr, x.n, k, sampled, idx, s);  // scratch
    const Counters t0 = threadCounters();
    const size_t m = squeeze::device::gpuSelectTopk(x.ptr, x.n, k, sampled, idx, s);
    const Counters t = threadCounters() - t0;
    std::printf("  top-k of %zu at k = %zu, %s: %llu launches, %llu host waits\n", x.n, k,
                sampled ? "sampled" : "exact", (unsigned long long)t.launches,
                (unsigned long long)t.hostWaits);
    EXPECT_EQ(m, k);
    EXPECT_EQ(t.hostWaits, 0u) << "a top-k selection waits for nothing: its count is k";
  }
  cudaStreamSynchronize(s);
  cudaFree(idx);
}

}  // namespace
}  // namespace sqztest
