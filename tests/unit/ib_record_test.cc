// The ib transport's setup inputs without hardware (transports/ib/ib_record.h): SQZ_IB_HCA
// parsing, the connection record's byte layout and round trip, and that the parser rejects each
// kind of bad record (size, magic, version, identity, every range) with Error(kRemote) naming
// the peer and the field.
#include "transports/ib/ib_record.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "base/error.h"

namespace squeeze {
namespace {

constexpr int kMe = 2;
constexpr int kPeer = 5;
constexpr uint64_t kHash = 0x1122334455667788ull;

IbConnRecord goodRecord() {
  IbConnRecord r;
  r.commHash = kHash;
  r.rank = kPeer;
  r.qpn = 0x1234;
  r.psn = 0xabcdef;
  r.lid = 7;
  r.port = 1;
  r.linkLayer = kIbLinkLayerInfiniBand;
  r.mtu = 5;
  r.gidIndex = 3;
  r.maxWrites = 64;
  for (int i = 0; i < 16; ++i) r.gid[i] = static_cast<uint8_t>(0xf0 + i);
  r.ringAddr = 0x7f0000001000ull;
  r.ringRkey = 0xdeadbeef;
  r.ringBytes = 4 << 20;
  return r;
}

IbRecordExpect expect() { return IbRecordExpect{kPeer, kHash, kMe}; }

// Parses bytes that must be rejected; returns the message.
std::string rejected(const std::string& bytes) {
  try {
    parseIbRecord(bytes, expect());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemote) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "a bad record was accepted";
  return "";
}

std::string rejected(const IbConnRecord& r) { return rejected(encodeIbRecord(r)); }

std::string rejectedWith(const std::function<void(IbConnRecord&)>& change) {
  IbConnRecord r = goodRecord();
  change(r);
  return rejected(r);
}

// ---- SQZ_IB_HCA -----------------------------------------------------------------------------

TEST(IbHcaSpec, EmptyMeansAnyDeviceAnyPort) {
  IbHcaSpec s = parseIbHcaSpec("");
  EXPECT_EQ(s.device, "");
  EXPECT_EQ(s.port, 0);
}

TEST(IbHcaSpec, DeviceAndOptionalPort) {
  IbHcaSpec a = parseIbHcaSpec("mlx5_0");
  EXPECT_EQ(a.device, "mlx5_0");
  EXPECT_EQ(a.port, 0);
  IbHcaSpec b = parseIbHcaSpec("mlx5_1:2");
  EXPECT_EQ(b.device, "mlx5_1");
  EXPECT_EQ(b.port, 2);
  EXPECT_EQ(parseIbHcaSpec("rxe-eth0.1:255").port, 255);
}

TEST(IbHcaSpec, RejectsMalformedWithTheExpectedForm) {
  for (const char* bad : {":1", "mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256", "mlx5_0:1:2",
                          "mlx5 0", "mlx5_0:-1", "mlx5_0:1000"}) {
    try {
      parseIbHcaSpec(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
      const std::string m = e.what();
      EXPECT_NE(m.find("SQZ_IB_HCA"), std::string::npos) << m;
      EXPECT_NE(m.find("device[:port]"), std::string::npos) << m;
    }
  }
  EXPECT_THROW(parseIbHcaSpec(std::string(64, 'm')), Error);
}

// ---- the record -----------------------------------------------------------------------------

TEST(IbRecord, RoundTrip) {
  const IbConnRecord r = goodRecord();
  const std::string bytes = encodeIbRecord(r);
  ASSERT_EQ(bytes.size(), kIbRecordBytes);
  const IbConnRecord p = parseIbRecord(bytes, expect());
  EXPECT_EQ(p.commHash, r.commHash);
  EXPECT_EQ(p.rank, r.rank);
  EXPECT_EQ(p.qpn, r.qpn);
  EXPECT_EQ(p.psn, r.psn);
  EXPECT_EQ(p.lid, r.lid);
  EXPECT_EQ(p.port, r.port);
  EXPECT_EQ(p.linkLayer, r.linkLayer);
  EXPECT_EQ(p.mtu, r.mtu);
  EXPECT_EQ(p.gidIndex, r.gidIndex);
  EXPECT_EQ(p.maxWrites, r.maxWrites);
  EXPECT_EQ(p.gid, r.gid);
  EXPECT_EQ(p.ringAddr, r.ringAddr);
  EXPECT_EQ(p.ringRkey, r.ringRkey);
  EXPECT_EQ(p.ringBytes, r.ringBytes);
}

TEST(IbRecord, LayoutIsLittleEndianAndFixed) {
  const std::string b = encodeIbRecord(goodRecord());
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(b[i]); };
  EXPECT_EQ(std::string(b.data(), 4), "SQIB");
  EXPECT_EQ(u8(4), kIbRecordVersion);
  EXPECT_EQ(u8(5), 0);
  EXPECT_EQ(u8(6), kIbRecordBytes);
  EXPECT_EQ(u8(8), 0x88);  // commHash, low byte first
  EXPECT_EQ(u8(15), 0x11);
  EXPECT_EQ(u8(16), kPeer);
  EXPECT_EQ(u8(20), 0x34);  // qpn
  EXPECT_EQ(u8(21), 0x12);
  EXPECT_EQ(u8(24), 0xef);  // psn
  EXPECT_EQ(u8(28), 7);     // lid
  EXPECT_EQ(u8(30), 1);     // port
  EXPECT_EQ(u8(31), kIbLinkLayerInfiniBand);
  EXPECT_EQ(u8(32), 5);  // mtu
  EXPECT_EQ(u8(33), 3);  // gid index
  EXPECT_EQ(u8(36), 64);
  EXPECT_EQ(u8(40), 0xf0);  // gid
  EXPECT_EQ(u8(55), 0xff);
  EXPECT_EQ(u8(56), 0x00);  // ring address 0x7f0000001000
  EXPECT_EQ(u8(57), 0x10);
  EXPECT_EQ(u8(64), 0xef);  // rkey
  EXPECT_EQ(u8(72), 0x00);  // ring bytes 4 MiB = 0x400000
  EXPECT_EQ(u8(74), 0x40);
}

TEST(IbRecord, RoceRecordNeedsAGidNotALid) {
  IbConnRecord r = goodRecord();
  r.linkLayer = kIbLinkLayerEthernet;
  r.lid = 0;
  EXPECT_EQ(parseIbRecord(encodeIbRecord(r), expect()).lid, 0);
  r.gid = {};
  const std::string m = rejected(r);
  EXPECT_NE(m.find("all-zero GID"), std::string::npos) << m;
}

TEST(IbRecord, RejectsWrongSizes) {
  const std::string good = encodeIbRecord(goodRecord());
  EXPECT_NE(rejected("").find("too short"), std::string::npos);
  EXPECT_NE(rejected(good.substr(0, 7)).find("too short"), std::string::npos);
  EXPECT_NE(rejected(good.substr(0, kIbRecordBytes - 1)).find("80 bytes"), std::string::npos);
  EXPECT_NE(rejected(good + "x").find("81 bytes long"), std::string::npos);
  std::string declared = good;
  declared[6] = 96;  // declares another size than it has
  EXPECT_NE(rejected(declared).find("declares 96"), std::string::npos);
}

TEST(IbRecord, RejectsMagicVersionAndReserved) {
  std::string b = encodeIbRecord(goodRecord());
  std::string m = b;
  m[0] = 'X';
  EXPECT_NE(rejected(m).find("magic"), std::string::npos);
  std::string v = b;
  v[4] = 9;
  const std::string vm = rejected(v);
  EXPECT_NE(vm.find("protocol version 9"), std::string::npos) << vm;
  EXPECT_NE(vm.find("speaks version 1"), std::string::npos) << vm;
  std::string r1 = b;
  r1[34] = 1;
  EXPECT_NE(rejected(r1).find("reserved"), std::string::npos);
  std::string r2 = b;
  r2[70] = 1;
  EXPECT_NE(rejected(r2).find("reserved"), std::string::npos);
}

TEST(IbRecord, RejectsAnotherCommunicatorOrRank) {
  std::string m = rejectedWith([](IbConnRecord& r) { r.commHash ^= 1; });
  EXPECT_NE(m.find("communicator"), std::string::npos) << m;
  m = rejectedWith([](IbConnRecord& r) { r.rank = kPeer + 1; });
  EXPECT_NE(m.find("comes from rank 6"), std::string::npos) << m;
}

TEST(IbRecord, MessagesNameBothRanks) {
  const std::string m = rejectedWith([](IbConnRecord& r) { r.qpn = 0; });
  EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 5"), std::string::npos) << m;
  EXPECT_NE(m.find("queue pair number 0"), std::string::npos) << m;
}

TEST(IbRecord, RejectsEachOutOfRangeField) {
  struct Case {
    const char* name;
    std::function<void(IbConnRecord&)> change;
    const char* says;
  };
  const Case cases[] = {
      {"qpn 0", [](IbConnRecord& r) { r.qpn = 0; }, "queue pair number"},
      {"qpn > 24 bits", [](IbConnRecord& r) { r.qpn = 0x1000000; }, "queue pair number"},
      {"psn > 24 bits", [](IbConnRecord& r) { r.psn = 0x1000000; }, "packet sequence number"},
      {"port 0", [](IbConnRecord& r) { r.port = 0; }, "port 0"},
      {"mtu 0", [](IbConnRecord& r) { r.mtu = 0; }, "MTU code 0"},
      {"mtu 6", [](IbConnRecord& r) { r.mtu = 6; }, "MTU code 6"},
      {"lid 0 on IB", [](IbConnRecord& r) { r.lid = 0; }, "LID 0"},
      {"multicast lid", [](IbConnRecord& r) { r.lid = 0xc001; }, "unicast"},
      {"link layer 0", [](IbConnRecord& r) { r.linkLayer = 0; }, "link layer 0"},
      {"link layer 3", [](IbConnRecord& r) { r.linkLayer = 3; }, "link layer 3"},
      {"no writes", [](IbConnRecord& r) { r.maxWrites = 0; }, "writes in flight"},
      {"too many writes", [](IbConnRecord& r) { r.maxWrites = kIbMaxWritesLimit + 1; },
       "writes in flight"},
      {"null ring", [](IbConnRecord& r) { r.ringAddr = 0; }, "null receive ring"},
      {"tiny ring", [](IbConnRecord& r) { r.ringBytes = kIbMinRingBytes - 1; }, "receive ring of"},
      {"huge ring", [](IbConnRecord& r) { r.ringBytes = kIbMaxRingBytes + 1; }, "receive ring of"},
      {"wrapping ring",
       [](IbConnRecord& r) {
         r.ringAddr = ~uint64_t{0} - 100;
         r.ringBytes = kIbMinRingBytes;
       },
       "wraps"},
  };
  for (const Case& c : cases) {
    const std::string m = rejectedWith(c.change);
    EXPECT_NE(m.find(c.says), std::string::npos) << c.name << ": " << m;
  }
}

TEST(IbRecord, AcceptsTheRangeLimits) {
  IbConnRecord r = goodRecord();
  r.qpn = 0xffffff;
  r.psn = 0xffffff;
  r.lid = 0xbfff;
  r.maxWrites = kIbMaxWritesLimit;
  r.ringBytes = kIbMaxRingBytes;
  r.mtu = kIbMtuMin;
  EXPECT_NO_THROW(parseIbRecord(encodeIbRecord(r), expect()));
  r.ringBytes = kIbMinRingBytes;
  r.maxWrites = 1;
  r.mtu = kIbMtuMax;
  EXPECT_NO_THROW(parseIbRecord(encodeIbRecord(r), expect()));
}

TEST(IbRecord, Names) {
  EXPECT_EQ(ibLinkLayerName(kIbLinkLayerInfiniBand), "InfiniBand");
  EXPECT_EQ(ibLinkLayerName(kIbLinkLayerEthernet), "RoCE (Ethernet)");
  EXPECT_EQ(ibMtuBytes(1), 256);
  EXPECT_EQ(ibMtuBytes(5), 4096);
  EXPECT_EQ(ibMtuBytes(0), 0);
  EXPECT_EQ(ibMtuBytes(6), 0);
}

}  // namespace
}  // namespace squeeze
