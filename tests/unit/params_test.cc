// Unit tests for base/params.h: the SQZ_* registry, its defaults and its parse errors.
// loadParams() reads the environment when called, so every test starts from an environment with
// no SQZ_* parameter set and the fixture restores the caller's values afterwards.
#include "base/params.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "base/strings.h"
#include "core/config.h"

namespace squeeze {
namespace {

class ParamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const ParamInfo& info : paramTable()) {
      const char* v = std::getenv(info.key);
      saved_.emplace_back(info.key, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(info.key);
    }
  }
  void TearDown() override {
    for (const auto& [key, value] : saved_) {
      if (value)
        setenv(key.c_str(), value->c_str(), 1);
      else
        unsetenv(key.c_str());
    }
  }

  // Runs loadParams() and returns the Error it throws (fails the test if it does not throw).
  static std::optional<Error> loadError() {
    try {
      loadParams();
    } catch (const Error& e) {
      return e;
    }
    return std::nullopt;
  }

  // With key=value set: the Error CommConfig::fromParams throws, or nullopt when it accepts.
  static std::optional<Error> configError(const char* key, const char* value) {
    setenv(key, value, 1);
    std::optional<Error> error;
    try {
      CommConfig::fromParams(loadParams());
    } catch (const Error& e) {
      error = e;
    }
    unsetenv(key);
    return error;
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(ParamsTest, DefaultsWhenUnset) {
  Params p = loadParams();
  EXPECT_EQ(p.debug, "WARN");
  EXPECT_EQ(p.debugSubsys, "ALL");
  EXPECT_EQ(p.debugFile, "");
  EXPECT_EQ(p.timeoutMs, 300000);
  EXPECT_EQ(p.spinUs, 100);
  EXPECT_EQ(p.transport, "cuda_ipc,shm,tcp");
  EXPECT_EQ(p.socketIfname, "");
  EXPECT_EQ(p.tcpNsocks, 2);
  EXPECT_EQ(p.chunkBytes, 512u << 10);
  EXPECT_EQ(p.shmBufferBytes, 4u << 20);
  EXPECT_EQ(p.uniqueId, "");
  EXPECT_EQ(p.rank, "");
  EXPECT_EQ(p.worldSize, "");
  EXPECT_EQ(p.root, "");
  EXPECT_EQ(p.secret, "");
}

TEST_F(ParamsTest, ValueStringIsDefaultWhenUnset) {
  for (const ParamInfo& info : paramTable())
    EXPECT_EQ(paramValueString(info), info.defaultValue) << info.key;
}

TEST_F(ParamsTest, ValueStringIsEnvironmentWhenSet) {
  setenv("SQZ_DEBUG", "INFO", 1);
  for (const ParamInfo& info : paramTable()) {
    if (std::string(info.key) == "SQZ_DEBUG") {
      EXPECT_EQ(paramValueString(info), "INFO");
    }
  }
}

TEST_F(ParamsTest, ReadsEnvironmentAtEachCall) {
  setenv("SQZ_TIMEOUT_MS", "1234", 1);
  EXPECT_EQ(loadParams().timeoutMs, 1234);
  setenv("SQZ_TIMEOUT_MS", "5000", 1);
  EXPECT_EQ(loadParams().timeoutMs, 5000);
  unsetenv("SQZ_TIMEOUT_MS");
  EXPECT_EQ(loadParams().timeoutMs, 300000);
}

TEST_F(ParamsTest, StringsPassThrough) {
  setenv("SQZ_TRANSPORT", "tcp", 1);
  setenv("SQZ_SOCKET_IFNAME", "^docker,lo", 1);
  Params p = loadParams();
  EXPECT_EQ(p.transport, "tcp");
  EXPECT_EQ(p.socketIfname, "^docker,lo");
}

TEST_F(ParamsTest, BadIntegerNamesTheVariable) {
  setenv("SQZ_TIMEOUT_MS", "abc", 1);
  auto e = loadError();
  ASSERT_TRUE(e.has_value()) << "SQZ_TIMEOUT_MS=abc was accepted";
  EXPECT_EQ(e->code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e->what()).find("SQZ_TIMEOUT_MS"), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find("abc"), std::string::npos) << e->what();
}

TEST_F(ParamsTest, RejectsMalformedIntegers) {
  for (const char* bad : {"12x", "1.5", "0x10z", "99999999999999999999999", "ten"}) {
    setenv("SQZ_TCP_NSOCKS", bad, 1);
    auto e = loadError();
    ASSERT_TRUE(e.has_value()) << "SQZ_TCP_NSOCKS='" << bad << "' was accepted";
    EXPECT_EQ(e->code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(e->what()).find("SQZ_TCP_NSOCKS"), std::string::npos) << e->what();
  }
}

TEST_F(ParamsTest, ByteSizes) {
  setenv("SQZ_CHUNK_BYTES", "1M", 1);
  EXPECT_EQ(loadParams().chunkBytes, 1u << 20);
  setenv("SQZ_CHUNK_BYTES", "64k", 1);
  EXPECT_EQ(loadParams().chunkBytes, 64u << 10);
  setenv("SQZ_CHUNK_BYTES", "4096", 1);
  EXPECT_EQ(loadParams().chunkBytes, 4096u);
  setenv("SQZ_SHM_BUFFER_BYTES", "8MB", 1);
  EXPECT_EQ(loadParams().shmBufferBytes, 8u << 20);
}

TEST_F(ParamsTest, BadByteSizeNamesTheVariable) {
  setenv("SQZ_CHUNK_BYTES", "lots", 1);
  auto e = loadError();
  ASSERT_TRUE(e.has_value()) << "SQZ_CHUNK_BYTES=lots was accepted";
  EXPECT_EQ(e->code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e->what()).find("SQZ_CHUNK_BYTES"), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find("lots"), std::string::npos) << e->what();
}

TEST_F(ParamsTest, NumericSettingsOutOfRangeAreRefusedByTheConfig) {
  // A positive double parses, but 1e-320 GB/s makes every cost infinite: the tuner would choose
  // nothing at the first call. The config refuses it at init, naming the variable and the range.
  for (const auto& [key, value] :
       {std::pair{"SQZ_REDUCE_GBPS", "1e-320"}, std::pair{"SQZ_TCP_GBPS", "1e300"},
        std::pair{"SQZ_SHM_LATENCY_US", "1e12"}, std::pair{"SQZ_SPIN_US", "-1"},
        std::pair{"SQZ_SPIN_US", "1000001"}, std::pair{"SQZ_TCP_SNDBUF", "1000"},
        std::pair{"SQZ_TCP_SNDBUF", "2G"}, std::pair{"SQZ_ENCODE_THREADS", "0"},
        std::pair{"SQZ_ENCODE_THREADS", "65"}}) {
    const std::optional<Error> e = configError(key, value);
    if (!e) {
      ADD_FAILURE() << key << "=" << value << " was accepted";
      continue;
    }
    EXPECT_EQ(e->code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e->what()).find(key), std::string::npos) << e->what();
    EXPECT_NE(std::string(e->what()).find("out of range"), std::string::npos) << e->what();
  }
  setenv("SQZ_REDUCE_GBPS", "0.5", 1);
  setenv("SQZ_TCP_SNDBUF", "150K", 1);
  EXPECT_EQ(CommConfig::fromParams(loadParams()).tcpSndbuf, 150u << 10);
  unsetenv("SQZ_TCP_SNDBUF");
}

TEST_F(ParamsTest, DebugSettingsThatNameNothingAreRefusedByTheConfig) {
  // On 8f72c45 both were accepted, and SQZ_DEBUG_SUBSYS=FOO hid every warning of the process.
  for (const auto& [key, value, named] :
       {std::tuple{"SQZ_DEBUG", "LOUD", "LOUD"}, std::tuple{"SQZ_DEBUG_SUBSYS", "FOO", "FOO"},
        std::tuple{"SQZ_DEBUG_SUBSYS", "INIT,TRANSPRT", "TRANSPRT"},
        std::tuple{"SQZ_DEBUG_SUBSYS", "^ALGOS", "ALGOS"}}) {
    const std::optional<Error> e = configError(key, value);
    if (!e) {
      ADD_FAILURE() << key << "=" << value << " was accepted";
      continue;
    }
    EXPECT_EQ(e->code(), ErrorCode::kInvalidArgument);
    const std::string what = e->what();
    EXPECT_NE(what.find(strCat(key, "='", value, "'")), std::string::npos) << what;
    EXPECT_NE(what.find(strCat("'", named, "'")), std::string::npos) << what;
  }
  for (const auto& [key, value] :
       {std::pair{"SQZ_DEBUG", "info"}, std::pair{"SQZ_DEBUG", "NONE"},
        std::pair{"SQZ_DEBUG_SUBSYS", "init,ALGO"}, std::pair{"SQZ_DEBUG_SUBSYS", "^TRANSPORT"},
        std::pair{"SQZ_DEBUG_SUBSYS", "INIT,"}}) {
    const std::optional<Error> e = configError(key, value);
    EXPECT_FALSE(e) << key << "=" << value << ": " << e->what();
  }
}

TEST(LogConfig, AMaskNeverHidesWarnings) {
  LogLevel level;
  EXPECT_FALSE(parseLogLevel("LOUD", &level));
  EXPECT_EQ(level, LogLevel::kWarn);  // what the logger keeps
  uint32_t mask = 0;
  std::string unknown;
  EXPECT_FALSE(parseLogMask("FOO", &mask, &unknown));
  EXPECT_EQ(unknown, "FOO");
  EXPECT_EQ(mask, ~0u);
  ASSERT_TRUE(parseLogMask("^INIT", &mask, &unknown));
  EXPECT_EQ(mask & uint32_t(LogSubsys::kInit), 0u);
  // This process's logger: warnings of every subsystem show at the default level.
  EXPECT_TRUE(logEnabled(LogLevel::kWarn, LogSubsys::kInit));
  EXPECT_TRUE(logEnabled(LogLevel::kWarn, LogSubsys::kDevice));
}

TEST(ParamTable, KeysAreUniqueAndDocumented) {
  const auto& table = paramTable();
  ASSERT_FALSE(table.empty());
  std::set<std::string> seen;
  for (const ParamInfo& info : table) {
    ASSERT_NE(info.key, nullptr);
    ASSERT_NE(info.help, nullptr) << info.key;
    ASSERT_NE(info.defaultValue, nullptr) << info.key;
    std::string key = info.key;
    EXPECT_TRUE(seen.insert(key).second) << "duplicate key " << key;
    EXPECT_EQ(key.rfind("SQZ_", 0), 0u) << key << " lacks the SQZ_ prefix";
    EXPECT_GT(key.size(), 4u) << key;
    for (char c : key)
      EXPECT_TRUE((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
          << key << " has '" << c << "'";
    EXPECT_GT(std::string(info.help).size(), 10u) << key << " has no real help text";
  }
}

TEST(ParamTable, DefaultsParseAsTheirType) {
  for (const ParamInfo& info : paramTable()) {
    std::string def = info.defaultValue;
    switch (info.type) {
      case ParamType::kInt: {
        char* end = nullptr;
        std::strtoll(def.c_str(), &end, 10);
        EXPECT_TRUE(!def.empty() && *end == '\0') << info.key << " default '" << def << "'";
        break;
      }
      case ParamType::kBytes:
        EXPECT_TRUE(parseBytes(def).has_value()) << info.key << " default '" << def << "'";
        break;
      case ParamType::kDouble: {
        char* end = nullptr;
        std::strtod(def.c_str(), &end);
        EXPECT_TRUE(!def.empty() && *end == '\0') << info.key << " default '" << def << "'";
        break;
      }
      case ParamType::kString:
        break;
    }
  }
}

TEST(ParamTable, ListsTheDocumentedKeys) {
  std::set<std::string> keys;
  for (const ParamInfo& info : paramTable()) keys.insert(info.key);
  for (const char* k : {"SQZ_DEBUG", "SQZ_DEBUG_SUBSYS", "SQZ_DEBUG_FILE", "SQZ_TIMEOUT_MS",
                        "SQZ_TRANSPORT", "SQZ_SOCKET_IFNAME", "SQZ_TCP_NSOCKS", "SQZ_CHUNK_BYTES",
                        "SQZ_UNIQUE_ID", "SQZ_RANK", "SQZ_WORLD_SIZE", "SQZ_ROOT"})
    EXPECT_EQ(keys.count(k), 1u) << k << " missing from paramTable()";
}

}  // namespace
}  // namespace squeeze
