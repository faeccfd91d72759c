// The rendezvous messages on the wire, after authentication (rendezvous.cc speaks them; the
// bootstrap fuzz target forges them): fixed-size records, so nothing is sized from a peer's word.
#pragma once

#include <cstdint>

namespace squeeze::rendezvous_wire {

struct PeerRecord {
  int32_t rank;
  int32_t pid;
  uint16_t family;  // AF_INET or AF_INET6
  uint16_t port;
  uint8_t addr[16];
  char hostId[96];
};

// rank -> root
struct JoinRequest {
  int32_t nranks;
  PeerRecord self;
};

// root -> rank, followed by nranks PeerRecords when status is 0
struct JoinReplyHeader {
  int32_t status;  // 0 ok; else the ErrorCode of the failure (kInvalidArgument/Usage, kTimeout)
  int32_t nranks;
  uint64_t round;
  char message[256];
};

static_assert(sizeof(JoinRequest) == 128 && sizeof(JoinReplyHeader) == 272,
              "the rendezvous wire format changed: bump the protocol version");

}  // namespace squeeze::rendezvous_wire
