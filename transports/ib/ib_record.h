// The ib transport's setup inputs, as pure logic (no verbs.h, unit-tested without hardware):
//   - SQZ_IB_HCA ("", "mlx5_0" or "mlx5_0:1") parsed into a device name and a port;
//   - the connection record two ranks exchange over the PeerLink before their RC queue pairs can
//     talk: addressing (LID, GID, QPN, PSN, MTU) and where the sender may write (the receive
//     ring's address, rkey and size, and how many writes may be in flight).
//
// The record has a fixed little-endian layout (kIbRecordBytes, version kIbRecordVersion) written
// field by field, so it does not depend on struct padding or the host's byte order. The parser
// checks size, magic, version, the sender's identity and every range before anything is built
// from it, and throws Error(kRemote) with a sentence naming the peer and the bad field.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace squeeze {

// SQZ_IB_HCA: which device and port the ib transport uses.
struct IbHcaSpec {
  std::string device;  // empty: the first device with an ACTIVE port
  int port = 0;        // 0: the device's first ACTIVE port
};

// Parses "", "mlx5_0" or "mlx5_0:1". Throws Error(kInvalidArgument) naming SQZ_IB_HCA, what is
// wrong, and the expected form.
IbHcaSpec parseIbHcaSpec(std::string_view spec);

// Link layers as struct ibv_port_attr::link_layer spells them (checked against verbs.h where
// verbs.h is available).
constexpr uint8_t kIbLinkLayerInfiniBand = 1;
constexpr uint8_t kIbLinkLayerEthernet = 2;  // RoCE: addressed by GID, not LID
// enum ibv_mtu: 1 = 256 bytes ... 5 = 4096 bytes.
constexpr uint8_t kIbMtuMin = 1;
constexpr uint8_t kIbMtuMax = 5;

constexpr uint32_t kIbRecordMagic = 0x42495153;  // "SQIB" little-endian
constexpr uint16_t kIbRecordVersion = 1;
constexpr size_t kIbRecordBytes = 80;
// Ring sizes a record may announce: a write carries at most a quarter of the ring and its size
// travels in 32 bits of immediate data, so 1 GiB is far inside the limit.
constexpr uint64_t kIbMinRingBytes = 4096;
constexpr uint64_t kIbMaxRingBytes = uint64_t{1} << 30;
constexpr uint32_t kIbMaxWritesLimit = 4096;

struct IbConnRecord {
  uint64_t commHash = 0;
  int32_t rank = -1;
  uint32_t qpn = 0;  // 24 bits, never 0
  uint32_t psn = 0;  // 24 bits
  uint16_t lid = 0;  // InfiniBand only; 0 on RoCE
  uint8_t port = 0;
  uint8_t linkLayer = 0;
  uint8_t mtu = 0;  // the port's active MTU (enum ibv_mtu)
  uint8_t gidIndex = 0;
  uint32_t maxWrites = 0;  // writes the peer may have in flight into this rank's ring
  std::array<uint8_t, 16> gid{};
  uint64_t ringAddr = 0;  // this rank's receive ring, as the peer's RDMA writes address it
  uint32_t ringRkey = 0;
  uint64_t ringBytes = 0;
};

// The exact bytes of a record (kIbRecordBytes of them).
std::string encodeIbRecord(const IbConnRecord& r);

// What the receiving rank knows the record must say.
struct IbRecordExpect {
  int peerRank;
  uint64_t commHash;
  int myRank;  // for messages
};

// Parses and validates a peer's record. Throws Error(kRemote) naming the peer and the field.
IbConnRecord parseIbRecord(std::string_view bytes, const IbRecordExpect& expect);

// "InfiniBand" / "RoCE (Ethernet)" / "link layer N".
std::string ibLinkLayerName(uint8_t linkLayer);
// 256 .. 4096; 0 for a value outside enum ibv_mtu.
int ibMtuBytes(uint8_t mtu);

}  // namespace squeeze
