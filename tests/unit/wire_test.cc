// Unit tests for base/wire.h: checkHeader accepts what the schedule expects and rejects each
// kind of difference with the right code and a sentence that names both ranks; the codec ids the
// methods register stay the shipped ones and cannot collide.
#include "base/wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <iterator>
#include <optional>
#include <string>

#include "base/error.h"
#include "base/types.h"
#include "compress/codecs.h"

namespace squeeze {
namespace {

constexpr int kMyRank = 3;
constexpr int kPeer = 5;
constexpr size_t kCapacity = 4096;

WireHeader expectedHeader() {
  WireHeader h;
  h.coll = static_cast<uint8_t>(CollKind::kAllReduce);
  h.codec = 0;
  h.dtype = static_cast<uint8_t>(DataType::kFloat32);
  h.op = static_cast<uint8_t>(RedOp::kSum);
  h.srcRank = kPeer;
  h.step = 7;
  h.commHash = 0x0123456789abcdefull;
  h.seq = 42;
  h.count = 100;
  h.offset = 64;
  h.payloadBytes = 1024;
  h.root = 0;
  return h;
}

std::optional<Error> check(const WireHeader& got, size_t capacity = kCapacity) {
  try {
    checkHeader(expectedHeader(), got, capacity, kMyRank);
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

bool mentions(const Error& e, const std::string& s) {
  return std::string(e.what()).find(s) != std::string::npos;
}

// Changes one field of an otherwise matching header and checks the error.
void expectRejected(const char* field, const std::function<void(WireHeader&)>& change,
                    ErrorCode code) {
  WireHeader got = expectedHeader();
  change(got);
  auto e = check(got);
  ASSERT_TRUE(e.has_value()) << "a header differing in " << field << " was accepted";
  EXPECT_EQ(static_cast<int>(e->code()), static_cast<int>(code)) << field << ": " << e->what();
  EXPECT_TRUE(mentions(*e, "rank " + std::to_string(kMyRank))) << field << ": " << e->what();
  EXPECT_TRUE(mentions(*e, "rank " + std::to_string(kPeer))) << field << ": " << e->what();
}

TEST(CheckHeader, AcceptsEqualHeaders) {
  EXPECT_FALSE(check(expectedHeader()).has_value());
}

TEST(CheckHeader, PayloadUpToCapacityIsAccepted) {
  WireHeader h = expectedHeader();
  h.payloadBytes = kCapacity;
  EXPECT_FALSE(check(h).has_value());
  h.payloadBytes = 0;
  EXPECT_FALSE(check(h).has_value());
  h.payloadBytes = 0;
  EXPECT_FALSE(check(h, 0).has_value());
  // payloadBytes is checked against the capacity, not against the expected header's value.
  h.payloadBytes = 17;
  EXPECT_FALSE(check(h).has_value());
}

TEST(CheckHeader, CorruptOrForeignIsRemoteError) {
  expectRejected("magic", [](WireHeader& h) { h.magic = 0xdeadbeef; }, ErrorCode::kRemote);
  expectRejected("magic (zeroed)", [](WireHeader& h) { h.magic = 0; }, ErrorCode::kRemote);
  expectRejected("version", [](WireHeader& h) { h.version = kWireVersion + 1; },
                 ErrorCode::kRemote);
  expectRejected("commHash", [](WireHeader& h) { h.commHash ^= 1; }, ErrorCode::kRemote);
  expectRejected("srcRank", [](WireHeader& h) { h.srcRank = kPeer + 1; }, ErrorCode::kRemote);
}

TEST(CheckHeader, PayloadOverCapacityIsRemoteError) {
  expectRejected("payloadBytes", [](WireHeader& h) { h.payloadBytes = kCapacity + 1; },
                 ErrorCode::kRemote);
  expectRejected("payloadBytes (huge)", [](WireHeader& h) { h.payloadBytes = UINT64_MAX; },
                 ErrorCode::kRemote);
}

TEST(CheckHeader, DisagreeingCallsAreInvalidUsage) {
  expectRejected("coll", [](WireHeader& h) { h.coll = 2; }, ErrorCode::kInvalidUsage);
  expectRejected("count", [](WireHeader& h) { h.count = 101; }, ErrorCode::kInvalidUsage);
  expectRejected("dtype", [](WireHeader& h) { h.dtype = uint8_t(DataType::kFloat64); },
                 ErrorCode::kInvalidUsage);
  expectRejected("op", [](WireHeader& h) { h.op = uint8_t(RedOp::kMax); },
                 ErrorCode::kInvalidUsage);
  expectRejected("root", [](WireHeader& h) { h.root = 1; }, ErrorCode::kInvalidUsage);
  expectRejected("codec", [](WireHeader& h) { h.codec = 3; }, ErrorCode::kInvalidUsage);
  expectRejected("method", [](WireHeader& h) { h.method = 7; }, ErrorCode::kInvalidUsage);
  expectRejected("specHash", [](WireHeader& h) { h.specHash = 1; }, ErrorCode::kInvalidUsage);
  expectRejected("seq", [](WireHeader& h) { h.seq = 43; }, ErrorCode::kInvalidUsage);
}

TEST(CheckHeader, DisagreementDescribesBothCalls) {
  WireHeader got = expectedHeader();
  got.count = 101;
  auto e = check(got);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(mentions(*e, "count=100")) << e->what();
  EXPECT_TRUE(mentions(*e, "count=101")) << e->what();

  got = expectedHeader();
  got.op = uint8_t(RedOp::kMax);
  e = check(got);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(mentions(*e, "sum")) << e->what();
  EXPECT_TRUE(mentions(*e, "max")) << e->what();
}

TEST(CheckHeader, CodecDisagreementNamesBothCodecs) {
  WireHeader got = expectedHeader();
  got.method = 7;  // topk
  got.codec = 7;
  auto e = check(got);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(mentions(*e, "codec=dense")) << e->what();
  EXPECT_TRUE(mentions(*e, "codec=topk")) << e->what();
  EXPECT_TRUE(mentions(*e, "same count, datatype, op, root and codec")) << e->what();

  // PowerSGD's inner all-reduces carry dense payloads; the header still says whose they are.
  got.method = 11;
  got.codec = 0;
  e = check(got);
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(mentions(*e, "codec=powersgd (dense on the wire)")) << e->what();

  WireHeader expected = expectedHeader();
  expected.method = got.method = 7;
  expected.codec = got.codec = 7;
  expected.specHash = 0x1234;
  got.specHash = 0x5678;
  try {
    checkHeader(expected, got, kCapacity, kMyRank);
    ADD_FAILURE() << "different codec settings were accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInvalidUsage) << err.what();
    EXPECT_TRUE(mentions(err, "different settings")) << err.what();
    EXPECT_TRUE(mentions(err, "codec=topk")) << err.what();
  }
}

TEST(CheckHeader, OutOfRangeEnumsDoNotCrash) {
  // A foreign sender may put anything in dtype/op/coll; the message must still be built.
  expectRejected("dtype=200", [](WireHeader& h) { h.dtype = 200; }, ErrorCode::kInvalidUsage);
  expectRejected("op=99", [](WireHeader& h) { h.op = 99; }, ErrorCode::kInvalidUsage);
  expectRejected("coll=250", [](WireHeader& h) { h.coll = 250; }, ErrorCode::kInvalidUsage);
  expectRejected("method=200", [](WireHeader& h) { h.method = 200; }, ErrorCode::kInvalidUsage);
}

TEST(CheckHeader, ScheduleMismatchIsRejected) {
  // step/offset differ only when the two ranks built different schedules from the same call.
  for (auto change : {+[](WireHeader& h) { h.step = 8; }, +[](WireHeader& h) { h.offset = 0; }}) {
    WireHeader got = expectedHeader();
    change(got);
    auto e = check(got);
    ASSERT_TRUE(e.has_value()) << "a schedule mismatch was accepted";
    EXPECT_TRUE(e->code() == ErrorCode::kInternal || e->code() == ErrorCode::kInvalidUsage)
        << e->what();
    EXPECT_TRUE(mentions(*e, "rank 3")) << e->what();
    EXPECT_TRUE(mentions(*e, "rank 5")) << e->what();
  }
}

TEST(CheckHeader, CorruptionWinsOverOtherDifferences) {
  // A foreign message that also differs in count is reported as foreign, not as a disagreement.
  WireHeader got = expectedHeader();
  got.magic = 1;
  got.count = 7;
  auto e = check(got);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code(), ErrorCode::kRemote) << e->what();
}

TEST(DescribeCall, NamesTheCall) {
  std::string s = describeCall(expectedHeader());
  EXPECT_NE(s.find("allreduce"), std::string::npos) << s;
  EXPECT_NE(s.find("42"), std::string::npos) << s;
  EXPECT_NE(s.find("count=100"), std::string::npos) << s;
  EXPECT_NE(s.find(dataTypeName(DataType::kFloat32)), std::string::npos) << s;
  EXPECT_NE(s.find("sum"), std::string::npos) << s;
}

TEST(WireHeader, LayoutIsFixed) {
  EXPECT_EQ(sizeof(WireHeader), 72u);
  WireHeader h;
  EXPECT_EQ(h.magic, kWireMagic);
  EXPECT_EQ(h.version, kWireVersion);
}

// The methods register their ids from their own files (compress/codecs.h); the ids are the
// protocol, so the ones in use stay what they were when they shipped.
TEST(CodecIds, AreTheProtocols) {
  const char* shipped[] = {"dense", "fp16",  "bf16",      "int8", "qsgd",     "onebit", "terngrad",
                           "topk",  "randk", "threshold", "dgc",  "powersgd", "gravac", "accordion"};
  for (size_t id = 0; id < std::size(shipped); ++id) {
    ASSERT_NE(codecIdName(uint8_t(id)), nullptr) << id;
    EXPECT_STREQ(codecIdName(uint8_t(id)), shipped[id]) << id;
  }
  EXPECT_EQ(codecIdName(255), nullptr);
  // The registry holds each method once, in id order, under its header id's name.
  uint8_t previous = 0;
  for (const CodecMethod& m : codecMethods()) {
    EXPECT_STREQ(codecIdName(m.id), m.name);
    if (&m != &codecMethods().front()) {
      EXPECT_GT(m.id, previous) << m.name;
    }
    previous = m.id;
  }
}

TEST(CodecIdsDeathTest, ASecondMethodUnderAnIdOrANameStopsAtStartUp) {
  EXPECT_DEATH(registerCodecIdName(7, "mine"), "'topk' and 'mine' both have wire id 7");
  EXPECT_DEATH(registerCodecIdName(200, "topk"), "'topk' is registered under ids 7 and 200");
}

}  // namespace
}  // namespace squeeze
