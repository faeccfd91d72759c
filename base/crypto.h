// The cryptography Squeeze needs, all from OpenSSL's libcrypto: SHA-256 (checksums, spec and
// secret hashes), HMAC-SHA256 (peers prove they know the job secret by challenge-response, so the
// secret itself never crosses the network), constant-time comparison of MACs, and random bytes
// for secrets and nonces. A vetted library, not hand-written code: reviewers trust it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace squeeze {

using Digest = std::array<uint8_t, 32>;

// Throw Error(kSystem) naming the failed libcrypto call (they fail only when libcrypto cannot
// work at all: no memory, a broken provider configuration).
Digest sha256(const void* data, size_t n);
Digest hmacSha256(const void* key, size_t keyLen, const void* msg, size_t msgLen);

// Compares in time independent of where the first difference is.
bool constantTimeEqual(const void* a, const void* b, size_t n);

// n bytes from libcrypto's CSPRNG. `what` names them for the error (e.g. "the job secret"):
// a failure throws Error(kSystem), never leaves a weak value behind.
void randomBytes(void* out, size_t n, const char* what);

// Initializes libcrypto now (idempotent), which registers its exit handler (OPENSSL_cleanup):
// exit handlers run in reverse order of registration, so one registered after this call runs
// while libcrypto still works. Throws Error(kSystem) when libcrypto cannot initialize.
void initCrypto();

}  // namespace squeeze
