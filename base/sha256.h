// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104): peers prove they know the job secret with
// HMAC challenge-response, so the secret itself never crosses the network.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace squeeze {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  Digest finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t bufLen_ = 0;
  uint64_t totalBytes_ = 0;
};

Digest sha256(const void* data, size_t n);
Digest hmacSha256(const void* key, size_t keyLen, const void* msg, size_t msgLen);

// Compares in time independent of where the first difference is.
bool constantTimeEqual(const void* a, const void* b, size_t n);

}  // namespace squeeze
