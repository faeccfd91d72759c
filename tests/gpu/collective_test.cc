// Collectives on device buffers, ranks as threads sharing one GPU (the device tool's machines
// have one): the all-reduce of every datatype and op, and every other collective (float32 sum),
// over the default transports (shm between ranks of one host) and tcp at 1-4 ranks, each result
// compared byte for byte with the same call on host buffers (the CPU path, tested against exact
// values by tests/collective/). Also
// NCCL's stream semantics (the call returns before the stream reaches it) and the argument
// checks that need a GPU. main() is gpu_main.cc: without a GPU the binary exits 77 (skipped).
#include <cuda_runtime_api.h>

#include <barrier>
#include <chrono>
#include <cstring>
#include <thread>

#include "../collective/test_util.h"
#include "device/cuda/runtime.h"

namespace sqztest {
namespace {

// A device copy of a host vector, and back. Ranks are threads sharing one GPU, so a rank's
// memory work must not wait for the whole device while another rank's stream is held by its
// call, which waits for this rank (NCCL's rule holds for tests too): with a stream, memory is
// allocated and freed stream-ordered and copied on that (non-blocking) stream, which the rank then
// synchronizes alone. Without one (single-rank tests), plain cudaMalloc and cudaMemcpy.
struct DeviceBytes {
  void* ptr = nullptr;
  size_t bytes;
  cudaStream_t stream;
  explicit DeviceBytes(size_t n, cudaStream_t s = nullptr) : bytes(n), stream(s) {
    const size_t size = n ? n : 1;
    EXPECT_EQ(stream ? cudaMallocAsync(&ptr, size, stream) : cudaMalloc(&ptr, size), cudaSuccess);
  }
  ~DeviceBytes() {
    if (stream)
      cudaFreeAsync(ptr, stream);
    else
      cudaFree(ptr);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void upload(const std::vector<char>& h) {
    if (!stream) {
      EXPECT_EQ(cudaMemcpy(ptr, h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess);
      // From pageable memory cudaMemcpy may return before the copy lands (it is staged).
      EXPECT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
      return;
    }
    EXPECT_EQ(cudaMemcpyAsync(ptr, h.data(), h.size(), cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  std::vector<char> download() const {
    std::vector<char> h(bytes);
    if (!stream) {
      EXPECT_EQ(cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      return h;
    }
    EXPECT_EQ(cudaMemcpyAsync(h.data(), ptr, bytes, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return h;
  }
};

// A rank's stream: non-blocking, so the legacy default stream (another rank's synchronous
// cudaMemcpy) does not wait for it while it is held by a call. Made before a rank's buffers, so
// destroyed after them.
class RankStream {
 public:
  RankStream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), cudaSuccess); }
  ~RankStream() { cudaStreamDestroy(s_); }
  RankStream(const RankStream&) = delete;
  RankStream& operator=(const RankStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

std::vector<char> exactInput(sqzDataType_t t, sqzRedOp_t op, int rank, size_t count) {
  std::vector<char> v(count * typeSize(t));
  for (size_t i = 0; i < count; ++i) storeElement(t, v.data(), i, exactValue(t, op, rank, i));
  return v;
}

struct Params {
  const char* transports;
  int nranks;
};

class DeviceCollectives : public ::testing::TestWithParam<Params> {};

// All-reduce of every datatype and op, out of place and in place, at sizes around the chunk.
TEST_P(DeviceCollectives, AllReduceMatchesTheHostPathBitForBit) {
  const Params p = GetParam();
  RunOptions opts;
  opts.transports = p.transports;
  opts.chunkBytes = 8192;
  std::atomic<int> failures{0};
  RunResult run = runRanks(p.nranks, opts, [&](sqzComm_t& comm, int rank) {
    RankStream rankStream;
    cudaStream_t stream = rankStream.get();
    for (size_t count : {size_t(1), size_t(1000), size_t(65537)})
      for (sqzDataType_t t : kAllTypes)
        for (sqzRedOp_t op : kAllOps)
          for (bool inPlace : {false, true}) {
            const std::vector<char> in = exactInput(t, op, rank, count);
            std::vector<char> host(in.size());
            if (sqzAllReduce(in.data(), host.data(), count, t, op, comm, nullptr) != sqzSuccess) {
              ADD_FAILURE() << "host: " << sqzGetLastError(comm);
              ++failures;
              return;
            }
            DeviceBytes send(in.size(), stream), recv(in.size(), stream);
            send.upload(in);
            void* dst = inPlace ? send.ptr : recv.ptr;
            if (sqzAllReduce(send.ptr, dst, count, t, op, comm, stream) != sqzSuccess) {
              ADD_FAILURE() << "device: " << sqzGetLastError(comm);
              ++failures;
              return;
            }
            cudaStreamSynchronize(stream);
            const std::vector<char> dev = (inPlace ? send : recv).download();
            if (std::memcmp(dev.data(), host.data(), host.size()) != 0) {
              ADD_FAILURE() << "rank " << rank << ": " << typeName(t) << " " << opName(op)
                            << " count " << count << (inPlace ? " in place" : "")
                            << ": device result differs from the host path";
              ++failures;
            }
          }
    sqzResult_t async = sqzSuccess;
    sqzCommGetAsyncError(comm, &async);
    EXPECT_EQ(async, sqzSuccess) << sqzGetLastError(comm);
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
  EXPECT_EQ(failures.load(), 0);
}

// Broadcast, reduce, all-gather, reduce-scatter, all-to-all and a group of sends and receives
// around the ring, on device buffers, against the same calls on host buffers.
TEST_P(DeviceCollectives, OtherCollectivesMatchTheHostPath) {
  const Params p = GetParam();
  RunOptions opts;
  opts.transports = p.transports;
  opts.chunkBytes = 8192;
  RunResult run = runRanks(p.nranks, opts, [&](sqzComm_t& comm, int rank) {
    const int n = p.nranks;
    RankStream rankStream;
    cudaStream_t stream = rankStream.get();
    const size_t count = 4099;
    const sqzDataType_t t = sqzFloat32;
    const size_t esz = 4;
    const std::vector<char> in = exactInput(t, sqzSum, rank, count * n);
    using Call = std::function<sqzResult_t(const void*, void*, void*)>;
    struct Named {
      const char* name;
      size_t sendElems, recvElems;
      Call call;
    };
    const int root = n - 1;
    std::vector<Named> calls = {
        {"broadcast", count, count,
         [&](const void* s, void* r, void* st) { return sqzBroadcast(s, r, count, t, root, comm, st); }},
        {"reduce", count, count,
         [&](const void* s, void* r, void* st) { return sqzReduce(s, r, count, t, sqzSum, root, comm, st); }},
        {"allgather", count, count * n,
         [&](const void* s, void* r, void* st) { return sqzAllGather(s, r, count, t, comm, st); }},
        {"reducescatter", count * n, count,
         [&](const void* s, void* r, void* st) { return sqzReduceScatter(s, r, count, t, sqzSum, comm, st); }},
        {"alltoall", count * n, count * n,
         [&](const void* s, void* r, void* st) { return sqzAlltoAll(s, r, count, t, comm, st); }},
        {"sendrecv", count, count,
         [&](const void* s, void* r, void* st) {
           sqzGroupStart();
           sqzSend(s, count, t, (rank + 1) % n, comm, st);
           sqzRecv(r, count, t, (rank + n - 1) % n, comm, st);
           return sqzGroupEnd();
         }},
    };
    for (const Named& c : calls) {
      std::vector<char> send(in.begin(), in.begin() + c.sendElems * esz);
      std::vector<char> host(c.recvElems * esz, 0);
      ASSERT_EQ(c.call(send.data(), host.data(), nullptr), sqzSuccess) << c.name << ": " << sqzGetLastError(comm);
      DeviceBytes dsend(send.size(), stream), drecv(host.size(), stream);
      dsend.upload(send);
      drecv.upload(std::vector<char>(host.size(), 0));
      ASSERT_EQ(c.call(dsend.ptr, drecv.ptr, stream), sqzSuccess) << c.name << ": " << sqzGetLastError(comm);
      cudaStreamSynchronize(stream);
      EXPECT_EQ(drecv.download(), host) << "rank " << rank << ": " << c.name;
    }
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

INSTANTIATE_TEST_SUITE_P(OneGpu, DeviceCollectives,
                         // The default list (its cuda_ipc stands for shm in a communicator),
                         // and tcp.
                         ::testing::Values(Params{"cuda_ipc,shm,tcp", 1}, Params{"cuda_ipc,shm,tcp", 2},
                                           Params{"cuda_ipc,shm,tcp", 3}, Params{"cuda_ipc,shm,tcp", 4},
                                           Params{"tcp", 2}, Params{"tcp", 3}),
                         [](const auto& info) {
                           std::string t = info.param.transports;
                           return (t.find("cuda_ipc") == 0 ? std::string("default") : t) + "_" +
                                  std::to_string(info.param.nranks);
                         });

// Runs body(comm, rank, stream) on kRoundRanks ranks over shm, each with its own stream, with a
// 64 KiB stream collectives' window, so that calls take several rounds (messages several chunks).
constexpr int kRoundRanks = 3;
template <class Body>
void runInRounds(Body body) {
  ScopedEnv env;
  env.set("SQZ_DEVICE_DIRECT_BYTES", "64K");
  RunOptions opts;
  opts.transports = "shm";
  RunResult run = runRanks(kRoundRanks, opts, [&](sqzComm_t& comm, int rank) {
    RankStream rankStream;
    body(comm, rank, rankStream.get());
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

// The stream collectives (ranks on one host: device/stream_collectives.h) against the host path,
// byte for byte: every collective, out of place and in place (NCCL's conventions: a broadcast's
// or reduce's buffers equal, an all-gather's input at the rank's block of the output, a
// reduce-scatter's output at the rank's block of the input), in several rounds of a 64 KiB
// window, int32 and float32 (sum, avg, max), at 3 ranks.
TEST(StreamCollectives, EveryCollectiveInPlaceAndInRoundsMatchesTheHostPath) {
  const int n = kRoundRanks;
  runInRounds([&](sqzComm_t& comm, int rank, cudaStream_t stream) {
    const size_t count = 40001;  // 156 KiB a rank: 3 rounds, and 8 for the block collectives
    for (sqzDataType_t t : {sqzInt32, sqzFloat32})
      for (sqzRedOp_t op : {sqzSum, sqzAvg, sqzMax})
        for (bool inPlace : {false, true}) {
          const size_t esz = typeSize(t), all = count * n;
          const std::vector<char> in = exactInput(t, op, rank, all);
          const int root = 1;
          // send and recv as offsets into one buffer of `size` elements (in place: overlapping).
          struct Shape {
            const char* name;
            size_t size, sendAt, recvAt, sendElems, recvElems;
            std::function<sqzResult_t(const void*, void*, void*)> call;
          };
          const size_t block = size_t(rank) * count;
          std::vector<Shape> shapes = {
              {"broadcast", inPlace ? count : 2 * count, 0, inPlace ? 0 : count, count, count,
               [&](const void* s, void* r, void* st) {
                 return sqzBroadcast(s, r, count, t, root, comm, st);
               }},
              {"reduce", inPlace ? count : 2 * count, 0, inPlace ? 0 : count, count, count,
               [&](const void* s, void* r, void* st) {
                 return sqzReduce(s, r, count, t, op, root, comm, st);
               }},
              {"allgather", inPlace ? all : all + count, inPlace ? block : all, 0, count, all,
               [&](const void* s, void* r, void* st) {
                 return sqzAllGather(s, r, count, t, comm, st);
               }},
              {"reducescatter", inPlace ? all : all + count, 0, inPlace ? block : all, all, count,
               [&](const void* s, void* r, void* st) {
                 return sqzReduceScatter(s, r, count, t, op, comm, st);
               }},
          };
          if (!inPlace)
            shapes.push_back({"alltoall", 2 * all, 0, all, all, all,
                              [&](const void* s, void* r, void* st) {
                                return sqzAlltoAll(s, r, count, t, comm, st);
                              }});
          for (const Shape& c : shapes) {
            const std::string what = std::string(c.name) + (inPlace ? " in place " : " ") +
                                     "type " + std::to_string(t) + " op " + std::to_string(op);
            std::vector<char> host(c.size * esz, 0);
            std::memcpy(host.data() + c.sendAt * esz, in.data(), c.sendElems * esz);
            const std::vector<char> start = host;
            ASSERT_EQ(c.call(host.data() + c.sendAt * esz, host.data() + c.recvAt * esz, nullptr),
                      sqzSuccess) << what << ": " << sqzGetLastError(comm);
            DeviceBytes dev(host.size(), stream);
            dev.upload(start);
            char* base = static_cast<char*>(dev.ptr);
            ASSERT_EQ(c.call(base + c.sendAt * esz, base + c.recvAt * esz, stream), sqzSuccess)
                << what << ": " << sqzGetLastError(comm);
            ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << what;
            const char* algo = nullptr;
            ASSERT_EQ(sqzCommGetLastAlgorithm(comm, &algo), sqzSuccess);
            EXPECT_STREQ(algo, "stream") << what;
            const std::vector<char> got = dev.download();
            // What the call defines: its output (a reduce's at the root only).
            const bool defined = std::string(c.name) != "reduce" || rank == root;
            if (defined) {
              EXPECT_EQ(std::memcmp(got.data() + c.recvAt * esz, host.data() + c.recvAt * esz,
                                    c.recvElems * esz), 0)
                  << "rank " << rank << ": " << what;
            }
          }
        }
  });
}

// Groups of sends and receives of ranks on one host run on the stream too: with a 64 KiB window
// (3 ranks: slots of 21760 bytes) a message moves in up to 5 chunks through its pair's two slots.
// Every pattern's buffer ends as the host path leaves it: a ring, in place, every rank to every
// rank (itself included) with sizes that differ by pair, two messages and an empty one to one
// peer in order, three of several chunks each to one peer, and a receive that overlaps its send
// from below.
TEST(StreamCollectives, SendsAndReceivesInChunksMatchTheHostPath) {
  const int n = kRoundRanks;
  runInRounds([&](sqzComm_t& comm, int rank, cudaStream_t stream) {
    struct Message {
      bool send;
      int peer;
      size_t at, bytes;
    };
    const size_t region = 100000;
    auto size = [](int from, int to, int k) {
      return size_t((from * 7 + to * 3 + k * 5) % 4) * 30011 + 17;  // 17 to 90050 bytes
    };
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<std::pair<const char*, std::vector<Message>>> patterns = {
        {"ring",
         {{true, next, 0, size(rank, next, 0)}, {false, prev, region, size(prev, rank, 0)}}},
        {"in place", {{true, next, 0, 90050}, {false, prev, 0, 90050}}},
        {"overlapping from below", {{true, next, 4096, 90050}, {false, prev, 0, 90050}}},
        {"two and an empty one",
         {{true, next, 0, size(rank, next, 0)}, {true, next, region, 0},
          {true, next, 2 * region, size(rank, next, 1)}, {false, prev, 3 * region,
          size(prev, rank, 0)}, {false, prev, 4 * region, 0},
          {false, prev, 5 * region, size(prev, rank, 1)}}},
        // Three messages of several chunks each way around the ring: more than a pair's two
        // slots hold in one round of chunks.
        {"three to one peer",
         {{true, next, 0, 90050}, {true, next, region, 60000}, {true, next, 2 * region, 45000},
          {false, prev, 3 * region, 90050}, {false, prev, 4 * region, 60000},
          {false, prev, 5 * region, 45000}}},
    };
    std::vector<Message> everyone;
    for (int q = 0; q < n; ++q) everyone.push_back({true, q, q * region, size(rank, q, 0)});
    for (int q = 0; q < n; ++q)
      everyone.push_back({false, q, (n + q) * region, size(q, rank, 0)});
    patterns.push_back({"every rank to every rank", everyone});
    for (const auto& [name, messages] : patterns) {
      std::vector<char> start(6 * region);
      for (size_t i = 0; i < start.size(); ++i) start[i] = char(i * 131 + rank * 17 + 1);
      auto group = [&](char* base, cudaStream_t st) {
        sqzGroupStart();
        for (const Message& m : messages)
          if (m.send)
            sqzSend(base + m.at, m.bytes, sqzUint8, m.peer, comm, st);
          else
            sqzRecv(base + m.at, m.bytes, sqzUint8, m.peer, comm, st);
        return sqzGroupEnd();
      };
      std::vector<char> host = start;
      ASSERT_EQ(group(host.data(), nullptr), sqzSuccess) << name << ": " << sqzGetLastError(comm);
      DeviceBytes dev(start.size(), stream);
      dev.upload(start);
      ASSERT_EQ(group(static_cast<char*>(dev.ptr), stream), sqzSuccess)
          << name << ": " << sqzGetLastError(comm);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << name;
      EXPECT_TRUE(dev.download() == host) << "rank " << rank << ": " << name;
    }
  });
}

void CUDART_CB sleepOnStream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}

// The call is enqueued: it returns while the stream is still busy with earlier work, and the
// result is there once the stream reaches it.
TEST(DeviceStreamSemantics, CallReturnsBeforeTheStreamReachesIt) {
  RunOptions opts;
  opts.transports = "cuda_ipc,shm,tcp";
  RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
    RankStream rankStream;
    cudaStream_t stream = rankStream.get();
    const size_t count = 1 << 20;
    std::vector<char> in = exactInput(sqzFloat32, sqzSum, rank, count);
    DeviceBytes buf(in.size(), stream);
    buf.upload(in);
    static int delayMs = 500;
    cudaLaunchHostFunc(stream, sleepOnStream, &delayMs);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(sqzAllReduce(buf.ptr, buf.ptr, count, sqzFloat32, sqzSum, comm, stream), sqzSuccess)
        << sqzGetLastError(comm);
    EXPECT_LT(secondsSince(t0), 0.4) << "sqzAllReduce waited for the stream instead of enqueuing";
    cudaStreamSynchronize(stream);
    std::vector<char> expect(in.size());
    for (size_t i = 0; i < count; ++i) storeExactResult(sqzFloat32, sqzSum, 2, i, expect.data());
    EXPECT_EQ(buf.download(), expect);
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

// Calls on two streams of one communicator run in the order they were made, as every rank
// numbers them: a call on a stream held back by earlier work is not overtaken by the next call
// on another stream (ranks on one host: the stream collectives), and both are exact; nor is a
// send by the next send on another stream.
TEST(DeviceStreamSemantics, CallsOnTwoStreamsKeepTheirOrder) {
  RunOptions opts;
  opts.transports = "shm";
  RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
    RankStream first, second;
    const size_t count = 4096;
    const std::vector<char> in = exactInput(sqzFloat32, sqzSum, rank, count);
    DeviceBytes a(in.size(), first.get()), b(in.size(), second.get());
    a.upload(in);
    b.upload(in);
    static int delayMs = 300;
    cudaLaunchHostFunc(first.get(), sleepOnStream, &delayMs);
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(sqzAllReduce(a.ptr, a.ptr, count, sqzFloat32, sqzSum, comm, first.get()),
                sqzSuccess) << sqzGetLastError(comm);
      ASSERT_EQ(sqzAllReduce(b.ptr, b.ptr, count, sqzFloat32, sqzSum, comm, second.get()),
                sqzSuccess) << sqzGetLastError(comm);
    }
    EXPECT_EQ(cudaStreamSynchronize(second.get()), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(first.get()), cudaSuccess);
    // Three all-reduces of 2 ranks: 4 x the first one.
    std::vector<char> once(in.size()), expect(in.size());
    for (size_t i = 0; i < count; ++i) storeExactResult(sqzFloat32, sqzSum, 2, i, once.data());
    const auto* o = reinterpret_cast<const float*>(once.data());
    auto* e = reinterpret_cast<float*>(expect.data());
    for (size_t i = 0; i < count; ++i) e[i] = 4 * o[i];
    EXPECT_EQ(a.download(), expect);
    EXPECT_EQ(b.download(), expect);
    // Sends too: rank 0 sends 1 KiB of a from the held stream, then all of b from the free one;
    // rank 1 receives them in that order (a send that overtook would not match the receive).
    cudaLaunchHostFunc(first.get(), sleepOnStream, &delayMs);
    const size_t some = 256;
    ASSERT_EQ(rank == 0 ? sqzSend(a.ptr, some, sqzFloat32, 1, comm, first.get())
                        : sqzRecv(a.ptr, some, sqzFloat32, 0, comm, second.get()),
              sqzSuccess) << sqzGetLastError(comm);
    ASSERT_EQ(rank == 0 ? sqzSend(b.ptr, count, sqzFloat32, 1, comm, second.get())
                        : sqzRecv(b.ptr, count, sqzFloat32, 0, comm, second.get()),
              sqzSuccess) << sqzGetLastError(comm);
    EXPECT_EQ(cudaStreamSynchronize(second.get()), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(first.get()), cudaSuccess);
    EXPECT_EQ(b.download(), expect);
    sqzResult_t async = sqzSuccess;
    EXPECT_EQ(sqzCommGetAsyncError(comm, &async), sqzSuccess);
    EXPECT_EQ(async, sqzSuccess) << sqzGetLastError(comm);
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

// A peer that is gone fails the enqueued call on the progress thread: the stream is released
// (no hang), the error is the communicator's async error, and the next call fails with it.
TEST(DeviceStreamSemantics, AFailedEnqueuedCallIsAnAsyncError) {
  RunOptions opts;
  opts.transports = "cuda_ipc,shm,tcp";
  opts.timeoutMs = 5000;
  RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
    if (rank == 1) {  // gone before the call
      sqzCommAbort(comm);
      comm = nullptr;
      return;
    }
    RankStream rankStream;
    cudaStream_t stream = rankStream.get();
    DeviceBytes buf(1024 * sizeof(float), stream);
    ASSERT_EQ(sqzAllReduce(buf.ptr, buf.ptr, 1024, sqzFloat32, sqzSum, comm, stream), sqzSuccess)
        << sqzGetLastError(comm);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // released, not hung
    sqzResult_t async = sqzSuccess;
    EXPECT_EQ(sqzCommGetAsyncError(comm, &async), sqzSuccess);
    EXPECT_NE(async, sqzSuccess);
    EXPECT_NE(std::string(sqzGetLastError(comm)).find("rank"), std::string::npos)
        << "the async error's message: '" << sqzGetLastError(comm) << "'";
    EXPECT_NE(sqzAllReduce(buf.ptr, buf.ptr, 1024, sqzFloat32, sqzSum, comm, stream), sqzSuccess);
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

// The input and the output one after the other in one allocation: the output's start is the
// input's end, and each must still be staged as itself (the fault harness's two cudaMallocs
// are adjacent on the stand-in, and were once taken for one buffer there).
TEST(DeviceStreamSemantics, AdjacentInputAndOutput) {
  RunOptions opts;
  opts.transports = "tcp";
  RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
    RankStream rankStream;
    cudaStream_t stream = rankStream.get();
    constexpr size_t n = 3 << 16;
    DeviceBytes both(2 * n * sizeof(float), stream);
    std::vector<char> in(2 * n * sizeof(float));
    auto* f = reinterpret_cast<float*>(in.data());
    for (size_t i = 0; i < 2 * n; ++i) f[i] = float(i % 1000 + rank);
    both.upload(in);
    float* send = static_cast<float*>(both.ptr);
    ASSERT_EQ(sqzAllReduce(send, send + n, n, sqzFloat32, sqzSum, comm, stream), sqzSuccess)
        << sqzGetLastError(comm);
    const std::vector<char> out = both.download();
    const auto* g = reinterpret_cast<const float*>(out.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(g[i], f[i]) << "the input changed at " << i;
      ASSERT_EQ(g[n + i], float(2 * (i % 1000) + 1)) << "the sum is wrong at " << i;
    }
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

// A call whose peer never comes holds the caller's stream on a word; sqzCommAbort from another
// thread, or the timeout, writes every word the stream waits on, so the stream drains, and the
// error stays on the communicator.
TEST(DeviceStreamSemantics, AbortAndTheTimeoutReleaseAHeldStream) {
  // An all-reduce by abort and by the timeout, and a receive (a group of messages) by the timeout.
  for (int held : {0, 1, 2}) {
    const bool byAbort = held == 0, receive = held == 2;
    RunOptions opts;
    opts.transports = "shm";
    opts.timeoutMs = byAbort ? 30000 : 1000;
    std::barrier sync(2);
    RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
      if (rank == 1) {  // never calls; stays until rank 0 is done
        sync.arrive_and_wait();
        return;
      }
      RankStream rankStream;
      cudaStream_t stream = rankStream.get();
      DeviceBytes buf(1024 * sizeof(float), stream);
      ASSERT_EQ(receive ? sqzRecv(buf.ptr, 1024, sqzFloat32, 1, comm, stream)
                        : sqzAllReduce(buf.ptr, buf.ptr, 1024, sqzFloat32, sqzSum, comm, stream),
                sqzSuccess)
          << sqzGetLastError(comm);
      const auto t0 = std::chrono::steady_clock::now();
      std::thread aborter;
      if (byAbort)
        aborter = std::thread([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          sqzCommAbort(comm);
        });
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // released, not hung
      const double held = secondsSince(t0);
      if (aborter.joinable()) aborter.join();
      EXPECT_LT(held, byAbort ? 10.0 : 1.0 + 2.0 + 5.0)
          << (byAbort ? "abort" : "the timeout") << " left the stream held";
      if (byAbort) {
        comm = nullptr;  // sqzCommAbort destroyed it
      } else {
        sqzResult_t async = sqzSuccess;
        EXPECT_EQ(sqzCommGetAsyncError(comm, &async), sqzSuccess);
        EXPECT_NE(async, sqzSuccess) << "the timed-out call left no error";
        if (receive) {
          EXPECT_NE(std::string(sqzGetLastError(comm)).find("sends and receives on device buffers "
                                                            "waited 1000 ms"),
                    std::string::npos)
              << sqzGetLastError(comm);
        }
      }
      sync.arrive_and_wait();
    });
    ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
  }
}

// After calls whose ranks disagree: the stream gets through, and the communicator's async error
// (within 10 s) is the disagreement; returns its message.
std::string mismatchError(sqzComm_t comm, cudaStream_t stream) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  sqzResult_t async = sqzSuccess;
  while (async == sqzSuccess && secondsSince(t0) < 10) {
    EXPECT_EQ(sqzCommGetAsyncError(comm, &async), sqzSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_LT(secondsSince(t0), 10.0) << "the stream or the error took too long";
  EXPECT_EQ(async, sqzInvalidUsage);
  const std::string why = sqzGetLastError(comm);
  EXPECT_NE(why.find("do not match"), std::string::npos) << why;
  return why;
}

// Ranks on one host run a dense device all-reduce as a stream collective
// (device/stream_collectives.h), which no host thread checks as it runs: ranks whose calls differ
// (count within one round, datatype, or counts that take different numbers of rounds) must still
// end with an error that names both calls, no output written, and no stream held for ever.
TEST(DeviceStreamSemantics, MismatchedAllReducesFailAndNothingHangs) {
  struct Case {
    const char* what;
    size_t count[2];
    sqzDataType_t type[2];
    const char* windowBytes;
    const char* says;  // in rank 1's error
  };
  const Case cases[] = {
      {"counts", {1000, 2000}, {sqzFloat32, sqzFloat32}, nullptr, "#1 of 1000 float (sum)"},
      {"datatypes", {1024, 1024}, {sqzFloat32, sqzInt32}, nullptr, "#1 of 1024 float (sum)"},
      {"rounds", {16384, 65536}, {sqzFloat32, sqzFloat32}, "64K", "#1 of 16384 float (sum)"},
      // From 512 KiB the ranks reduce in two shots, below it in one.
      {"two shots", {262144, 131072}, {sqzFloat32, sqzFloat32}, nullptr,
       "#1 of 262144 float (sum)"},
      {"one shot and two", {65536, 262144}, {sqzFloat32, sqzFloat32}, nullptr,
       "#1 of 65536 float (sum)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ScopedEnv env;
    env.set("SQZ_TUNER_CALIBRATE", "0");
    env.set("SQZ_ALGO", "direct");
    if (c.windowBytes) env.set("SQZ_DEVICE_DIRECT_BYTES", c.windowBytes);
    RunOptions opts;
    opts.transports = "shm";
    opts.timeoutMs = 30000;  // the error comes from the check, not from a timeout
    RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
      RankStream rankStream;
      cudaStream_t stream = rankStream.get();
      const size_t n = c.count[rank];
      DeviceBytes in(n * 4, stream), out(n * 4, stream);
      in.upload(std::vector<char>(n * 4, 1));
      out.upload(std::vector<char>(n * 4, 7));
      ASSERT_EQ(sqzAllReduce(in.ptr, out.ptr, n, c.type[rank], sqzSum, comm, stream), sqzSuccess)
          << sqzGetLastError(comm);
      const std::string why = mismatchError(comm, stream);
      if (rank == 1) {
        EXPECT_NE(why.find(c.says), std::string::npos) << why;
      }
      const std::vector<char> got = out.download();
      EXPECT_EQ(got, std::vector<char>(n * 4, 7)) << "a mismatched call wrote its output";
    });
    ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
  }
}

// The same for the other stream collectives: a broadcast whose ranks name different roots, and
// ranks in different collectives of the same size, end with the error and nothing written.
TEST(DeviceStreamSemantics, MismatchedRootsAndCollectivesFail) {
  const size_t n = 4096;
  for (bool roots : {true, false}) {
    SCOPED_TRACE(roots ? "roots" : "collectives");
    ScopedEnv env;
    env.set("SQZ_TUNER_CALIBRATE", "0");
    RunOptions opts;
    opts.transports = "shm";
    RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
      RankStream rankStream;
      cudaStream_t stream = rankStream.get();
      DeviceBytes in(n * 4, stream), out(2 * n * 4, stream);
      in.upload(std::vector<char>(n * 4, 1));
      out.upload(std::vector<char>(2 * n * 4, 7));
      const sqzResult_t rc =
          roots ? sqzBroadcast(in.ptr, out.ptr, n, sqzFloat32, rank, comm, stream)
          : rank == 0 ? sqzAllGather(in.ptr, out.ptr, n, sqzFloat32, comm, stream)
                      : sqzAllReduce(in.ptr, out.ptr, n, sqzFloat32, sqzSum, comm, stream);
      ASSERT_EQ(rc, sqzSuccess) << sqzGetLastError(comm);
      const std::string why = mismatchError(comm, stream);
      if (rank == 1) {
        EXPECT_NE(why.find(roots ? "broadcast #1 of 4096 float, root 0" : "allgather #1"),
                  std::string::npos)
            << why;
      }
      EXPECT_EQ(out.download(), std::vector<char>(2 * n * 4, 7)) << "a mismatched call wrote";
    });
    ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
  }
}

// A receive of another size than its send (half of it, or an empty one): the receiver's error
// names both, its buffer stays as it was, and no stream is held. A receive that starts inside a send of its group (above the
// send's start) is refused at the call, and the ranks go on.
TEST(DeviceStreamSemantics, MismatchedMessagesFailAndOverlapsAreRefused) {
  const size_t n = 4096;
  // The receive's size: half the send's, none at all (an empty receive is checked too); or -1,
  // the overlap.
  for (int received : {int(n / 2), 0, -1}) {
    const bool sizes = received >= 0;
    SCOPED_TRACE(sizes ? "sizes" : "overlap");
    RunOptions opts;
    opts.transports = "shm";
    opts.timeoutMs = 30000;  // the error comes from the check, not from a timeout
    std::barrier sync(2);
    RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
      RankStream rankStream;
      cudaStream_t stream = rankStream.get();
      DeviceBytes buf(2 * n, stream);
      buf.upload(std::vector<char>(2 * n, char(rank + 1)));
      char* base = static_cast<char*>(buf.ptr);
      if (sizes) {
        const sqzResult_t rc = rank == 0 ? sqzSend(base, n, sqzUint8, 1, comm, stream)
                                         : sqzRecv(base, received, sqzUint8, 0, comm, stream);
        ASSERT_EQ(rc, sqzSuccess) << sqzGetLastError(comm);
        if (rank == 1) {
          const std::string why = mismatchError(comm, stream);
          EXPECT_NE(why.find("receive #1 from rank 0 expects " + std::to_string(received) +
                             " bytes, and rank 0 sent 4096"),
                    std::string::npos) << why;
          EXPECT_EQ(buf.download(), std::vector<char>(2 * n, char(2))) << "a receive wrote";
        }
        sync.arrive_and_wait();
        return;
      }
      sqzGroupStart();
      sqzSend(base, n, sqzUint8, 1 - rank, comm, stream);
      sqzRecv(base + 16, n, sqzUint8, 1 - rank, comm, stream);
      EXPECT_EQ(sqzGroupEnd(), sqzInvalidUsage);
      std::string why = sqzGetLastError(comm);
      EXPECT_NE(why.find("overlaps the send to rank"), std::string::npos) << why;
      // In place, but the receive is the peer's first message and the send the second to it.
      sqzGroupStart();
      sqzSend(base + n, 16, sqzUint8, 1 - rank, comm, stream);
      sqzSend(base, n, sqzUint8, 1 - rank, comm, stream);
      sqzRecv(base, n, sqzUint8, 1 - rank, comm, stream);
      EXPECT_EQ(sqzGroupEnd(), sqzInvalidUsage);
      why = sqzGetLastError(comm);
      EXPECT_NE(why.find("message 1 from its peer where the send is message 2"), std::string::npos)
          << why;
      // Nothing was enqueued: the next group pairs with the peer's.
      sqzGroupStart();
      sqzSend(base, n, sqzUint8, 1 - rank, comm, stream);
      sqzRecv(base + n, n, sqzUint8, 1 - rank, comm, stream);
      ASSERT_EQ(sqzGroupEnd(), sqzSuccess) << sqzGetLastError(comm);
      std::vector<char> want(2 * n, char(rank + 1));
      std::fill(want.begin() + n, want.end(), char(2 - rank));
      EXPECT_EQ(buf.download(), want);
    });
    ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
  }
}

// A rank whose communicator fails while its stream still has sends to make must not hand a
// healthy peer wrong data. Rank 0's group receives from rank 2, which never calls, and sends 8
// chunks to rank 1; past SQZ_TIMEOUT_MS rank 0 fails and its stream is released: its waits are
// moved past, so from then on it must write nothing rank 1 reads (no copy into a slot, no
// message words, no sent). Rank 1's receive then ends with an error, its buffer holding only
// chunks rank 0 really sent, never success with another chunk's bytes in place of one (what the
// released stream's slot writes gave before, and the fault harness caught).
TEST(DeviceStreamSemantics, AReleasedSenderHandsItsPeerNoWrongData) {
  ScopedEnv env;
  env.set("SQZ_DEVICE_DIRECT_BYTES", "64K");  // 3 ranks: slots of 21760 bytes
  RunOptions opts;
  opts.transports = "shm";
  opts.timeoutMs = 1000;
  std::barrier sync(3);
  RunResult run = runRanks(3, opts, [&](sqzComm_t& comm, int rank) {
    RankStream rankStream;
    cudaStream_t stream = rankStream.get();
    const size_t slot = 21760, bytes = 8 * slot;
    std::vector<char> data(bytes);
    for (size_t i = 0; i < bytes; ++i) data[i] = char(i / slot + 1);  // each chunk its own byte
    DeviceBytes buf(bytes, stream), from2(bytes, stream);
    buf.upload(rank == 0 ? data : std::vector<char>(bytes, 0));
    if (rank == 2) {  // never calls
      sync.arrive_and_wait();
      return;
    }
    if (rank == 0) {
      sqzGroupStart();
      sqzRecv(from2.ptr, bytes, sqzUint8, 2, comm, stream);
      sqzSend(buf.ptr, bytes, sqzUint8, 1, comm, stream);
      ASSERT_EQ(sqzGroupEnd(), sqzSuccess) << sqzGetLastError(comm);
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      sync.arrive_and_wait();
      return;
    }
    ASSERT_EQ(sqzRecv(buf.ptr, bytes, sqzUint8, 0, comm, stream), sqzSuccess)
        << sqzGetLastError(comm);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_LT(secondsSince(t0), 10.0) << "the receive's stream was held";
    sqzResult_t async = sqzSuccess;
    for (int i = 0; i < 100 && async == sqzSuccess; ++i) {  // the error may trail the stream
      EXPECT_EQ(sqzCommGetAsyncError(comm, &async), sqzSuccess);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const std::vector<char> got = buf.download();
    size_t wrong = 0, written = 0;
    for (size_t i = 0; i < bytes; ++i) {
      wrong += got[i] != 0 && got[i] != data[i];
      written += got[i] != 0;
    }
    EXPECT_EQ(wrong, 0u) << "bytes of another chunk in place of the one sent ("
                         << (async == sqzSuccess ? "and the receive succeeded" : "failed") << ")";
    if (async == sqzSuccess) {
      EXPECT_EQ(written, bytes) << "the receive succeeded without its data";
    }
    sync.arrive_and_wait();
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

// sqzCommRevoke from another thread releases a stream held by a call whose peer never comes (the
// call's error names the revoke), and the communicator can then be shrunk: here to every rank,
// the idle one's healthy communicator included, which then all-reduces on device buffers again.
TEST(DeviceStreamSemantics, RevokeReleasesAHeldStreamAndShrinkGoesOn) {
  RunOptions opts;
  opts.transports = "shm";
  opts.timeoutMs = 30000;
  std::barrier sync(2);
  RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
    RankStream rankStream;
    cudaStream_t stream = rankStream.get();
    DeviceBytes buf(1024 * sizeof(float), stream);
    if (rank == 0) {  // a call nobody joins, revoked from another thread
      ASSERT_EQ(sqzAllReduce(buf.ptr, buf.ptr, 1024, sqzFloat32, sqzSum, comm, stream), sqzSuccess)
          << sqzGetLastError(comm);
      const auto t0 = std::chrono::steady_clock::now();
      std::thread revoker([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        EXPECT_EQ(sqzCommRevoke(comm), sqzSuccess) << sqzGetLastError(comm);
      });
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // released, not hung
      revoker.join();
      EXPECT_LT(secondsSince(t0), 10.0) << "the revoke left the stream held";
      sqzResult_t async = sqzSuccess;
      EXPECT_EQ(sqzCommGetAsyncError(comm, &async), sqzSuccess);
      EXPECT_EQ(async, sqzRemoteError);
      EXPECT_NE(std::string(sqzGetLastError(comm)).find("revoked"), std::string::npos)
          << sqzGetLastError(comm);
    }
    sync.arrive_and_wait();
    sqzComm_t fresh = nullptr;
    ASSERT_EQ(sqzCommShrink(comm, nullptr, 0, &fresh, nullptr), sqzSuccess) << sqzGetLastError(comm);
    sqzCommDestroy(comm);
    comm = fresh;
    std::vector<char> ones(1024 * sizeof(float));
    for (size_t i = 0; i < 1024; ++i) {
      const float v = 1.0f + static_cast<float>(rank);
      std::memcpy(ones.data() + i * sizeof(float), &v, sizeof v);
    }
    buf.upload(ones);
    ASSERT_EQ(sqzAllReduce(buf.ptr, buf.ptr, 1024, sqzFloat32, sqzSum, comm, stream), sqzSuccess)
        << sqzGetLastError(comm);
    const std::vector<char> got = buf.download();
    float first = 0;
    std::memcpy(&first, got.data(), sizeof first);
    EXPECT_EQ(first, 3.0f) << "the shrunk communicator's device all-reduce";
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

// Ranks of one process on one GPU share its hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS):
// with fewer queues than ranks, one rank's held stream could stall another's copies for ever, so
// init refuses with what to set, and a communicator that fits still works.
TEST(DeviceErrors, MoreRanksInOneProcessThanWorkQueues) {
  ScopedEnv env;
  env.set("CUDA_DEVICE_MAX_CONNECTIONS", "1");
  RunOptions opts;
  opts.transports = "shm";
  opts.timeoutMs = 2000;  // the rank that was let in waits that long for the refused one
  RunResult run = runRanks(2, opts, [&](sqzComm_t&, int) {});
  ASSERT_FALSE(run.initErrors.empty()) << "two ranks on one GPU with one work queue were let in";
  bool named = false;
  for (const std::string& e : run.initErrors)
    named |= e.find("CUDA_DEVICE_MAX_CONNECTIONS to at least 2") != std::string::npos;
  EXPECT_TRUE(named) << run.initErrors[0];
  RunResult one = runRanks(1, opts, [&](sqzComm_t&, int) {});
  EXPECT_TRUE(one.initErrors.empty()) << one.initErrors[0];
}

// Bad input that needs a GPU to make: each is sqzInvalidArgument and nothing is enqueued (the
// communicator stays usable: a correct call afterwards succeeds).
TEST(DeviceErrors, HostPointerWithStreamMixedBuffersAndTooSmallBuffers) {
  RunOptions opts;
  RunResult run = runRanks(1, opts, [&](sqzComm_t& comm, int) {
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    float host[16] = {};
    DeviceBytes small(16 * sizeof(float));
    EXPECT_EQ(sqzAllReduce(host, host, 16, sqzFloat32, sqzSum, comm, stream), sqzInvalidArgument);
    EXPECT_NE(std::string(sqzGetLastError(comm)).find("host memory"), std::string::npos);
    EXPECT_EQ(sqzAllReduce(small.ptr, host, 16, sqzFloat32, sqzSum, comm, stream), sqzInvalidArgument);
    EXPECT_NE(std::string(sqzGetLastError(comm)).find("recvbuff is host"), std::string::npos)
        << sqzGetLastError(comm);
    EXPECT_EQ(sqzAllReduce(small.ptr, small.ptr, 1000, sqzFloat32, sqzSum, comm, stream),
              sqzInvalidArgument);
    EXPECT_NE(std::string(sqzGetLastError(comm)).find("end of its allocation"), std::string::npos)
        << sqzGetLastError(comm);
    EXPECT_EQ(sqzAllReduceCompressed(small.ptr, small.ptr, 16, sqzFloat32, sqzSum, nullptr, comm,
                                     stream),
              sqzInvalidArgument);
    EXPECT_EQ(sqzAllReduce(small.ptr, small.ptr, 16, sqzFloat32, sqzSum, comm, stream), sqzSuccess)
        << sqzGetLastError(comm);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaStreamDestroy(stream);
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

// A device call on a stream that is capturing a CUDA graph is refused at the call: its stream
// program waits for words that count calls, and a replay would return stale data. Nothing is
// enqueued (the capture ends clean), and the ranks' next calls still pair up and are exact.
TEST(DeviceErrors, CallsOnACapturingStreamAreRefused) {
  RunOptions opts;
  opts.transports = "shm";
  RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
    RankStream rankStream;
    cudaStream_t stream = rankStream.get();
    const size_t count = 4096;
    const std::vector<char> in = exactInput(sqzFloat32, sqzSum, rank, count);
    DeviceBytes buf(in.size(), stream);
    buf.upload(in);
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    EXPECT_EQ(sqzAllReduce(buf.ptr, buf.ptr, count, sqzFloat32, sqzSum, comm, stream),
              sqzInvalidUsage);
    EXPECT_NE(std::string(sqzGetLastError(comm)).find("capturing a CUDA graph"), std::string::npos)
        << sqzGetLastError(comm);
    EXPECT_EQ(sqzSend(buf.ptr, count, sqzFloat32, 1 - rank, comm, stream), sqzInvalidUsage);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    ASSERT_EQ(sqzAllReduce(buf.ptr, buf.ptr, count, sqzFloat32, sqzSum, comm, stream), sqzSuccess)
        << sqzGetLastError(comm);
    std::vector<char> expect(in.size());
    for (size_t i = 0; i < count; ++i) storeExactResult(sqzFloat32, sqzSum, 2, i, expect.data());
    EXPECT_EQ(buf.download(), expect);
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

TEST(DeviceErrors, BufferOrStreamOfAnotherDevice) {
  int n = 0;
  cudaGetDeviceCount(&n);
  if (n < 2) GTEST_SKIP() << "needs two GPUs; this machine has " << n;
  RunOptions opts;
  RunResult run = runRanks(1, opts, [&](sqzComm_t& comm, int) {
    cudaSetDevice(1);
    cudaStream_t other;
    cudaStreamCreate(&other);
    DeviceBytes onOne(64);
    cudaSetDevice(0);
    DeviceBytes onZero(64);
    EXPECT_EQ(sqzAllReduce(onOne.ptr, onOne.ptr, 16, sqzFloat32, sqzSum, comm, nullptr),
              sqzInvalidArgument);
    EXPECT_NE(std::string(sqzGetLastError(comm)).find("GPU 1"), std::string::npos);
    EXPECT_EQ(sqzAllReduce(onZero.ptr, onZero.ptr, 16, sqzFloat32, sqzSum, comm, other),
              sqzInvalidArgument);
    EXPECT_NE(std::string(sqzGetLastError(comm)).find("stream belongs to GPU 1"), std::string::npos);
    cudaStreamDestroy(other);
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors[0];
}

}  // namespace
}  // namespace sqztest
