// Mistakes in the calls themselves: bad arguments, settings and environment variables come back
// as sqzInvalidArgument or sqzInvalidUsage with a sentence from sqzGetLastError, at once, and
// before anything is sent (the communicator still works after). What ranks do to each other
// (disagreeing calls, dead peers, foreign ids) is in failure_test.cc.
#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "test_util.h"

namespace sqztest {
namespace {

// A one-rank communicator over tcp, for argument checks that need a live comm.
sqzComm_t makeSingleRankComm() {
  sqzUniqueId id;
  if (sqzGetUniqueId(&id) != sqzSuccess) return nullptr;
  sqzConfig_t cfg = SQZ_CONFIG_INITIALIZER;
  cfg.transports = "tcp";
  cfg.timeoutMs = 5000;
  sqzComm_t comm = nullptr;
  if (sqzCommInitRankConfig(&comm, 1, id, 0, &cfg) != sqzSuccess) return nullptr;
  return comm;
}

// ---- calls without a communicator -------------------------------------------------------------

TEST(ApiErrors, NullComm) {
  float buf[4] = {};
  SQZ_EXPECT_ERROR(sqzAllReduce(buf, buf, 4, sqzFloat, sqzSum, nullptr, nullptr),
                   sqzInvalidArgument, nullptr);
  int n = -1;
  SQZ_EXPECT_ERROR(sqzCommCount(nullptr, &n), sqzInvalidArgument, nullptr);
  EXPECT_EQ(n, -1);
  SQZ_EXPECT_ERROR(sqzCommUserRank(nullptr, &n), sqzInvalidArgument, nullptr);
  SQZ_EXPECT_ERROR(sqzCommCuDevice(nullptr, &n), sqzInvalidArgument, nullptr);
  SQZ_EXPECT_ERROR(sqzCommFinalize(nullptr), sqzInvalidArgument, nullptr);
  sqzResult_t async;
  SQZ_EXPECT_ERROR(sqzCommGetAsyncError(nullptr, &async), sqzInvalidArgument, nullptr);
}

TEST(ApiErrors, NullOutputPointers) {
  SQZ_EXPECT_ERROR(sqzGetVersion(nullptr), sqzInvalidArgument, nullptr);
  SQZ_EXPECT_ERROR(sqzGetUniqueId(nullptr), sqzInvalidArgument, nullptr);
  int v = 0;
  EXPECT_EQ(sqzGetVersion(&v), sqzSuccess);
  EXPECT_EQ(v, SQZ_VERSION_CODE);
}

TEST(ApiErrors, DestroyAndAbortAcceptNull) {
  EXPECT_EQ(sqzCommDestroy(nullptr), sqzSuccess);
  EXPECT_EQ(sqzCommAbort(nullptr), sqzSuccess);
}

TEST(ApiErrors, AFailedCallIsNotAWarningTheCallerMustAlsoSee) {
  // The caller has the result and sqzGetLastError (a Python caller, an exception it may catch):
  // on 8f72c45 every failed call also printed a SQZ WARN line.
  float buf[4] = {};
  ::testing::internal::CaptureStderr();
  const sqzResult_t rc = sqzAllReduce(buf, buf, 4, sqzFloat, sqzSum, nullptr, nullptr);
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, sqzInvalidArgument);
  EXPECT_NE(std::string(sqzGetLastError(nullptr)).find("comm is NULL"), std::string::npos);
  EXPECT_EQ(printed.find("SQZ WARN"), std::string::npos) << printed;
}

TEST(ApiErrors, ErrorStringsAreNeverNull) {
  for (int r = 0; r < sqzNumResults; ++r) {
    const char* s = sqzGetErrorString(static_cast<sqzResult_t>(r));
    ASSERT_NE(s, nullptr) << r;
    EXPECT_GT(std::strlen(s), 0u) << r;
  }
  EXPECT_NE(sqzGetErrorString(static_cast<sqzResult_t>(99)), nullptr);
  EXPECT_NE(sqzGetErrorString(static_cast<sqzResult_t>(-1)), nullptr);
}

// ---- bad init arguments and settings ------------------------------------------------------------

TEST(InitErrors, BadRankCounts) {
  sqzUniqueId id;
  ASSERT_EQ(sqzGetUniqueId(&id), sqzSuccess) << sqzGetLastError(nullptr);
  sqzComm_t comm = nullptr;
  SQZ_EXPECT_ERROR(sqzCommInitRank(&comm, 0, id, 0), sqzInvalidArgument, nullptr);
  SQZ_EXPECT_ERROR(sqzCommInitRank(&comm, -3, id, 0), sqzInvalidArgument, nullptr);
  SQZ_EXPECT_ERROR(sqzCommInitRank(&comm, 2, id, 2), sqzInvalidArgument, nullptr);
  SQZ_EXPECT_ERROR(sqzCommInitRank(&comm, 2, id, -1), sqzInvalidArgument, nullptr);
  SQZ_EXPECT_ERROR(sqzCommInitRank(nullptr, 1, id, 0), sqzInvalidArgument, nullptr);
  EXPECT_EQ(comm, nullptr);
}

TEST(InitErrors, UninitializedConfig) {
  sqzUniqueId id;
  ASSERT_EQ(sqzGetUniqueId(&id), sqzSuccess) << sqzGetLastError(nullptr);
  sqzConfig_t cfg;
  std::memset(&cfg, 0, sizeof cfg);  // magic 0: never went through SQZ_CONFIG_INITIALIZER
  sqzComm_t comm = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  SQZ_EXPECT_ERROR(sqzCommInitRankConfig(&comm, 1, id, 0, &cfg), sqzInvalidArgument, nullptr);
  EXPECT_LT(secondsSince(t0), 5.0);
  EXPECT_EQ(comm, nullptr);
  if (comm) sqzCommDestroy(comm);
}

TEST(InitErrors, BadConfigValues) {
  sqzUniqueId id;
  ASSERT_EQ(sqzGetUniqueId(&id), sqzSuccess) << sqzGetLastError(nullptr);
  sqzComm_t comm = nullptr;
  {
    sqzConfig_t cfg = SQZ_CONFIG_INITIALIZER;
    cfg.transports = "carrier-pigeon";
    SQZ_EXPECT_ERROR(sqzCommInitRankConfig(&comm, 1, id, 0, &cfg), sqzInvalidArgument, nullptr);
  }
  {
    sqzConfig_t cfg = SQZ_CONFIG_INITIALIZER;
    cfg.timeoutMs = 0;
    SQZ_EXPECT_ERROR(sqzCommInitRankConfig(&comm, 1, id, 0, &cfg), sqzInvalidArgument, nullptr);
  }
  {
    sqzConfig_t cfg = SQZ_CONFIG_INITIALIZER;
    cfg.tcpNsocks = 1000;
    SQZ_EXPECT_ERROR(sqzCommInitRankConfig(&comm, 1, id, 0, &cfg), sqzInvalidArgument, nullptr);
  }
  {
    sqzConfig_t cfg = SQZ_CONFIG_INITIALIZER;
    cfg.chunkBytes = -1;
    SQZ_EXPECT_ERROR(sqzCommInitRankConfig(&comm, 1, id, 0, &cfg), sqzInvalidArgument, nullptr);
  }
  {
    // No machine has GPU 1000; a build without CUDA refuses any device.
    sqzConfig_t cfg = SQZ_CONFIG_INITIALIZER;
    cfg.device = 1000;
    SQZ_EXPECT_ERROR(sqzCommInitRankConfig(&comm, 1, id, 0, &cfg), sqzInvalidArgument, nullptr);
    EXPECT_NE(std::string(sqzGetLastError(nullptr)).find("device"), std::string::npos)
        << sqzGetLastError(nullptr);
  }
  EXPECT_EQ(comm, nullptr);
}

TEST(InitErrors, GarbageUniqueId) {
  sqzUniqueId id;
  std::memset(id.internal, 0xff, sizeof id.internal);
  sqzComm_t comm = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  sqzResult_t rc = sqzCommInitRank(&comm, 1, id, 0);
  EXPECT_NE(rc, sqzSuccess);
  EXPECT_EQ(rc, sqzInvalidArgument) << sqzGetLastError(nullptr);
  expectSentence(sqzGetLastError(nullptr), "garbage id");
  EXPECT_LT(secondsSince(t0), 5.0);
  if (comm) sqzCommDestroy(comm);
}

TEST(InitErrors, CorruptedUniqueId) {
  sqzUniqueId id;
  ASSERT_EQ(sqzGetUniqueId(&id), sqzSuccess) << sqzGetLastError(nullptr);
  for (size_t byte : {size_t{8}, size_t{30}, size_t{46}}) {  // port, secret, nonce
    sqzUniqueId bad = id;
    bad.internal[byte] ^= 0x5a;
    sqzComm_t comm = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    sqzResult_t rc = sqzCommInitRank(&comm, 1, bad, 0);
    EXPECT_NE(rc, sqzSuccess) << "byte " << byte << " flipped";
    expectSentence(sqzGetLastError(nullptr), "corrupted id");
    EXPECT_LT(secondsSince(t0), 10.0) << "byte " << byte;
    if (rc == sqzSuccess) sqzCommDestroy(comm);
  }
}

TEST(InitErrors, UnknownAlgorithmName) {
  ScopedEnv env;
  env.set("SQZ_ALGO", "allreduce:0-inf=bogosort");
  RunResult run = runRanks(1, RunOptions{}, [](sqzComm_t&, int) {});
  ASSERT_EQ(run.initErrors.size(), 1u);
  EXPECT_NE(run.initErrors[0].find("bogosort"), std::string::npos) << run.initErrors[0];
  EXPECT_NE(run.initErrors[0].find("ring"), std::string::npos)
      << "the message should list the algorithms: " << run.initErrors[0];
}

TEST(InitErrors, UnknownCheckMode) {
  ScopedEnv env;
  env.set("SQZ_CHECK_MODE", "paranoid");
  RunResult run = runRanks(1, RunOptions{}, [](sqzComm_t&, int) {});
  ASSERT_EQ(run.initErrors.size(), 1u);
  EXPECT_NE(run.initErrors[0].find("SQZ_CHECK_MODE='paranoid'"), std::string::npos)
      << run.initErrors[0];
}

TEST(InitErrors, BadTcpCongestionName) {
  ScopedEnv env;
  env.set("SQZ_TCP_CONGESTION", "cubic; rm");
  RunResult run = runRanks(1, RunOptions{}, [](sqzComm_t&, int) {});
  ASSERT_EQ(run.initErrors.size(), 1u);
  EXPECT_NE(run.initErrors[0].find("SQZ_TCP_CONGESTION='cubic; rm'"), std::string::npos)
      << run.initErrors[0];
}

// ---- bad collective arguments on a live communicator --------------------------------------------

TEST(AllReduceErrors, BadArguments) {
  sqzComm_t comm = makeSingleRankComm();
  ASSERT_NE(comm, nullptr) << sqzGetLastError(nullptr);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {};
  SQZ_EXPECT_ERROR(sqzAllReduce(nullptr, b, 8, sqzFloat, sqzSum, comm, nullptr),
                   sqzInvalidArgument, comm);
  SQZ_EXPECT_ERROR(sqzAllReduce(a, nullptr, 8, sqzFloat, sqzSum, comm, nullptr),
                   sqzInvalidArgument, comm);
  SQZ_EXPECT_ERROR(sqzAllReduce(nullptr, nullptr, 1, sqzFloat, sqzSum, comm, nullptr),
                   sqzInvalidArgument, comm);
  SQZ_EXPECT_ERROR(sqzAllReduce(a, b, 8, static_cast<sqzDataType_t>(42), sqzSum, comm, nullptr),
                   sqzInvalidArgument, comm);
  SQZ_EXPECT_ERROR(sqzAllReduce(a, b, 8, static_cast<sqzDataType_t>(-1), sqzSum, comm, nullptr),
                   sqzInvalidArgument, comm);
  SQZ_EXPECT_ERROR(sqzAllReduce(a, b, 8, sqzNumTypes, sqzSum, comm, nullptr), sqzInvalidArgument,
                   comm);
  SQZ_EXPECT_ERROR(sqzAllReduce(a, b, 8, sqzFloat, static_cast<sqzRedOp_t>(42), comm, nullptr),
                   sqzInvalidArgument, comm);
  SQZ_EXPECT_ERROR(sqzAllReduce(a, b, 8, sqzFloat, sqzNumOps, comm, nullptr), sqzInvalidArgument,
                   comm);
  SQZ_EXPECT_ERROR(sqzAllReduce(a, b, static_cast<size_t>(-5), sqzFloat, sqzSum, comm, nullptr),
                   sqzInvalidArgument, comm);
  SQZ_EXPECT_ERROR(sqzAllReduce(a, b, static_cast<size_t>(INT64_MIN), sqzFloat, sqzSum, comm,
                                nullptr),
                   sqzInvalidArgument, comm);
  int n = 0;
  SQZ_EXPECT_ERROR(sqzCommCount(comm, nullptr), sqzInvalidArgument, comm);
  SQZ_EXPECT_ERROR(sqzCommUserRank(comm, nullptr), sqzInvalidArgument, comm);
  SQZ_EXPECT_ERROR(sqzCommCuDevice(comm, nullptr), sqzInvalidArgument, comm);

  // Argument errors are caught before anything is sent: the communicator still works.
  ASSERT_EQ(sqzAllReduce(a, b, 8, sqzFloat, sqzSum, comm, nullptr), sqzSuccess)
      << sqzGetLastError(comm);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b[i], a[i]);
  EXPECT_EQ(sqzCommCount(comm, &n), sqzSuccess);
  EXPECT_EQ(n, 1);
  sqzResult_t async = sqzInternalError;
  EXPECT_EQ(sqzCommGetAsyncError(comm, &async), sqzSuccess);
  EXPECT_EQ(async, sqzSuccess);
  EXPECT_EQ(sqzCommFinalize(comm), sqzSuccess);
  EXPECT_EQ(sqzCommDestroy(comm), sqzSuccess);
}

TEST(AllReduceErrors, StreamAndRootChecks) {
  sqzComm_t comm = makeSingleRankComm();
  ASSERT_NE(comm, nullptr) << sqzGetLastError(nullptr);
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {};
  int notAStream = 0;
  // Host buffers with a stream: the caller expected device memory (or a build without CUDA).
  SQZ_EXPECT_ERROR(sqzAllReduce(a, b, 8, sqzFloat, sqzSum, comm, &notAStream),
                   sqzInvalidArgument, comm);
  EXPECT_NE(std::string(sqzGetLastError(comm)).find("host memory"), std::string::npos)
      << sqzGetLastError(comm);
  SQZ_EXPECT_ERROR(sqzBroadcast(a, b, 8, sqzFloat, 0, comm, &notAStream), sqzInvalidArgument,
                   comm);
  for (int root : {-1, 1, 1000}) {
    SQZ_EXPECT_ERROR(sqzBroadcast(a, b, 8, sqzFloat, root, comm, nullptr), sqzInvalidArgument,
                     comm);
    EXPECT_NE(std::string(sqzGetLastError(comm)).find(std::to_string(root)), std::string::npos)
        << sqzGetLastError(comm);
    SQZ_EXPECT_ERROR(sqzReduce(a, b, 8, sqzFloat, sqzSum, root, comm, nullptr),
                     sqzInvalidArgument, comm);
  }
  EXPECT_EQ(sqzAllReduce(a, b, 8, sqzFloat, sqzSum, comm, nullptr), sqzSuccess)
      << sqzGetLastError(comm);
  EXPECT_EQ(sqzCommDestroy(comm), sqzSuccess);
}

TEST(AllReduceErrors, CountZeroWithNullBuffersIsAccepted) {
  sqzComm_t comm = makeSingleRankComm();
  ASSERT_NE(comm, nullptr) << sqzGetLastError(nullptr);
  EXPECT_EQ(sqzAllReduce(nullptr, nullptr, 0, sqzFloat, sqzSum, comm, nullptr), sqzSuccess)
      << sqzGetLastError(comm);
  EXPECT_EQ(sqzCommDestroy(comm), sqzSuccess);
}

// Both ranks make the same invalid call, then a valid one: the invalid calls must not have
// touched the wire, or the valid one would see a sequence-number mismatch.
TEST(AllReduceErrors, ArgumentErrorsDoNotDesynchronizeRanks) {
  std::mutex mu;
  std::vector<std::string> problems;
  RunOptions opts;
  opts.timeoutMs = 10000;
  opts.watchdogSeconds = 60;
  RunResult run = runRanks(2, opts, [&](sqzComm_t& comm, int rank) {
    float a[5] = {1, 2, 3, 4, float(rank)}, b[5] = {};
    sqzResult_t bad1 = sqzAllReduce(a, b, 5, static_cast<sqzDataType_t>(42), sqzSum, comm,
                                    nullptr);
    sqzResult_t bad2 = sqzAllReduce(a, nullptr, 5, sqzFloat, sqzSum, comm, nullptr);
    setStatus("valid sqzAllReduce after invalid ones");
    sqzResult_t good = sqzAllReduce(a, b, 5, sqzFloat, sqzSum, comm, nullptr);
    std::lock_guard<std::mutex> lock(mu);
    if (bad1 != sqzInvalidArgument || bad2 != sqzInvalidArgument)
      problems.push_back("rank " + std::to_string(rank) + ": invalid calls returned " +
                         sqzGetErrorString(bad1) + " / " + sqzGetErrorString(bad2));
    if (good != sqzSuccess)
      problems.push_back("rank " + std::to_string(rank) + ": valid call returned " +
                         sqzGetErrorString(good) + ": " + sqzGetLastError(comm));
    else if (b[0] != 2 || b[3] != 8 || b[4] != 1)
      problems.push_back("rank " + std::to_string(rank) + ": wrong result");
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors.front();
  for (const auto& p : problems) ADD_FAILURE() << p;
}

// Partly overlapping send and receive buffers: on 8f72c45 sqzAllReduce(buf, buf + 1, ...) returned
// success with wrong elements. Every rank gets sqzInvalidArgument naming the overlap, its buffer
// keeps every byte, and a valid call afterwards still succeeds (nothing reached the wire). The
// in-place layouts of each call stay accepted.
TEST(BufferErrors, PartlyOverlappingBuffersAreRefusedOnEveryRankAndNothingIsWritten) {
  constexpr int kRanks = 4;
  constexpr size_t kCount = 4096;
  std::mutex mu;
  std::vector<std::string> problems;
  RunOptions opts;
  opts.timeoutMs = 10000;
  opts.watchdogSeconds = 120;
  RunResult run = runRanks(kRanks, opts, [&](sqzComm_t& comm, int rank) {
    auto report = [&](const std::string& p) {
      std::lock_guard<std::mutex> lock(mu);
      problems.push_back("rank " + std::to_string(rank) + ": " + p);
    };
    // One allocation big enough for every layout below, filled with a pattern the calls must
    // leave alone.
    std::vector<float> mem(kRanks * kCount + 64);
    auto fill = [&] {
      for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<float>(i % 1000) + 0.5f;
    };
    auto untouched = [&] {
      for (size_t i = 0; i < mem.size(); ++i)
        if (mem[i] != static_cast<float>(i % 1000) + 0.5f) return false;
      return true;
    };
    float* b = mem.data();
    sqzCodec_t codec = nullptr;
    if (sqzCodecCreate(&codec, "int8", kCount, sqzFloat, comm) != sqzSuccess)
      report(std::string("sqzCodecCreate: ") + sqzGetLastError(comm));
    struct Case {
      const char* what;
      std::function<sqzResult_t()> call;
    };
    const Case cases[] = {
        {"sqzAllReduce(b, b + 1)",
         [&] { return sqzAllReduce(b, b + 1, kCount, sqzFloat, sqzSum, comm, nullptr); }},
        {"sqzAllReduce(b + 64, b)",
         [&] { return sqzAllReduce(b + 64, b, kCount, sqzFloat, sqzSum, comm, nullptr); }},
        {"sqzBroadcast(b, b + 1)",
         [&] { return sqzBroadcast(b, b + 1, kCount, sqzFloat, 0, comm, nullptr); }},
        {"sqzReduce(b, b + 1)",
         [&] { return sqzReduce(b, b + 1, kCount, sqzFloat, sqzSum, 0, comm, nullptr); }},
        {"sqzAllGather(recv + rank*count + 1, recv)",
         [&] {
           return sqzAllGather(b + rank * kCount + 1, b, kCount, sqzFloat, comm, nullptr);
         }},
        {"sqzReduceScatter(send, send + rank*count + 1)",
         [&] {
           return sqzReduceScatter(b, b + rank * kCount + 1, kCount, sqzFloat, sqzSum, comm,
                                   nullptr);
         }},
        {"sqzAlltoAll(b, b + 1)",
         [&] { return sqzAlltoAll(b, b + 1, kCount / kRanks, sqzFloat, comm, nullptr); }},
        {"sqzAllReduceCompressed(b, b + 1)",
         [&] {
           return sqzAllReduceCompressed(b, b + 1, kCount, sqzFloat, sqzSum, codec, comm, nullptr);
         }},
    };
    for (const Case& c : cases) {
      fill();
      setStatus(c.what);
      const sqzResult_t r = c.call();
      const std::string msg = sqzGetLastError(comm);
      if (r != sqzInvalidArgument || msg.find("overlap") == std::string::npos)
        report(std::string(c.what) + " returned " + sqzGetErrorString(r) + ": " + msg);
      if (!untouched()) report(std::string(c.what) + " wrote into the buffers");
    }
    // The in-place layouts are defined, and valid calls still run after the refusals.
    setStatus("in-place calls after the refusals");
    for (size_t i = 0; i < kCount; ++i) b[i] = 1.0f;
    if (sqzAllReduce(b, b, kCount, sqzFloat, sqzSum, comm, nullptr) != sqzSuccess || b[7] != kRanks)
      report(std::string("in-place sqzAllReduce: ") + sqzGetLastError(comm));
    for (size_t i = 0; i < kCount; ++i) b[rank * kCount + i] = static_cast<float>(rank);
    if (sqzAllGather(b + rank * kCount, b, kCount, sqzFloat, comm, nullptr) != sqzSuccess ||
        b[3 * kCount + 1] != 3.0f)
      report(std::string("in-place sqzAllGather: ") + sqzGetLastError(comm));
    for (size_t i = 0; i < kRanks * kCount; ++i) b[i] = 2.0f;
    if (sqzReduceScatter(b, b + rank * kCount, kCount, sqzFloat, sqzSum, comm, nullptr) !=
            sqzSuccess ||
        b[rank * kCount + 5] != 2.0f * kRanks)
      report(std::string("in-place sqzReduceScatter: ") + sqzGetLastError(comm));
    if (codec) sqzCodecDestroy(codec);
  });
  ASSERT_TRUE(run.initErrors.empty()) << run.initErrors.front();
  for (const auto& p : problems) ADD_FAILURE() << p;
}

// ---- sqzCommInitFromEnv without a usable environment --------------------------------------------

TEST(InitFromEnv, NoLauncherEnvironment) {
  ScopedEnv env;
  for (const char* k : {"SQZ_UNIQUE_ID", "SQZ_RANK", "SQZ_WORLD_SIZE", "SQZ_ROOT", "RANK",
                        "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                        "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"})
    env.unset(k);
  sqzComm_t comm = nullptr;
  SQZ_EXPECT_ERROR(sqzCommInitFromEnv(&comm, nullptr), sqzInvalidUsage, nullptr);
  EXPECT_EQ(comm, nullptr);
}

// An SQZ_ROOT rendezvous without a secret would let anyone who reaches the port join the job.
TEST(InitFromEnv, RootWithoutSecretIsRefused) {
  ScopedEnv env;
  env.unset("SQZ_UNIQUE_ID");
  env.unset("SQZ_SECRET");
  env.set("SQZ_RANK", "0");
  env.set("SQZ_WORLD_SIZE", "2");
  env.set("SQZ_ROOT", "127.0.0.1:1");
  sqzComm_t comm = nullptr;
  SQZ_EXPECT_ERROR(sqzCommInitFromEnv(&comm, nullptr), sqzInvalidUsage, nullptr);
  EXPECT_NE(std::string(sqzGetLastError(nullptr)).find("SQZ_SECRET"), std::string::npos)
      << sqzGetLastError(nullptr);
  EXPECT_EQ(comm, nullptr);
}

TEST(InitFromEnv, MalformedSecretIsRefusedWithoutEchoingIt) {
  ScopedEnv env;
  env.unset("SQZ_UNIQUE_ID");
  env.set("SQZ_SECRET", "0123456789abcdefXYZ");
  env.set("SQZ_RANK", "1");
  env.set("SQZ_WORLD_SIZE", "2");
  env.set("SQZ_ROOT", "127.0.0.1:1");
  sqzComm_t comm = nullptr;
  SQZ_EXPECT_ERROR(sqzCommInitFromEnv(&comm, nullptr), sqzInvalidArgument, nullptr);
  EXPECT_EQ(std::string(sqzGetLastError(nullptr)).find("0123456789abcdef"), std::string::npos)
      << "the error repeats the secret: " << sqzGetLastError(nullptr);
}

TEST(InitFromEnv, RankOutOfRange) {
  ScopedEnv env;
  env.unset("SQZ_UNIQUE_ID");
  env.set("SQZ_RANK", "2");
  env.set("SQZ_WORLD_SIZE", "2");
  env.set("SQZ_ROOT", "127.0.0.1:1");
  sqzComm_t comm = nullptr;
  SQZ_EXPECT_ERROR(sqzCommInitFromEnv(&comm, nullptr), sqzInvalidArgument, nullptr);
}

TEST(InitFromEnv, BadTimeoutVariable) {
  ScopedEnv env;
  env.set("SQZ_TIMEOUT_MS", "abc");
  env.set("SQZ_RANK", "0");
  env.set("SQZ_WORLD_SIZE", "1");
  env.set("SQZ_ROOT", "127.0.0.1:1");
  sqzComm_t comm = nullptr;
  sqzResult_t rc = sqzCommInitFromEnv(&comm, nullptr);
  EXPECT_EQ(rc, sqzInvalidArgument) << sqzGetLastError(nullptr);
  EXPECT_NE(std::string(sqzGetLastError(nullptr)).find("SQZ_TIMEOUT_MS"), std::string::npos)
      << sqzGetLastError(nullptr);
  if (rc == sqzSuccess) sqzCommDestroy(comm);
}

const auto* const kLoopback = ::testing::AddGlobalTestEnvironment(new LoopbackEnvironment);

}  // namespace
}  // namespace sqztest
