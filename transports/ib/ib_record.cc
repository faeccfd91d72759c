// SQZ_IB_HCA parsing and the ib connection record (see ib_record.h).
//
// Record layout (little-endian, kIbRecordBytes = 80):
//   0 magic u32 | 4 version u16 | 6 record size u16 | 8 commHash u64 | 16 rank i32 | 20 qpn u32
//  24 psn u32 | 28 lid u16 | 30 port u8 | 31 link layer u8 | 32 mtu u8 | 33 gid index u8
//  34 reserved u16 (0) | 36 max writes u32 | 40 gid [16] | 56 ring address u64 | 64 rkey u32
//  68 reserved u32 (0) | 72 ring bytes u64
#include "transports/ib/ib_record.h"

#include <cctype>
#include <cstring>

#include "base/error.h"
#include "base/strings.h"

namespace squeeze {
namespace {

constexpr size_t kMaxDeviceNameBytes = 63;  // IBV_SYSFS_NAME_MAX is 64 with the terminator

template <class T>
void put(std::string& out, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out[at + i] = static_cast<char>(static_cast<uint64_t>(v) >> (8 * i) & 0xff);
}

template <class T>
T get(std::string_view in, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t(static_cast<uint8_t>(in[at + i])) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

IbHcaSpec parseIbHcaSpec(std::string_view spec) {
  IbHcaSpec out;
  if (spec.empty()) return out;
  auto bad = [&](const std::string& why) {
    raise(ErrorCode::kInvalidArgument, "SQZ_IB_HCA='", spec, "' ", why,
          "; use device[:port], e.g. mlx5_0 or mlx5_0:1 (`ibv_devices` lists the devices), or "
          "leave it empty for the first device with an active port.");
  };
  std::string_view name = spec;
  const size_t colon = spec.find(':');
  if (colon != std::string_view::npos) {
    name = spec.substr(0, colon);
    std::string_view port = spec.substr(colon + 1);
    if (port.empty()) bad("has no port number (1 to 255) after the ':'");
    for (char c : port)
      if (!std::isdigit(static_cast<unsigned char>(c))) bad("has a port that is not a number");
    int p = 0;
    for (char c : port.substr(0, 4)) p = p * 10 + (c - '0');
    if (port.size() > 3 || p < 1 || p > 255) bad(strCat("names port ", port, ", outside 1 to 255"));
    out.port = p;
  }
  if (name.empty()) bad("names no device");
  if (name.size() > kMaxDeviceNameBytes)
    bad(strCat("names a device of ", name.size(), " characters (at most ", kMaxDeviceNameBytes,
               ")"));
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      bad("has a device name with a character other than letters, digits, '_', '-' or '.'");
  out.device = std::string(name);
  return out;
}

std::string encodeIbRecord(const IbConnRecord& r) {
  std::string out(kIbRecordBytes, '\0');
  put<uint32_t>(out, 0, kIbRecordMagic);
  put<uint16_t>(out, 4, kIbRecordVersion);
  put<uint16_t>(out, 6, static_cast<uint16_t>(kIbRecordBytes));
  put<uint64_t>(out, 8, r.commHash);
  put<uint32_t>(out, 16, static_cast<uint32_t>(r.rank));
  put<uint32_t>(out, 20, r.qpn);
  put<uint32_t>(out, 24, r.psn);
  put<uint16_t>(out, 28, r.lid);
  put<uint8_t>(out, 30, r.port);
  put<uint8_t>(out, 31, r.linkLayer);
  put<uint8_t>(out, 32, r.mtu);
  put<uint8_t>(out, 33, r.gidIndex);
  put<uint32_t>(out, 36, r.maxWrites);
  std::memcpy(out.data() + 40, r.gid.data(), 16);
  put<uint64_t>(out, 56, r.ringAddr);
  put<uint32_t>(out, 64, r.ringRkey);
  put<uint64_t>(out, 72, r.ringBytes);
  return out;
}

IbConnRecord parseIbRecord(std::string_view in, const IbRecordExpect& expect) {
  auto bad = [&](const auto&... why) {
    raise(ErrorCode::kRemote, "rank ", expect.myRank, ": rank ", expect.peerRank,
          " sent an ib connection record that ", why...,
          " (another Squeeze version, or not a peer of this communicator)");
  };
  if (in.size() < 8)
    bad("is ", in.size(), " bytes long, too short for its header (expected ", kIbRecordBytes, ")");
  if (get<uint32_t>(in, 0) != kIbRecordMagic) bad("does not start with the record magic");
  const uint16_t version = get<uint16_t>(in, 4);
  if (version != kIbRecordVersion)
    bad("has protocol version ", version, "; this rank speaks version ", kIbRecordVersion);
  const uint16_t declared = get<uint16_t>(in, 6);
  if (declared != kIbRecordBytes || in.size() != kIbRecordBytes)
    bad("is ", in.size(), " bytes long and declares ", declared, "; version ", kIbRecordVersion,
        " records are ", kIbRecordBytes, " bytes");
  if (get<uint16_t>(in, 34) != 0 || get<uint32_t>(in, 68) != 0) bad("has nonzero reserved fields");

  IbConnRecord r;
  r.commHash = get<uint64_t>(in, 8);
  r.rank = static_cast<int32_t>(get<uint32_t>(in, 16));
  r.qpn = get<uint32_t>(in, 20);
  r.psn = get<uint32_t>(in, 24);
  r.lid = get<uint16_t>(in, 28);
  r.port = get<uint8_t>(in, 30);
  r.linkLayer = get<uint8_t>(in, 31);
  r.mtu = get<uint8_t>(in, 32);
  r.gidIndex = get<uint8_t>(in, 33);
  r.maxWrites = get<uint32_t>(in, 36);
  std::memcpy(r.gid.data(), in.data() + 40, 16);
  r.ringAddr = get<uint64_t>(in, 56);
  r.ringRkey = get<uint32_t>(in, 64);
  r.ringBytes = get<uint64_t>(in, 72);

  if (r.commHash != expect.commHash)
    bad("belongs to communicator ", toHex(&r.commHash, 8), ", not ", toHex(&expect.commHash, 8));
  if (r.rank != expect.peerRank) bad("says it comes from rank ", r.rank);
  if (r.qpn == 0 || r.qpn > 0xffffff) bad("has queue pair number ", r.qpn, " (1 to 2^24-1)");
  if (r.psn > 0xffffff) bad("has packet sequence number ", r.psn, " (0 to 2^24-1)");
  if (r.port == 0) bad("has port 0 (ports count from 1)");
  if (r.mtu < kIbMtuMin || r.mtu > kIbMtuMax)
    bad("has MTU code ", int(r.mtu), " (enum ibv_mtu: 1 to 5)");
  bool gidZero = true;
  for (uint8_t b : r.gid) gidZero &= b == 0;
  if (r.linkLayer == kIbLinkLayerInfiniBand) {
    if (r.lid == 0 || r.lid >= 0xc000) bad("has LID ", r.lid, ", not a unicast LID (1 to 0xbfff)");
  } else if (r.linkLayer == kIbLinkLayerEthernet) {
    if (gidZero) bad("is for RoCE but has an all-zero GID (index ", int(r.gidIndex), ")");
  } else {
    bad("has link layer ", int(r.linkLayer), " (1: InfiniBand, 2: Ethernet)");
  }
  if (r.maxWrites == 0 || r.maxWrites > kIbMaxWritesLimit)
    bad("allows ", r.maxWrites, " writes in flight (1 to ", kIbMaxWritesLimit, ")");
  if (r.ringAddr == 0) bad("has a null receive ring address");
  if (r.ringBytes < kIbMinRingBytes || r.ringBytes > kIbMaxRingBytes)
    bad("has a receive ring of ", r.ringBytes, " bytes (", kIbMinRingBytes, " to ", kIbMaxRingBytes,
        ")");
  if (r.ringAddr + r.ringBytes < r.ringAddr) bad("has a receive ring that wraps the address space");
  return r;
}

std::string ibLinkLayerName(uint8_t linkLayer) {
  if (linkLayer == kIbLinkLayerInfiniBand) return "InfiniBand";
  if (linkLayer == kIbLinkLayerEthernet) return "RoCE (Ethernet)";
  return strCat("link layer ", int(linkLayer));
}

int ibMtuBytes(uint8_t mtu) { return mtu >= kIbMtuMin && mtu <= kIbMtuMax ? 128 << mtu : 0; }

}  // namespace squeeze
