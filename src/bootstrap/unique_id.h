// The layout behind sqzUniqueId: the rendezvous root's address and the job's 128-bit secret.
// Serialized field by field (no struct memcpy) so the format is fixed across builds.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "transports/tcp/socket.h"

namespace squeeze {

using Secret = std::array<uint8_t, 16>;

struct UniqueIdData {
  SockAddr root;
  Secret secret{};
  uint64_t nonce = 0;  // distinguishes ids that share a root (sqzrun serves several rounds)

  static constexpr size_t kBytes = 128;
  void serialize(char out[kBytes]) const;
  // Throws Error(kInvalidArgument) if the bytes are not a valid id of this version.
  static UniqueIdData parse(const char in[kBytes]);
  // A fresh random secret and nonce for `root`.
  static UniqueIdData create(const SockAddr& root);
  // The id of a rendezvous whose secret is given (SQZ_SECRET): the nonce is derived from it.
  static UniqueIdData fromSecret(const SockAddr& root, const Secret& secret);
  // The hash every message header of communicators made from this id carries (with the round).
  uint64_t commHash(uint64_t round) const;
};

// From libcrypto's RAND_bytes (base/crypto.h); a failure throws, never returns a weak value.
Secret randomSecret();
uint64_t randomU64();

}  // namespace squeeze
