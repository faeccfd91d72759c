// base/crypto.h over libcrypto's non-deprecated OpenSSL 3 calls: EVP_Digest, HMAC() (EVP_MAC
// underneath), CRYPTO_memcmp, RAND_bytes.
#include "base/crypto.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>

#include "base/error.h"

namespace squeeze {
namespace {

// libcrypto reports why on its thread-local error queue: take the first reason and clear the
// queue, so a later call on this thread does not report a stale one.
template <class... Args>
[[noreturn]] void raiseCrypto(const Args&... failed) {
  char reason[256] = "libcrypto gave no reason";
  if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, reason, sizeof reason);
  ERR_clear_error();
  raise(ErrorCode::kSystem, failed..., ": ", reason);
}

}  // namespace

Digest sha256(const void* data, size_t n) {
  Digest out;
  unsigned int len = 0;
  if (EVP_Digest(data, n, out.data(), &len, EVP_sha256(), nullptr) != 1 || len != out.size())
    raiseCrypto("libcrypto's EVP_Digest could not compute the SHA-256 of ", n, " bytes");
  return out;
}

Digest hmacSha256(const void* key, size_t keyLen, const void* msg, size_t msgLen) {
  SQZ_ENFORCE(keyLen <= INT_MAX, "an HMAC key of ", keyLen, " bytes");
  Digest out;
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key, static_cast<int>(keyLen), static_cast<const unsigned char*>(msg),
            msgLen, out.data(), &len) ||
      len != out.size())
    raiseCrypto("libcrypto's HMAC could not compute an HMAC-SHA256");
  return out;
}

bool constantTimeEqual(const void* a, const void* b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

void randomBytes(void* out, size_t n, const char* what) {
  SQZ_ENFORCE(n <= INT_MAX, "asked for ", n, " random bytes");
  if (RAND_bytes(static_cast<unsigned char*>(out), static_cast<int>(n)) != 1)
    raiseCrypto("libcrypto's RAND_bytes could not make ", n, " random bytes for ", what);
}

void initCrypto() {
  if (OPENSSL_init_crypto(0, nullptr) != 1) raiseCrypto("libcrypto's OPENSSL_init_crypto failed");
}

}  // namespace squeeze
