// What one call on device buffers asks of the GPU, counted by the CUDA stand-in
// (standin::Counters: kernel launches, copies, host waits): the device path's cost in launches and
// round trips, which a GPU's timings hide among its noise and a machine without one cannot time
// at all. The figures are ceilings recorded from the code as it is: a change that makes a call
// launch or wait more fails here, and one that makes it less lowers them. The stand-in counts
// what each gpu* entry point's host side does (device/standin/kernels.cc mirrors
// device/cuda/*.cu, its launches included: a CUB algorithm counts as one).
//   - a one-rank all-reduce without a codec is one copy on the caller's stream (none in place):
//     no launch, no host wait, nothing for the progress thread;
//   - a 2-rank compressed all-reduce over cuda_ipc, per rank and call, at two sizes, one piece a
//     step and 16, for the chunk codecs and the selections, and PowerSGD (its norms added on the
//     device: the two waits left are its own): the launches are the same at both sizes, since a
//     step's pieces run each of the codec's kernels once (Context::beginBatch);
//   - a top-k selection, either route, waits for nothing: its count is k, known before it runs.
// Stand-in builds only (scripts/standin.sh); a GPU has no such counters.
#include <cuda_runtime_api.h>

#include <barrier>
#include <cstdio>
#include <string>
#include <vector>

#include "../collective/test_util.h"
#include "device/sparse.h"
#include "device/standin/standin.h"

namespace sqztest {
namespace {

using squeeze::standin::Counters;
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
  opts.transports = "cuda_ipc";
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

// Ceilings per rank and call (launches, host waits) in pieces of 128 KiB, 2 ranks, ring, over
// cuda_ipc, at 64K floats (one piece a step) and at 1M floats (16 pieces a step): the same
// ceilings, since a step's pieces run each kernel once (Context::beginBatch).
struct CountCase {
  const char* spec;
  uint64_t maxLaunches;
  uint64_t maxHostWaits;
};

struct Counted {
  double launches, waits, copies;
};

// Per rank and call, for `count` floats through `spec`.
Counted countCalls(const char* spec, size_t count) {
  constexpr int kRanks = 2, kWarmCalls = 2, kCalls = 3;
  ScopedEnv env;
  env.set("SQZ_ALGO", "ring");
  env.set("SQZ_TUNER_CALIBRATE", "0");
  RunOptions opts;
  opts.transports = "cuda_ipc";
  opts.chunkBytes = 128 << 10;
  std::barrier sync(kRanks);
  Counters before, total;
  RunResult run = runRanks(kRanks, opts, [&](sqzComm_t& comm, int rank) {
    Stream stream;
    cudaStream_t s = stream.s;
    DeviceFloats in(count, s), out(count, s);
    sqzCodec_t codec = nullptr;
    ASSERT_EQ(sqzCodecCreate(&codec, spec, count, sqzFloat32, comm), sqzSuccess)
        << sqzGetLastError(comm);
    auto call = [&] {
      EXPECT_EQ(sqzAllReduceCompressed(in.ptr, out.ptr, count, sqzFloat32, sqzSum, codec, comm, s),
                sqzSuccess)
          << sqzGetLastError(comm);
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    };
    for (int i = 0; i < kWarmCalls; ++i) call();  // scratch grows on the first calls
    sync.arrive_and_wait();
    if (rank == 0) before = processCounters();
    sync.arrive_and_wait();  // before either rank's first counted call enqueues anything
    for (int i = 0; i < kCalls; ++i) call();
    sync.arrive_and_wait();
    if (rank == 0) total = processCounters() - before;
    sync.arrive_and_wait();
    sqzCodecDestroy(codec);
  });
  EXPECT_TRUE(run.initErrors.empty()) << run.initErrors[0];
  // Both ranks' calls, less the test's own stream synchronizations.
  const uint64_t calls = kRanks * kCalls;
  const Counted c{double(total.launches) / calls, double(total.hostWaits - calls) / calls,
                  double(total.copies) / calls};
  std::printf("  %-40s %8zu floats: %6.1f launches, %5.1f host waits, %6.1f copies a call\n", spec,
              count, c.launches, c.waits, c.copies);
  return c;
}

class CompressedCallCounts : public ::testing::TestWithParam<CountCase> {};

TEST_P(CompressedCallCounts, AtMostTheRecordedLaunchesAndHostWaitsAtEverySize) {
  const CountCase c = GetParam();
  const Counted one = countCalls(c.spec, 1 << 16), many = countCalls(c.spec, 1 << 20);
  for (const Counted& k : {one, many}) {
    EXPECT_LE(k.launches, double(c.maxLaunches)) << c.spec;
    EXPECT_LE(k.waits, double(c.maxHostWaits)) << c.spec;
  }
  EXPECT_LE(many.launches, one.launches)
      << c.spec << ": a call's launches grow with its pieces (16 a step at 1M floats, 1 at 64K)";
}

// Before batching (d4acb5c) the 1M-float calls took 81 (int8), 113 (fp16), 305 (topk, either
// route) and 306 (dgc) launches, one set of kernels per piece, and 146 (int8) or 242 (the
// selections) copies; now 66, the transfers' own: a batch's payload headers and check words
// are one kernel each.
INSTANTIATE_TEST_SUITE_P(
    Stand, CompressedCallCounts,
    ::testing::Values(CountCase{"int8:auto_dense=0", 11, 1}, CountCase{"fp16:auto_dense=0", 8, 1},
                      CountCase{"topk:ratio=0.01,auto_dense=0", 28, 1},
                      CountCase{"topk:ratio=0.01,sample=1,auto_dense=0", 28, 1},
                      CountCase{"dgc:ratio=0.01,auto_dense=0", 29, 1},
                      CountCase{"powersgd:rank=4,auto_dense=0", 13, 2}),
    [](const ::testing::TestParamInfo<CountCase>& info) {
      std::string name = info.param.spec;
      for (char& ch : name)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return name;
    });

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
