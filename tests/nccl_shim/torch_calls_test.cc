// The NCCL calls torch's ProcessGroupNCCL makes beyond the plain collectives, over the shim, as a
// program linked against libnccl.so.2 makes them (ranks as threads, host buffers):
//   - ncclCommInitRankScalable with several ids (torch's default above 128 ranks): every rank
//     joins one communicator; bad arguments fail with ncclInvalidArgument and a reason;
//   - ncclGroupSimulateEnd (torch's time estimate): it ends the group it closes without running
//     its calls, so the thread's next call runs, and it ends one level of nested groups;
//   - ncclCommRegister/ncclCommDeregister (torch's allocator hooks, memory pools): real handles,
//     released once per registration; what the communicator did not hand out is refused;
//   - ncclRedOpCreatePreMulSum: a failure leaves an op every call refuses (torch ignores the
//     result and its op would otherwise mean ncclSum); a scalar in device memory is read by each
//     call (with a GPU or the CUDA stand-in only);
//   - ncclCommGetAsyncError: the thread that asks (torch's watchdog) gets Squeeze's message from
//     ncclGetLastError.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <stdlib.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string lastError() {
  const char* m = ncclGetLastError(nullptr);
  return m ? m : "(null)";
}

bool mentions(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

// The file the loader took ncclGroupSimulateEnd from, links resolved: the shim, unless the build
// tree's libnccl.so.2 link to it was missing and the toolkit's NCCL came instead.
std::string loadedFrom() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&ncclGroupSimulateEnd), &info) || !info.dli_fname) return "?";
  char* real = realpath(info.dli_fname, nullptr);
  const std::string path = real ? real : info.dli_fname;
  free(real);
  return path;
}

class NcclShimTorchCalls : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(loadedFrom().find("libsqueeze-nccl.so"), std::string::npos)
        << "the test runs over " << loadedFrom() << ", not the shim";
  }
};

// A communicator of one rank (host buffers).
ncclComm_t singleRankComm() {
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess)
    ADD_FAILURE() << "a one-rank communicator: " << lastError();
  return comm;
}

// nranks communicators of one id, made on a thread each (each init waits for the others).
std::vector<ncclComm_t> rankComms(int nranks) {
  ncclUniqueId id;
  std::vector<ncclComm_t> comms(nranks, nullptr);
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    ADD_FAILURE() << "ncclGetUniqueId: " << lastError();
    return comms;
  }
  std::vector<std::string> errors(nranks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < nranks; ++r)
    ranks.emplace_back([&, r] {
      if (ncclCommInitRank(&comms[r], nranks, id, r) != ncclSuccess) errors[r] = lastError();
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < nranks; ++r)
    if (!errors[r].empty()) ADD_FAILURE() << "rank " << r << " init: " << errors[r];
  return comms;
}

// ---- ncclCommInitRankScalable --------------------------------------------------------------

TEST_F(NcclShimTorchCalls, ScalableInitWithSeveralIdsMakesOneCommunicator) {
  constexpr int kRanks = 3, kIds = 2;  // as torch with TORCH_NCCL_RANKS_PER_ROOT=2
  ncclUniqueId ids[kIds];
  for (ncclUniqueId& id : ids) ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess) << lastError();
  std::vector<std::string> failures(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      std::string& f = failures[r];
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      ncclComm_t comm = nullptr;
      if (ncclCommInitRankScalable(&comm, kRanks, r, kIds, ids, &config) != ncclSuccess) {
        f = "ncclCommInitRankScalable: " + lastError();
        return;
      }
      int count = 0, rank = -1;
      if (ncclCommCount(comm, &count) != ncclSuccess || count != kRanks) f += " count;";
      if (ncclCommUserRank(comm, &rank) != ncclSuccess || rank != r) f += " rank;";
      int32_t x = r + 1;
      if (ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, nullptr) != ncclSuccess)
        f += " all-reduce: " + lastError();
      else if (x != 6)
        f += " all-reduce gave " + std::to_string(x) + ", not 6;";
      if (ncclCommDestroy(comm) != ncclSuccess) f += " destroy;";
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

TEST_F(NcclShimTorchCalls, ScalableInitChecksItsArguments) {
  ncclUniqueId ids[2] = {};  // refused before they are read
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(&ids);
  EXPECT_EQ(ncclCommInitRankScalable(&comm, 2, 0, 0, ids, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "nId is 0")) << lastError();
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(ncclCommInitRankScalable(&comm, 2, 0, 3, ids, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "nId is 3 with nranks 2")) << lastError();
  EXPECT_EQ(ncclCommInitRankScalable(&comm, 2, 0, 2, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "commIds is NULL")) << lastError();
  EXPECT_EQ(ncclCommInitRankScalable(nullptr, 2, 0, 2, ids, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "newcomm is NULL")) << lastError();
  ncclConfig_t notInitialized{};
  EXPECT_EQ(ncclCommInitRankScalable(&comm, 2, 0, 2, ids, &notInitialized), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "ncclCommInitRankScalable: ncclConfig_t")) << lastError();
}

// ---- ncclGroupSimulateEnd ------------------------------------------------------------------

TEST_F(NcclShimTorchCalls, GroupSimulateEndEndsTheGroupWithoutRunningIt) {
  ncclComm_t comm = singleRankComm();
  ASSERT_NE(comm, nullptr);
  const int32_t in = 7;
  int32_t out = 0;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;

  // torch's startTimeEstimate / endTimeEstimate around a collective.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&in, &out, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  EXPECT_TRUE(mentions(lastError(), "ncclGroupSimulateEnd is not supported")) << lastError();
  EXPECT_EQ(out, 0) << "the simulated group's all-reduce ran";
  EXPECT_EQ(sim.estimatedTime, NCCL_UNDEF_FLOAT);
  // The group is closed: the next call runs at once, and there is no group left to end.
  ASSERT_EQ(ncclAllReduce(&in, &out, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess)
      << lastError();
  EXPECT_EQ(out, in) << "a call after ncclGroupSimulateEnd was recorded in a group left open";
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  EXPECT_TRUE(mentions(lastError(), "ncclGroupSimulateEnd without a matching ncclGroupStart"))
      << lastError();

  // Nested: an inner ncclGroupSimulateEnd ends one level, as NCCL's does (ncclSuccess, no
  // estimate), and the calls run at the outer ncclGroupEnd.
  out = 0;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&in, &out, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess) << lastError();
  EXPECT_EQ(out, 0) << "an inner level ran the enclosing group's call";
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << lastError();
  EXPECT_EQ(out, in) << "the outer ncclGroupEnd did not run the call";

  // Nested, simulated at the outermost level: nothing runs, and both levels are closed.
  out = 0;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&in, &out, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  EXPECT_EQ(out, 0);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage) << "a level was left open";

  // Without simInfo it is ncclGroupEnd, as in NCCL.
  out = 0;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&in, &out, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(nullptr), ncclSuccess) << lastError();
  EXPECT_EQ(out, in);

  // A simInfo not from NCCL_SIM_INFO_INITIALIZER: ncclInvalidArgument, the group ended unrun.
  out = 0;
  ncclSimInfo_t bad = sim;
  bad.magic = 0;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&in, &out, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "NCCL_SIM_INFO_INITIALIZER")) << lastError();
  EXPECT_EQ(out, 0);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage) << "the group was left open";

  // A communicator init in a simulated group runs (NCCL runs its inits when it simulates).
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t made = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&made, 1, id, 0), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&in, &out, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  EXPECT_NE(made, nullptr) << "the init in the simulated group did not run";
  EXPECT_EQ(out, 0);
  EXPECT_EQ(ncclCommDestroy(made), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ---- ncclCommRegister / ncclCommDeregister -------------------------------------------------

TEST_F(NcclShimTorchCalls, RegistrationHandsOutHandlesAndChecksThem) {
  ncclComm_t comm = singleRankComm(), other = singleRankComm();
  ASSERT_TRUE(comm && other);
  std::vector<float> buf(256, 1.0f), more(16, 2.0f);
  const size_t bytes = buf.size() * sizeof(float);

  void* h = nullptr;
  ASSERT_EQ(ncclCommRegister(comm, buf.data(), bytes, &h), ncclSuccess) << lastError();
  EXPECT_NE(h, nullptr);
  void* inner = nullptr;  // a range inside a registered one: its handle again, counted (NCCL)
  ASSERT_EQ(ncclCommRegister(comm, buf.data() + 16, 64, &inner), ncclSuccess) << lastError();
  EXPECT_EQ(inner, h);
  void* h2 = nullptr;
  ASSERT_EQ(ncclCommRegister(comm, more.data(), more.size() * sizeof(float), &h2), ncclSuccess);
  EXPECT_NE(h2, nullptr);
  EXPECT_NE(h2, h);
  // Registered buffers work as any other.
  ASSERT_EQ(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr),
            ncclSuccess)
      << lastError();
  EXPECT_EQ(buf[0], 1.0f);

  // Released once per registration; what the communicator did not hand out is refused.
  EXPECT_EQ(ncclCommDeregister(other, h), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "not one that ncclCommRegister handed out")) << lastError();
  EXPECT_EQ(ncclCommDeregister(comm, h), ncclSuccess) << lastError();
  EXPECT_EQ(ncclCommDeregister(comm, h), ncclSuccess) << lastError();
  EXPECT_EQ(ncclCommDeregister(comm, h), ncclInvalidArgument) << "deregistered three times";
  EXPECT_TRUE(mentions(lastError(), "ncclCommDeregister")) << lastError();
  int notAHandle = 0;
  EXPECT_EQ(ncclCommDeregister(comm, &notAHandle), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDeregister(comm, nullptr), ncclSuccess) << "NCCL's handle for no registration";
  EXPECT_EQ(ncclCommDeregister(nullptr, h2), ncclInvalidArgument);

  // Arguments.
  void* none = &notAHandle;
  EXPECT_EQ(ncclCommRegister(nullptr, buf.data(), 4, &none), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "ncclCommRegister: comm is NULL")) << lastError();
  EXPECT_EQ(ncclCommRegister(comm, nullptr, 4, &none), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "buff is NULL")) << lastError();
  EXPECT_EQ(none, nullptr) << "a refused ncclCommRegister left its handle set";
  EXPECT_EQ(ncclCommRegister(comm, buf.data(), 0, &none), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "size is 0")) << lastError();
  EXPECT_EQ(ncclCommRegister(comm, buf.data(), 4, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "handle is NULL")) << lastError();
  EXPECT_EQ(ncclCommRegister(comm, buf.data(), SIZE_MAX, &none), ncclInvalidArgument);

  // Left registered: ncclCommDestroy and ncclCommAbort free them (the sanitizer build's leak
  // check sees the rest).
  void* kept = nullptr;
  ASSERT_EQ(ncclCommRegister(other, buf.data(), bytes, &kept), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(other), ncclSuccess);
}

// ---- PreMulSum -----------------------------------------------------------------------------

TEST_F(NcclShimTorchCalls, AFailedPreMulSumLeavesAnOpEveryCallRefuses) {
  ncclComm_t comm = singleRankComm();
  ASSERT_NE(comm, nullptr);
  float scalar = 2.0f, x = 3.0f;
  // torch: ncclRedOp_t preMulSum{}; ncclRedOpCreatePreMulSum(...) with the result ignored.
  ncclRedOp_t op{};
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat8e4m3, ncclScalarHostImmediate, comm),
            ncclInvalidArgument);
  EXPECT_NE(op, ncclSum) << "a failed ncclRedOpCreatePreMulSum left the op meaning ncclSum";
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, op, comm, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "failed ncclRedOpCreatePreMulSum")) << lastError();
  EXPECT_TRUE(mentions(lastError(), "ncclFloat8e4m3")) << "names the failure: " << lastError();
  EXPECT_EQ(x, 3.0f);
  float y = 0;
  EXPECT_EQ(ncclReduce(&x, &y, 1, ncclFloat, op, 0, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclReduceScatter(&x, &y, 1, ncclFloat, op, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(y, 0.0f);

  op = ncclSum;
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, static_cast<ncclScalarResidence_t>(7),
                                     comm),
            ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "residence 7")) << lastError();
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, op, comm, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(mentions(lastError(), "residence 7")) << lastError();

  // A good one still works: sum of scalar * x.
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, comm),
            ncclSuccess)
      << lastError();
  ASSERT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, op, comm, nullptr), ncclSuccess) << lastError();
  EXPECT_EQ(y, 6.0f);
  EXPECT_EQ(ncclRedOpDestroy(op, comm), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// Without a GPU only the refusals run: the scalar is refused at creation in a build without
// CUDA, and its read fails the call (loudly) in a build with CUDA on a machine without a GPU.
TEST_F(NcclShimTorchCalls, DeviceScalarIsReadByEachCall) {
  float hostValue = 2.0f, x = 1.0f;
#ifndef NCCL_SHIM_TEST_CUDA
  ncclComm_t comm = singleRankComm();
  ASSERT_NE(comm, nullptr);
  ncclRedOp_t op{};
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &hostValue, ncclFloat, ncclScalarDevice, comm),
            ncclInvalidUsage);
  EXPECT_TRUE(mentions(lastError(), "needs a build of Squeeze with CUDA")) << lastError();
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, op, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  GTEST_SKIP() << "built without CUDA: ncclScalarDevice needs device memory";
#else
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    ncclComm_t comm = singleRankComm();
    ASSERT_NE(comm, nullptr);
    ncclRedOp_t op{};
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &hostValue, ncclFloat, ncclScalarDevice, comm),
              ncclSuccess)
        << lastError();
    EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, op, comm, nullptr), ncclUnhandledCudaError);
    EXPECT_TRUE(mentions(lastError(), "reading the PreMulSum operator's scalar")) << lastError();
    EXPECT_EQ(x, 1.0f);
    EXPECT_EQ(ncclRedOpDestroy(op, comm), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    GTEST_SKIP() << "no GPU (nor the CUDA stand-in): ncclScalarDevice needs device memory";
  }
  constexpr int kRanks = 2;
  std::vector<ncclComm_t> comms = rankComms(kRanks);
  ASSERT_TRUE(comms[0] && comms[1]);
  std::vector<std::string> failures(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      std::string& f = failures[r];
      ncclComm_t comm = comms[r];
      if (cudaSetDevice(0) != cudaSuccess) {
        f = "cudaSetDevice";
        return;
      }
      float* scalar = nullptr;
      float value = r + 1.0f;  // rank r scales by r + 1
      if (cudaMalloc(&scalar, sizeof(float)) != cudaSuccess ||
          cudaMemcpy(scalar, &value, sizeof value, cudaMemcpyHostToDevice) != cudaSuccess) {
        f = "cudaMalloc/cudaMemcpy of the scalar";
        return;
      }
      ncclRedOp_t op{};
      if (ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat, ncclScalarDevice, comm) != ncclSuccess) {
        f = "ncclRedOpCreatePreMulSum(ncclScalarDevice): " + lastError();
        return;
      }
      std::vector<float> in(5, 2.0f), out(5, 0.0f);
      if (ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, op, comm, nullptr) !=
          ncclSuccess)
        f += " first all-reduce: " + lastError();
      else if (out[0] != 6.0f || out[4] != 6.0f)  // 2 * 1 + 2 * 2
        f += " first all-reduce gave " + std::to_string(out[0]) + ", not 6;";
      // The scalar changes in device memory: the next call reads the new value.
      value = 10.0f * (r + 1);
      if (cudaMemcpy(scalar, &value, sizeof value, cudaMemcpyHostToDevice) != cudaSuccess)
        f += " cudaMemcpy;";
      if (ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, op, comm, nullptr) !=
          ncclSuccess)
        f += " second all-reduce: " + lastError();
      else if (out[0] != 60.0f)
        f += " second all-reduce gave " + std::to_string(out[0]) + ", not 60 (scalar read once?);";
      // Device buffers are refused, saying so (never summed unscaled).
      float* dbuf = nullptr;
      if (cudaMalloc(&dbuf, 5 * sizeof(float)) == cudaSuccess) {
        if (ncclAllReduce(dbuf, dbuf, 5, ncclFloat, op, comm, nullptr) != ncclInvalidUsage ||
            !mentions(lastError(), "device buffers"))
          f += " device buffers: " + lastError();
        cudaFree(dbuf);
      }
      if (ncclRedOpDestroy(op, comm) != ncclSuccess) f += " ncclRedOpDestroy;";
      cudaFree(scalar);
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
#endif
}

// ---- ncclCommGetAsyncError and ncclGetLastError --------------------------------------------

TEST_F(NcclShimTorchCalls, AsyncErrorGivesTheAskingThreadSqueezesMessage) {
  std::vector<ncclComm_t> comms = rankComms(2);
  ASSERT_TRUE(comms[0] && comms[1]);
  ASSERT_EQ(ncclCommAbort(comms[1]), ncclSuccess);  // rank 1 is gone
  std::vector<float> a(100000, 1.0f), b(a.size());
  EXPECT_NE(ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat, ncclSum, comms[0], nullptr),
            ncclSuccess);
  const std::string callError = lastError();

  // torch's watchdog: its own thread polls the communicator, then prints ncclGetLastError.
  ncclResult_t rc = ncclInternalError, async = ncclSuccess;
  std::string seen;
  std::thread([&] {
    rc = ncclCommGetAsyncError(comms[0], &async);
    seen = lastError();
  }).join();
  EXPECT_EQ(rc, ncclSuccess) << seen;
  EXPECT_NE(async, ncclSuccess);
  EXPECT_NE(async, ncclInProgress);
  EXPECT_FALSE(seen.empty()) << "ncclGetLastError is empty after an asynchronous error";
  EXPECT_TRUE(mentions(callError, seen) || mentions(seen, callError))
      << "the watchdog thread's last error: '" << seen << "'\nthe failed call's: '" << callError
      << "'";

  // On a thread whose last error is something else by now, too.
  int* noVersion = nullptr;
  EXPECT_EQ(ncclGetVersion(noVersion), ncclInvalidArgument);
  EXPECT_EQ(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
  EXPECT_EQ(lastError(), seen);
  ncclCommDestroy(comms[0]);
}

}  // namespace
