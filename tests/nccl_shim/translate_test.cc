// The NCCL shim's tables (src/nccl_shim/translate.h, env_map.h, codec_rules.h) against the
// values of CUDA's nccl.h and the SQZ_* meanings they are meant to carry.
#include <gtest/gtest.h>

#include <map>

#include "nccl_shim/codec_rules.h"
#include "nccl_shim/env_map.h"
#include "nccl_shim/translate.h"

using namespace squeeze::nccl_shim;

TEST(NcclShimTables, DataTypesMatchByMeaning) {
  // What nccl.h documents each enumerator to be, and what Squeeze calls the same type.
  const std::map<int, std::pair<size_t, int>> want = {
      {ncclInt8, {1, sqzInt8}},         {ncclUint8, {1, sqzUint8}},
      {ncclInt32, {4, sqzInt32}},       {ncclUint32, {4, sqzUint32}},
      {ncclInt64, {8, sqzInt64}},       {ncclUint64, {8, sqzUint64}},
      {ncclFloat16, {2, sqzFloat16}},   {ncclFloat32, {4, sqzFloat32}},
      {ncclFloat64, {8, sqzFloat64}},   {ncclBfloat16, {2, sqzBfloat16}},
      {ncclFloat8e4m3, {1, -1}},        {ncclFloat8e5m2, {1, -1}}};
  ASSERT_EQ(want.size(), static_cast<size_t>(ncclNumTypes));
  for (int t = 0; t < ncclNumTypes; ++t) {
    const DataTypeRow* row = findDataType(t);
    ASSERT_NE(row, nullptr) << t;
    EXPECT_EQ(row->bytes, want.at(t).first) << row->name;
    EXPECT_EQ(row->sqz ? static_cast<int>(*row->sqz) : -1, want.at(t).second) << row->name;
  }
  EXPECT_EQ(findDataType(-1), nullptr);
  EXPECT_EQ(findDataType(ncclNumTypes), nullptr);
}

TEST(NcclShimTables, OperatorsAndResults) {
  const std::map<int, int> ops = {{ncclSum, sqzSum}, {ncclProd, sqzProd}, {ncclMax, sqzMax},
                                  {ncclMin, sqzMin}, {ncclAvg, sqzAvg}};
  for (const auto& [nccl, sqz] : ops) EXPECT_EQ(findRedOp(nccl)->sqz, sqz);
  EXPECT_EQ(findRedOp(ncclNumOps), nullptr);  // PreMulSum values: the communicator's table

  EXPECT_EQ(toNccl(sqzSuccess), ncclSuccess);
  EXPECT_EQ(toNccl(sqzCudaError), ncclUnhandledCudaError);
  EXPECT_EQ(toNccl(sqzSystemError), ncclSystemError);
  EXPECT_EQ(toNccl(sqzInternalError), ncclInternalError);
  EXPECT_EQ(toNccl(sqzInvalidArgument), ncclInvalidArgument);
  EXPECT_EQ(toNccl(sqzInvalidUsage), ncclInvalidUsage);
  EXPECT_EQ(toNccl(sqzRemoteError), ncclRemoteError);
  EXPECT_EQ(toNccl(sqzInProgress), ncclInProgress);
  EXPECT_EQ(toNccl(sqzTimeout), ncclRemoteError);  // NCCL has no timeout code
  for (int r = 0; r < sqzNumResults; ++r) EXPECT_LT(toNccl(static_cast<sqzResult_t>(r)), ncclNumResults);
}

std::map<std::string, std::string> mapped(std::map<std::string, std::string> env) {
  GetEnv get = [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  std::map<std::string, std::string> out;
  for (auto& [k, v] : mappedEnv(get)) out[k] = v;
  return out;
}

TEST(NcclShimEnv, NcclVariablesBecomeSqueezeOnes) {
  using M = std::map<std::string, std::string>;
  EXPECT_EQ(mapped({}), M{});
  EXPECT_EQ(mapped({{"NCCL_DEBUG", "info"}}), (M{{"SQZ_DEBUG", "INFO"}}));
  EXPECT_EQ(mapped({{"NCCL_DEBUG", "VERSION"}}), (M{{"SQZ_DEBUG", "WARN"}}));
  EXPECT_EQ(mapped({{"NCCL_DEBUG_SUBSYS", "INIT,NET,SHM,COLL,GRAPH"}}),
            (M{{"SQZ_DEBUG_SUBSYS", "INIT,TRANSPORT,ALGO"}}));
  EXPECT_EQ(mapped({{"NCCL_DEBUG_SUBSYS", "^NET"}}), (M{{"SQZ_DEBUG_SUBSYS", "^TRANSPORT"}}));
  EXPECT_EQ(mapped({{"NCCL_SOCKET_IFNAME", "=eth0"}}), (M{{"SQZ_SOCKET_IFNAME", "=eth0"}}));
  EXPECT_EQ(mapped({{"NCCL_DEBUG_FILE", "/tmp/n.%h.%p"}}), (M{{"SQZ_DEBUG_FILE", "/tmp/n.%h.%p"}}));
  EXPECT_EQ(mapped({{"NCCL_ALGO", "Tree,Ring"}}), (M{{"SQZ_ALGO", "tree,ring"}}));
  EXPECT_EQ(mapped({{"NCCL_ALGO", "^Tree"}}), M{});        // no exclusion form in SQZ_ALGO
  EXPECT_EQ(mapped({{"NCCL_ALGO", "NVLS,CollnetDirect"}}), M{});  // no such algorithms
  EXPECT_EQ(mapped({{"NCCL_SOCKET_NTHREADS", "4"}, {"NCCL_NSOCKS_PERTHREAD", "2"}}),
            (M{{"SQZ_TCP_NSOCKS", "8"}}));
  EXPECT_EQ(mapped({{"NCCL_SOCKET_NTHREADS", "8"}, {"NCCL_NSOCKS_PERTHREAD", "8"}}),
            (M{{"SQZ_TCP_NSOCKS", "16"}}));
  EXPECT_EQ(mapped({{"NCCL_SHM_DISABLE", "1"}}), (M{{"SQZ_TRANSPORT", "cuda_ipc,tcp"}}));
  EXPECT_EQ(mapped({{"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}}),
            (M{{"SQZ_TRANSPORT", "tcp"}}));
  EXPECT_EQ(mapped({{"NCCL_SHM_DISABLE", "0"}}), M{});
  // An SQZ_* the user set wins.
  EXPECT_EQ(mapped({{"NCCL_DEBUG", "INFO"}, {"SQZ_DEBUG", "WARN"}}), M{});
}

TEST(NcclShimCodecRules, Parse) {
  auto rules = parseCodecRules("1M-inf=topk:ratio=0.01,sample=1, 0-1M=dense");
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].lo, 1u << 20);
  EXPECT_EQ(rules[0].hi, UINT64_MAX);
  EXPECT_EQ(rules[0].spec, "topk:ratio=0.01,sample=1");
  EXPECT_EQ(rules[1].spec, "dense");
  EXPECT_EQ(codecFor(rules, (1u << 20) - 1), "");  // dense: a plain all-reduce
  EXPECT_EQ(codecFor(rules, 1u << 20), "topk:ratio=0.01,sample=1");

  rules = parseCodecRules("powersgd:rank=4,seed=7");
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(codecFor(rules, 4), "powersgd:rank=4,seed=7");

  rules = parseCodecRules("64K-1M=fp16");  // sizes no rule names: plain
  EXPECT_EQ(codecFor(rules, 100), "");
  EXPECT_EQ(codecFor(rules, 65536), "fp16");
  EXPECT_EQ(codecFor(rules, 1u << 20), "");
  EXPECT_TRUE(parseCodecRules("").empty());
}

TEST(NcclShimCodecRules, Refusals) {
  for (const char* bad : {"topk:ratio=0.1,1M-inf=dense", "1M-1K=topk", "0-1M=", "2M-2M=fp16"}) {
    try {
      parseCodecRules(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("SQZ_NCCL_CODEC"), std::string::npos) << e.what();
    }
  }
}
