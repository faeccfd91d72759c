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
//   - a top-k selection, either route, waits for nothing: its count is k, known before it runs;
//   - a compressed call on the caller's stream (ranks on one host) is a stream program alone,
//     with the pay-off guard on too, and none waits for the whole device, its first included;
//   - a codec's per-piece calls on a CUDA context (encode with feedback, combine, decode): their
//     launches, waits and copies to the host under ceilings, and no pageable copy, slot
//     fallback, allocation, or stream or event made (device::slotFallbacks counts the library's
//     side).
// Stand-in builds only (scripts/standin.sh); a GPU has no such counters.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "../collective/test_util.h"
#include "compress/codecs.h"
#include "compress/handle.h"
#include "device/context.h"
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

// A compressed all-reduce on one rank exchanges nothing: where its codec may run on the stream
// between ranks, it is the codec's own passes on the caller's stream (x = g + e, the encode with
// feedback with its norms summed on the device, the decode of its payload, the method's finish:
// DGC's masking; PowerSGD's products);
// the dense method is sqzAllReduce's one copy. After the first call,
// nothing goes to the host, no thread waits, and nothing is made, allocated or staged through a
// fallback; the guard's calls included (auto_dense=1, the default: its timing events).
TEST(CallCounts, ACompressedCallOnOneRankIsItsCodecsPassesOnTheStream) {
  struct Case {
    const char* spec;
    double launches;  // at most, a call
  };
  // The guard's: it sends calls dense where compressing saves nothing (one rank: always).
  const Case cases[] = {{"dense", 0},           {"int8:auto_dense=0", 4},
                        {"int8", 4},            {"topk:auto_dense=0", 9},
                        {"dgc:clip=1,auto_dense=0", 12}, {"powersgd:auto_dense=0", 5}};
  constexpr size_t kCount = size_t(1) << 16;
  constexpr int kCalls = 3;
  RunOptions opts;
  opts.transports = "shm";
  RunResult run = runRanks(1, opts, [&](sqzComm_t& comm, int) {
    Stream stream;
    cudaStream_t s = stream.s;
    DeviceFloats in(kCount, s), out(kCount, s);
    for (const auto& [spec, launches] : cases) {
      sqzCodec_t codec = nullptr;
      ASSERT_EQ(sqzCodecCreate(&codec, spec, kCount, sqzFloat32, comm), sqzSuccess)
          << sqzGetLastError(comm);
      auto call = [&] {
        EXPECT_EQ(sqzAllReduceCompressed(in.ptr, out.ptr, kCount, sqzFloat32, sqzSum, codec,
                                         comm, s), sqzSuccess) << sqzGetLastError(comm);
      };
      // Warm-up as counted: the events' pools grow to the calls in flight.
      for (int round = 0; round < 2; ++round) {
        for (int i = 0; i < kCalls; ++i) call();
        EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      }
      const uint64_t fallbacks = squeeze::device::slotFallbacks();
      const Counters p0 = processCounters();
      for (int i = 0; i < kCalls; ++i) call();
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      const Counters p = processCounters() - p0;
      const char* algo = "";
      sqzCommGetLastAlgorithm(comm, &algo);
      EXPECT_EQ(std::string(algo), "stream") << spec;
      std::printf("  one rank, %-26s %4.1f launches, %4.1f copies a call\n", spec,
                  double(p.launches) / kCalls, double(p.copies) / kCalls);
      EXPECT_LE(double(p.launches) / kCalls, launches) << spec;
      EXPECT_EQ(p.hostWaits, 1u) << spec << ": only the test's synchronize";
      EXPECT_EQ(p.deviceToHost, 0u) << spec << ": a call copied to the host";
      EXPECT_EQ(p.pageable, 0u) << spec;
      EXPECT_EQ(p.streamCreations + p.eventCreations, 0u) << spec;
      EXPECT_EQ(p.allocations, 0u) << spec;
      EXPECT_EQ(squeeze::device::slotFallbacks(), fallbacks) << spec;
      sqzCodecDestroy(codec);
    }
  });
  EXPECT_TRUE(run.initErrors.empty()) << run.initErrors[0];
  // SQZ_DEVICE_DIRECT_BYTES=0 sends them through the host, as every device call but a copy.
  ScopedEnv env;
  env.set("SQZ_DEVICE_DIRECT_BYTES", "0");
  run = runRanks(1, opts, [&](sqzComm_t& comm, int) {
    Stream stream;
    DeviceFloats in(kCount, stream.s), out(kCount, stream.s);
    sqzCodec_t codec = nullptr;
    ASSERT_EQ(sqzCodecCreate(&codec, "int8:auto_dense=0", kCount, sqzFloat32, comm), sqzSuccess);
    const Counters p0 = processCounters();
    EXPECT_EQ(sqzAllReduceCompressed(in.ptr, out.ptr, kCount, sqzFloat32, sqzSum, codec, comm,
                                     stream.s), sqzSuccess) << sqzGetLastError(comm);
    EXPECT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
    EXPECT_GT((processCounters() - p0).deviceToHost, 0u) << "not staged";
    const char* algo = "";
    sqzCommGetLastAlgorithm(comm, &algo);
    EXPECT_NE(std::string(algo), "stream");
    sqzCodecDestroy(codec);
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
  double toHost, pageable, pointerQueries, made, allocations;  // per call, both ranks' threads
};

// Per rank and call, for `count` floats through `spec` ("" for a plain all-reduce).
// `algo` "direct": a dense call runs as a stream collective, whose rounds are `staging` bytes
// (SQZ_DEVICE_DIRECT_BYTES) instead of the staging's halves. `exchange`: the call is a group in
// which each rank sends its input to the other and receives the other's into its output.
// `batch`: the counted calls are enqueued that many back to back before the stream is waited for.
Counted countCalls(const char* spec, size_t count, const char* staging = nullptr,
                   const char* algo = "ring", bool exchange = false, int batch = 1) {
  constexpr int kRanks = 2, kWarmCalls = 2;
  const int kCalls = std::max(3, batch);
  ScopedEnv env;
  const bool direct = std::string(algo) == "direct";
  env.set("SQZ_ALGO", algo);
  env.set("SQZ_TUNER_CALIBRATE", "0");
  if (staging) env.set(direct ? "SQZ_DEVICE_DIRECT_BYTES" : "SQZ_DEVICE_STAGING_BYTES", staging);
  RunOptions opts;
  opts.transports = "shm";
  opts.chunkBytes = 128 << 10;
  std::barrier sync(kRanks);
  Counters before, total;
  uint64_t callerCopies = 0, callerStreamOps = 0;  // both ranks' enqueues (atomics below)
  std::atomic<uint64_t> testWaits{0};                // the counted calls' synchronizations
  std::mutex callerMu;
  const Counters progress0 = countersOfThreadsNamed("sqz-progress");
  const Counters watch0 = countersOfThreadsNamed("sqz-stream-watch");
  bool exact[kRanks] = {true, true};
  RunResult run = runRanks(kRanks, opts, [&](sqzComm_t& comm, int rank) {
    Stream stream;
    cudaStream_t s = stream.s;
    DeviceFloats in(count, s), out(count, s);
    const std::vector<float> mine = in.get();
    sqzCodec_t codec = nullptr;
    if (*spec) {
      ASSERT_EQ(sqzCodecCreate(&codec, spec, count, sqzFloat32, comm), sqzSuccess)
          << sqzGetLastError(comm);
    }
    auto enqueue = [&] {
      if (exchange) {
        sqzGroupStart();
        EXPECT_EQ(sqzSend(in.ptr, count, sqzFloat32, 1 - rank, comm, s), sqzSuccess);
        EXPECT_EQ(sqzRecv(out.ptr, count, sqzFloat32, 1 - rank, comm, s), sqzSuccess);
        EXPECT_EQ(sqzGroupEnd(), sqzSuccess) << sqzGetLastError(comm);
      } else if (codec)
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
      if ((i + 1) % batch == 0 || i + 1 == kCalls) {
        EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        ++testWaits;
      }
    }
    sync.arrive_and_wait();
    if (rank == 0) total = processCounters() - before;
    sync.arrive_and_wait();
    // Both ranks' inputs are the same pattern: a plain sum is twice it, exactly (an exchange:
    // it).
    if (!codec) {
      const std::vector<float> got = out.get();
      const float times = exchange ? 1 : 2;
      for (size_t i = 0; i < count && exact[rank]; ++i) {
        exact[rank] = got[i] == times * mine[i];
        if (!exact[rank])
          std::printf("  rank %d: element %zu is %g, expected %g\n", rank, i, double(got[i]),
                      double(times * mine[i]));
      }
    }
    if (codec) sqzCodecDestroy(codec);
  });
  EXPECT_TRUE(run.initErrors.empty()) << run.initErrors[0];
  // The library's own threads: the progress threads and the stream collectives' watchers.
  const uint64_t libraryCalls = (countersOfThreadsNamed("sqz-progress") - progress0).apiCalls +
                                (countersOfThreadsNamed("sqz-stream-watch") - watch0).apiCalls;
  // Both ranks' calls, less the test's own stream synchronizations.
  const uint64_t calls = kRanks * kCalls;
  const Counted k{double(total.launches) / calls, double(total.hostWaits - testWaits) / calls,
                  double(callerCopies) / calls, double(callerStreamOps) / calls,
                  double(libraryCalls), exact[0] && exact[1],
                  double(total.deviceToHost) / calls, double(total.pageable) / calls,
                  double(total.pointerQueries) / calls,
                  double(total.streamCreations + total.eventCreations) / calls,
                  double(total.allocations) / calls};
  std::printf("  %-30s %8zu floats, staging %-4s: %4.1f launches, %4.1f host waits, %5.1f copies "
              "(%.1f to the host, %.1f pageable), %5.1f stream operations, %.1f pointer queries a "
              "call; progress threads: %.0f CUDA calls\n",
              exchange ? "(send and receive)" : *spec ? spec : direct ? "(plain, stream collective)"
                                                                       : "(plain)", count,
              staging ? staging : direct ? "8M" : "16M", k.launches, k.waits,
              k.copies, k.toHost, k.pageable, k.streamOps, k.pointerQueries, k.progressCalls);
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
    // The input's copy into pinned staging is the call's one copy to the host (the arithmetic
    // runs there: device/call_queue.h); nothing pageable, nothing made or allocated.
    EXPECT_EQ(k.toHost, 1) << spec;
    EXPECT_EQ(k.pageable, 0) << spec;
    EXPECT_EQ(k.made, 0) << spec << ": a call made a stream or an event";
    EXPECT_EQ(k.allocations, 0) << spec << ": a call allocated";
    EXPECT_LE(k.pointerQueries, 4) << spec << ": where the call's two buffers live, asked once";
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

// Ranks on one host with a GPU each (here: threads sharing one): a dense all-reduce is a stream
// collective (device/stream_collectives.h), a program on the caller's stream alone: kernels
// and word operations, and nothing copied to the host, no host wait, no CUDA call on any thread
// of the library's. A round's launches: the gate (one warp: may this stream still write what its
// peers read?), the copy into the window under it, the published words under it (one warp), the
// check of the ranks' call words (one warp), then below 512 KiB one shot: one reduction of every
// rank's input; from it two: the reduction of this rank's part, the reduced words, and a copy
// of each part into the output (the copy in is two then: around this rank's part). In rounds of
// the window. Where the copies in are at most 32 KiB each, the gate, they and the words are one
// launch, and where the first reduction is, the check and it are one: a small call is two.
TEST(CallCounts, ADenseCallOnOneHostIsAStreamProgramAlone) {
  struct Expect {
    size_t count;
    const char* window;
    double launches, copies, streamOps;
  };
  // Stream operations: a wait for the calls before (on any stream); then a round's: wait for the
  // peer's read of round t - 2, wait for the peer's published, (two shots: wait for the peer's
  // reduced,) consumed to the peer, done.
  // 64K floats in a 64K window: 16 rounds of 64 KiB, two shots of 32 KiB parts (2 + 3 each).
  const Expect cases[] = {{256, nullptr, 2, 0, 5},
                          {size_t(1) << 16, nullptr, 5, 0, 5},
                          {size_t(1) << 20, nullptr, 8, 0, 6},
                          {size_t(1) << 18, "64K", 16 * 5, 0, 1 + 16 * 5}};
  for (const Expect& e : cases) {
    const Counted k = countCalls("", e.count, e.window, "direct");
    EXPECT_TRUE(k.exact) << e.count << ": the stream collective's sum differs from 2x the input";
    EXPECT_EQ(k.launches, e.launches) << e.count;
    EXPECT_EQ(k.waits, 0) << e.count << ": a device call made a host thread wait for the device";
    EXPECT_EQ(k.copies, e.copies) << e.count << ": a copy into the window is a kernel (gated)";
    EXPECT_EQ(k.toHost, 0) << e.count << ": a stream collective copied to the host";
    EXPECT_EQ(k.pageable, 0);
    EXPECT_LE(k.streamOps, e.streamOps) << e.count;
    EXPECT_EQ(k.progressCalls, 0) << e.count << ": a library thread made a CUDA call";
    EXPECT_EQ(k.made, 0);
    EXPECT_EQ(k.allocations, 0);
    EXPECT_LE(k.pointerQueries, 4);
  }
}

// A compressed all-reduce of ranks on one host whose codec's payload has a fixed size
// (CodecHandle::enqueueOnStream: the casts, the quantizers, top-k, random-k and DGC) is a stream
// program alone as well: prepare, the codec's encode with feedback, a stream all-gather of the
// payloads, and each rank's payload decoded and added in rank order, on the caller's stream; so is
// PowerSGD (its products, and two stream all-reduces). Nothing goes to the host, no thread waits,
// no library thread makes a CUDA call, nothing is made, allocated or staged through a fallback. So
// with the pay-off guard on (auto_dense=1: the calls counted are its third to fifth, compressed,
// dense, then its choice; each adds GPU events' stamps, read at a later call, and an exchange of
// figures on host memory), and for a tensor under min_bytes (16 KiB), sent dense every call.
TEST(CallCounts, ACompressedCallOnOneHostIsAStreamProgramAlone) {
  struct Case {
    const char* spec;
    size_t count;
    double launches;  // at most, a call
  };
  // Top-k's selection is a radix select of several passes over the tensor.
  const Case cases[] = {{"int8:auto_dense=0", 1 << 12, 16},  {"int8:auto_dense=0", 1 << 20, 16},
                        {"fp16:auto_dense=0", 1 << 12, 16},  {"fp16:auto_dense=0", 1 << 20, 16},
                        {"int8:auto_dense=1", 1 << 12, 16},  {"int8:auto_dense=1", 1 << 20, 16},
                        {"int8", 256, 16},                   {"topk:auto_dense=0", 1 << 12, 28},
                        {"topk:auto_dense=0", 1 << 20, 28},  {"dgc:auto_dense=0", 1 << 20, 32},
                        {"randk:auto_dense=0", 1 << 20, 16},
                        {"powersgd:auto_dense=0", 1 << 20, 16}};
  for (const auto& [spec, count, launches] : cases) {
    const uint64_t fallbacks = squeeze::device::slotFallbacks();
    const Counted k = countCalls(spec, count, nullptr, "");
    EXPECT_EQ(squeeze::device::slotFallbacks(), fallbacks) << spec << " " << count;
    EXPECT_EQ(k.waits, 0) << spec << " " << count << ": a host thread waited for the device";
    EXPECT_EQ(k.toHost, 0) << spec << " " << count << ": a compressed call copied to the host";
    EXPECT_EQ(k.pageable, 0) << spec << " " << count;
    EXPECT_EQ(k.progressCalls, 0) << spec << " " << count;
    EXPECT_EQ(k.made, 0) << spec << " " << count << ": a call made a stream or an event";
    EXPECT_EQ(k.allocations, 0) << spec << " " << count;
    EXPECT_LE(k.launches, launches) << spec << " " << count;
  }
}

// A training step enqueues its buckets' calls back to back and waits once: the events that mark
// and time those calls come from pools made with the communicator (64 of each), not one per call
// in flight. With the guard on, each call it times adds its stamps too.
TEST(CallCounts, CallsEnqueuedBackToBackMakeNoEvents) {
  for (const char* spec : {"int8:auto_dense=1", "topk:auto_dense=0"}) {
    const Counted k = countCalls(spec, 1 << 12, nullptr, "", false, 24);
    EXPECT_EQ(k.waits, 0) << spec << ": a host thread waited for the device";
    EXPECT_EQ(k.made, 0) << spec << ": 24 calls in flight made a stream or an event";
    EXPECT_EQ(k.allocations, 0) << spec;
  }
}

// Nothing in a compressed call on the caller's stream waits for the whole device, its first call
// included (a rank's stream may be held by its call while another rank's thread makes its own):
// the selections of more than one block's chunk use their context's scratch, made at init, not
// the calling thread's, which its first use would make with cudaMalloc and cudaHostAlloc; so do
// PowerSGD's products (cuBLAS's handle, cublasCreate). Top-k by either route, DGC (sampled) and
// PowerSGD, at 256K floats.
TEST(CallCounts, NoCompressedCallOnTheStreamWaitsForTheDevice) {
  constexpr int kRanks = 2, kCalls = 2;
  constexpr size_t kCount = size_t(1) << 18;
  for (const char* spec : {"topk:auto_dense=0", "topk:sample=1,auto_dense=0", "dgc:auto_dense=0",
                           "dgc:clip=1,auto_dense=0", "powersgd:auto_dense=0"}) {
    ScopedEnv env;
    env.unset("SQZ_ALGO");
    RunOptions opts;
    opts.transports = "shm";
    std::barrier sync(kRanks);
    Counters before, after;
    RunResult run = runRanks(kRanks, opts, [&](sqzComm_t& comm, int rank) {
      Stream stream;
      DeviceFloats in(kCount, stream.s), out(kCount, stream.s);
      sqzCodec_t codec = nullptr;
      ASSERT_EQ(sqzCodecCreate(&codec, spec, kCount, sqzFloat32, comm), sqzSuccess)
          << sqzGetLastError(comm);
      sync.arrive_and_wait();
      if (rank == 0) before = processCounters();
      sync.arrive_and_wait();
      for (int i = 0; i < kCalls; ++i) {
        EXPECT_EQ(sqzAllReduceCompressed(in.ptr, out.ptr, kCount, sqzFloat32, sqzSum, codec, comm,
                                         stream.s), sqzSuccess) << sqzGetLastError(comm);
        EXPECT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
      }
      const char* algo = "";
      sqzCommGetLastAlgorithm(comm, &algo);
      EXPECT_EQ(std::string(algo), "stream") << spec;
      sync.arrive_and_wait();
      if (rank == 0) after = processCounters();
      sync.arrive_and_wait();
      sqzCodecDestroy(codec);
    });
    EXPECT_TRUE(run.initErrors.empty()) << run.initErrors[0];
    const Counters k = after - before;
    EXPECT_EQ(k.implicitSyncs, 0u) << spec << ": a call waited for the whole device";
    // PowerSGD's first call uploads Q, drawn on the host, from pageable memory: CUDA may wait
    // for the rank's own stream there (never the device), once per codec.
    const bool uploadsQ = std::string(spec).rfind("powersgd", 0) == 0;
    EXPECT_EQ(k.hostWaits, uint64_t(kRanks * kCalls + (uploadsQ ? kRanks : 0)))
        << spec << ": only the test's synchronizes";
    EXPECT_EQ(k.pageable, uint64_t(uploadsQ ? kRanks : 0)) << spec;
  }
}

// A group of a send and a receive between ranks on one host is a stream program alone too: per
// chunk of a message, the gate, the copy into the slot and the message's words and sent under it
// (three launches), then the check of the peer's words and the copy out of its slot (two); a
// chunk of at most 32 KiB in two launches (those three as one, those two as one); word
// operations; nothing to the host, no wait, no CUDA call on a library thread.
TEST(CallCounts, ASendAndAReceiveOnOneHostAreAStreamProgramAlone) {
  struct Expect {
    size_t count;
    const char* window;
    double chunks, launchesEach;
  };
  // 64K floats in one chunk (an 8M window's slots are 4M at 2 ranks); 1 MiB in 32 KiB chunks.
  const Expect cases[] = {
      {256, nullptr, 1, 2}, {size_t(1) << 16, nullptr, 1, 5}, {size_t(1) << 18, "64K", 32, 2}};
  for (const Expect& e : cases) {
    const Counted k = countCalls("", e.count, e.window, "direct", true);
    EXPECT_TRUE(k.exact) << e.count << ": what a rank received is not what the other sent";
    EXPECT_EQ(k.launches, e.launchesEach * e.chunks)
        << e.count << ": gate, copy in, words; check, copy out";
    EXPECT_EQ(k.copies, 0) << e.count << ": a copy into the slot is a kernel (gated)";
    EXPECT_EQ(k.waits, 0) << e.count << ": a device call made a host thread wait for the device";
    EXPECT_EQ(k.toHost, 0) << e.count << ": a send or a receive copied to the host";
    EXPECT_EQ(k.pageable, 0);
    // A wait for the groups before and the group's start; a chunk's: the send's wait for the
    // slot; the receive's wait for sent and taken; then done.
    EXPECT_LE(k.streamOps, 2 + 3 * e.chunks + 1) << e.count;
    EXPECT_EQ(k.progressCalls, 0) << e.count << ": a library thread made a CUDA call";
    EXPECT_EQ(k.made, 0);
    EXPECT_EQ(k.allocations, 0);
    EXPECT_LE(k.pointerQueries, 4);
  }
}

// A call larger than the staging moves in pieces of half of it, a copy and two word operations
// each way and piece, and is still exact.
TEST(CallCounts, ACallLargerThanTheStagingMovesInPiecesAndIsExact) {
  const Counted k = countCalls("", size_t(1) << 18, "64K");  // 1 MiB through 32 KiB halves
  EXPECT_TRUE(k.exact) << "the sum through staging pieces differs from 2x the input";
  EXPECT_EQ(k.copies, 64) << "32 pieces in, 32 out";
  EXPECT_EQ(k.toHost, 32) << "each piece in";
  EXPECT_EQ(k.pageable, 0);
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

// ---- a codec's per-piece calls on a CUDA context ----------------------------------------------
// What the executor's per-piece calls (Codec::encodeFeedback, combine, decode) ask of the GPU, each
// counted alone on a context whose slots the wait that ends a call has recycled, at 1M floats.
// Every one: no pageable copy, no slot fallback, no allocation, no stream or event made, at most
// one pointer query; combine and decode wait for nothing and copy nothing to the host (a
// payload's checks are written into pinned slots by kernels, compared when the host sees the
// call's end); the launches, host waits and copies to the host at most the ceilings below,
// recorded from the code as it is (a change that adds one fails here). The copies to the host
// that are left: a threshold selection's count (its size is the data's), and the norms the wait
// that ends a call brings back, in one copy.

struct OpCaps {
  const char* spec;
  uint64_t encodeLaunches, encodeWaits, encodeToHost;
  uint64_t combineLaunches, decodeLaunches;
};

constexpr OpCaps kOpCaps[] = {
    {"dense", 2, 0, 0, 1, 0},     {"fp16", 2, 0, 0, 1, 1},
    {"bf16", 2, 0, 0, 1, 1},      {"int8", 1, 0, 0, 2, 2},
    {"qsgd", 1, 0, 0, 2, 2},      {"onebit", 1, 0, 0, 2, 2},
    {"terngrad", 1, 0, 0, 2, 2},  {"topk", 13, 0, 0, 3, 4},
    {"randk", 4, 0, 0, 2, 3},     {"threshold:threshold=1.5", 5, 2, 1, 3, 4},
    {"dgc", 18, 0, 0, 3, 4},
};

// The counts of one call of `body` on this thread, and the slot fallbacks it caused.
struct OpCount {
  Counters c;
  uint64_t fallbacks;
};
template <class Fn>
OpCount countOp(Fn body) {
  const Counters t0 = threadCounters();
  const uint64_t f0 = squeeze::device::slotFallbacks();
  body();
  return {threadCounters() - t0, squeeze::device::slotFallbacks() - f0};
}

void expectLean(const OpCount& k, const char* op) {
  EXPECT_EQ(k.c.pageable, 0u) << op << ": a copy from or into pageable memory";
  EXPECT_EQ(k.fallbacks, 0u) << op << ": a pinned slot was missing (device::slotFallbacks)";
  EXPECT_EQ(k.c.allocations, 0u) << op << ": allocated memory";
  EXPECT_EQ(k.c.streamCreations + k.c.eventCreations, 0u) << op << ": made a stream or event";
  EXPECT_LE(k.c.pointerQueries, 1u) << op;
}

// A chunk codec of `spec` for n floats on a prepared CUDA context over a stream of its own, and a
// device payload buffer of the codec's bound.
struct CodecOnContext {
  CodecOnContext(const char* spec, size_t n) {
    int device = 0;
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    ctx = squeeze::device::makeCudaContext(device, stream.s);
    ctx->prepareThread();
    handle = squeeze::createCodecHandle(squeeze::CodecSpec::parse(spec), n,
                                        squeeze::DataType::kFloat32);
    codec = handle->chunkCodec();
    at.ctx = ctx.get();
    EXPECT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&payload),
                              codec->maxEncodedBytes(n, squeeze::DataType::kFloat32), stream.s),
              cudaSuccess);
  }
  ~CodecOnContext() {
    cudaFreeAsync(payload, stream.s);
    cudaStreamSynchronize(stream.s);
  }
  Stream stream;  // destroyed last
  std::unique_ptr<squeeze::device::Context> ctx;
  std::unique_ptr<squeeze::CodecHandle> handle;
  squeeze::Codec* codec = nullptr;
  squeeze::ChunkInfo at;
  char* payload = nullptr;
};

class CodecOpCounts : public ::testing::TestWithParam<OpCaps> {};

TEST_P(CodecOpCounts, EachPieceCallStaysUnderItsCeilings) {
  const OpCaps& cap = GetParam();
  using squeeze::DataType;
  constexpr size_t n = size_t(1) << 20;
  CodecOnContext on(cap.spec, n);
  squeeze::Codec& codec = *on.codec;
  squeeze::device::Context* ctx = on.ctx.get();
  const squeeze::ChunkInfo& at = on.at;
  char* payload = on.payload;
  DeviceFloats x(n, on.stream.s), residual(n, on.stream.s), out(n, on.stream.s);
  squeeze::EncodeNorms norms;
  size_t bytes = 0;
  auto encode = [&] {
    bytes = codec.encodeFeedback(x.ptr, n, DataType::kFloat32, at, payload, residual.ptr, &norms);
  };
  auto combine = [&] {
    codec.combine(out.ptr, x.ptr, payload, bytes, n, DataType::kFloat32, squeeze::RedOp::kSum, at);
  };
  auto decode = [&] { codec.decode(payload, bytes, n, DataType::kFloat32, at, out.ptr); };
  for (const std::function<void()>& op : {std::function<void()>(encode), std::function<void()>(combine),
                                           std::function<void()>(decode)}) {
    op();  // warm: scratch made, kernels loaded
    ctx->wait("warm-up");
  }
  const OpCount e = countOp(encode), w = countOp([&] { ctx->wait("the encode's end"); });
  const OpCount c = countOp(combine);
  ctx->wait("the combine's end");
  const OpCount d = countOp(decode);
  ctx->wait("the decode's end");
  std::printf("  %-24s encodeFB: %s\n  %-24s wait: %s\n  %-24s combine: %s\n  %-24s decode: %s\n",
              cap.spec, squeeze::standin::perCall(e.c, 1).c_str(), "",
              squeeze::standin::perCall(w.c, 1).c_str(), "",
              squeeze::standin::perCall(c.c, 1).c_str(), "",
              squeeze::standin::perCall(d.c, 1).c_str());
  expectLean(e, "encodeFeedback");
  expectLean(w, "the wait");
  expectLean(c, "combine");
  expectLean(d, "decode");
  EXPECT_LE(e.c.launches, cap.encodeLaunches);
  EXPECT_LE(e.c.hostWaits, cap.encodeWaits);
  EXPECT_LE(e.c.deviceToHost, cap.encodeToHost);
  EXPECT_EQ(w.c.hostWaits, 1u) << "the wait that ends a call";
  EXPECT_LE(w.c.deviceToHost, 1u) << "the wait brings the norms back in one copy";
  EXPECT_LE(c.c.launches, cap.combineLaunches);
  EXPECT_LE(d.c.launches, cap.decodeLaunches);
  for (const OpCount* k : {&c, &d}) {
    EXPECT_EQ(k->c.hostWaits, 0u) << "a combine or decode waited for the device";
    EXPECT_EQ(k->c.deviceToHost, 0u) << "a combine or decode copied to the host";
  }
}

INSTANTIATE_TEST_SUITE_P(Stand, CodecOpCounts, ::testing::ValuesIn(kOpCaps),
                         [](const ::testing::TestParamInfo<OpCaps>& info) {
                           std::string name = info.param.spec;
                           name = name.substr(0, name.find(':'));
                           return name;
                         });

// The counter the caps above read does count: combines whose header checks are never waited for
// run out of check slots (256 in flight), and the 257th falls back to reading its header at once
// (a wait, which recycles the slots for the next 256).
TEST(CodecOpCounts, ChecksNeverWaitedForFallBack) {
  using squeeze::DataType;
  constexpr size_t n = 4096;
  CodecOnContext on("int8", n);
  squeeze::Codec& codec = *on.codec;
  squeeze::device::Context* ctx = on.ctx.get();
  const squeeze::ChunkInfo& at = on.at;
  char* payload = on.payload;
  DeviceFloats x(n, on.stream.s), out(n, on.stream.s);
  const size_t bytes = codec.encode(x.ptr, n, DataType::kFloat32, at, payload);
  ctx->wait("the encode");
  const uint64_t f0 = squeeze::device::slotFallbacks();
  for (int i = 0; i < 300; ++i)
    codec.combine(out.ptr, x.ptr, payload, bytes, n, DataType::kFloat32, squeeze::RedOp::kSum, at);
  EXPECT_EQ(squeeze::device::slotFallbacks() - f0, 1u);
  ctx->wait("the combines");
  const uint64_t f1 = squeeze::device::slotFallbacks();
  codec.combine(out.ptr, x.ptr, payload, bytes, n, DataType::kFloat32, squeeze::RedOp::kSum, at);
  EXPECT_EQ(squeeze::device::slotFallbacks(), f1) << "the wait recycled the slots";
  ctx->wait("the last combine");
}

}  // namespace
}  // namespace sqztest
