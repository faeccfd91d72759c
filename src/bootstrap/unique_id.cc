// sqzUniqueId serialization: magic, version, root address, secret, nonce; little-endian fields.
#include "bootstrap/unique_id.h"

#include <netinet/in.h>

#include <cstring>

#include "base/crypto.h"
#include "base/error.h"

namespace squeeze {
namespace {

constexpr uint32_t kIdMagic = 0x4449515a;  // "ZQID"
constexpr uint16_t kIdVersion = 1;

void putU16(char* p, uint16_t v) { std::memcpy(p, &v, 2); }
void putU32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void putU64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint16_t getU16(const char* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
uint32_t getU32(const char* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
uint64_t getU64(const char* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

// Offsets of the fields inside the 128 bytes.
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffFamily = 6, kOffPort = 8, kOffAddr = 12,
                 kOffSecret = 28, kOffNonce = 44, kOffCheck = 52;

}  // namespace

Secret randomSecret() {
  Secret s;
  randomBytes(s.data(), s.size(), "the job secret");
  return s;
}

uint64_t randomU64() {
  uint64_t v;
  randomBytes(&v, sizeof v, "a 64-bit nonce");
  return v;
}

void UniqueIdData::serialize(char out[kBytes]) const {
  std::memset(out, 0, kBytes);
  putU32(out + kOffMagic, kIdMagic);
  putU16(out + kOffVersion, kIdVersion);
  putU16(out + kOffFamily, root.storage.ss_family);
  putU16(out + kOffPort, root.port());
  if (root.storage.ss_family == AF_INET)
    std::memcpy(out + kOffAddr, &reinterpret_cast<const sockaddr_in*>(&root.storage)->sin_addr, 4);
  else
    std::memcpy(out + kOffAddr, &reinterpret_cast<const sockaddr_in6*>(&root.storage)->sin6_addr,
                16);
  std::memcpy(out + kOffSecret, secret.data(), secret.size());
  putU64(out + kOffNonce, nonce);
  // A checksum so a truncated or mangled id is rejected as such, not as a wrong secret later.
  Digest d = sha256(out, kOffCheck);
  std::memcpy(out + kOffCheck, d.data(), 8);
}

UniqueIdData UniqueIdData::parse(const char in[kBytes]) {
  if (getU32(in + kOffMagic) != kIdMagic)
    raise(ErrorCode::kInvalidArgument,
          "the sqzUniqueId is not one made by sqzGetUniqueId (bad magic); pass every rank the id "
          "that one rank got from sqzGetUniqueId, byte for byte.");
  if (getU16(in + kOffVersion) != kIdVersion)
    raise(ErrorCode::kInvalidArgument, "the sqzUniqueId has format version ",
          getU16(in + kOffVersion), " but this library reads version ", kIdVersion,
          "; all ranks must use the same Squeeze version.");
  Digest d = sha256(in, kOffCheck);
  if (std::memcmp(in + kOffCheck, d.data(), 8) != 0)
    raise(ErrorCode::kInvalidArgument,
          "the sqzUniqueId is corrupted (checksum mismatch); it was changed on the way to this "
          "rank.");
  UniqueIdData id;
  uint16_t family = getU16(in + kOffFamily);
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&id.root.storage);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_addr, in + kOffAddr, 4);
    id.root.len = sizeof(sockaddr_in);
  } else if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&id.root.storage);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_addr, in + kOffAddr, 16);
    id.root.len = sizeof(sockaddr_in6);
  } else {
    raise(ErrorCode::kInvalidArgument, "the sqzUniqueId has an unknown address family ", family);
  }
  id.root.setPort(getU16(in + kOffPort));
  std::memcpy(id.secret.data(), in + kOffSecret, id.secret.size());
  id.nonce = getU64(in + kOffNonce);
  return id;
}

UniqueIdData UniqueIdData::create(const SockAddr& root) {
  UniqueIdData id;
  id.root = root;
  id.secret = randomSecret();
  id.nonce = randomU64();
  return id;
}

UniqueIdData UniqueIdData::fromSecret(const SockAddr& root, const Secret& secret) {
  UniqueIdData id;
  id.root = root;
  id.secret = secret;
  Digest d = sha256(secret.data(), secret.size());
  std::memcpy(&id.nonce, d.data(), sizeof id.nonce);
  return id;
}

uint64_t UniqueIdData::commHash(uint64_t round) const {
  char buf[32];
  std::memcpy(buf, secret.data(), 16);
  std::memcpy(buf + 16, &nonce, 8);
  std::memcpy(buf + 24, &round, 8);
  Digest d = sha256(buf, sizeof buf);
  uint64_t h;
  std::memcpy(&h, d.data(), 8);
  return h;
}

}  // namespace squeeze
