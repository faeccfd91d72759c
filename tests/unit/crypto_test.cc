// Unit tests for base/crypto.h: the libcrypto calls behind it give the published FIPS 180-4
// (SHA-256) and RFC 4231 (HMAC-SHA256) vectors, and the comparison and random bytes behave.
#include "base/crypto.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

#include "base/strings.h"

namespace squeeze {
namespace {

std::string hex(const Digest& d) { return toHex(d.data(), d.size()); }
std::string sha(const std::string& s) { return hex(sha256(s.data(), s.size())); }
std::string hmac(const std::string& key, const std::string& msg) {
  return hex(hmacSha256(key.data(), key.size(), msg.data(), msg.size()));
}

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),  // 448 bits
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklm"
                "nopqrlmnopqrsmnopqrstnopqrstu"),  // 896 bits
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, OneMillionA) {
  std::string a(1000000, 'a');
  EXPECT_EQ(sha(a), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  // Lengths around 55/56 (the length field spills into a second block) and 64 (a full block).
  struct Case {
    size_t n;
    const char* digest;
  };
  const Case cases[] = {
      {55, "85528b5baff5639cb8e7daca79d085ac29ac0978e873ed7527158616b2b6c379"},
      {56, "f8ce2f8d6990c639668fe404262f35ed72d8bb145ad6bae786af7284447386df"},
      {63, "9b49777003a4143d8c3f4d3002eb631c6bda8b030a3ccc87f8a21d5f61c89e87"},
      {64, "ee8e658590c9a5e119400a774415a01db104de1ee6e2c29ec69aa73ef46544d2"},
      {65, "2b6c3f7f12b1b12fc5409626dc4e5302d8d37082cbeddea7755eac43aba039c8"},
      {119, "c8bc8a6e9626586bb888ad131d44ed2bd37fc608e902904ade3c566c4208e6ca"},
      {120, "77a2d49d72a11e41678c51f8f0cb67f5cb570f30370c3aeffe266a0d1ee43209"},
  };
  for (const Case& c : cases) EXPECT_EQ(sha(std::string(c.n, 'q')), c.digest) << c.n << " bytes";
}

TEST(HmacSha256, Rfc4231Case1) {
  EXPECT_EQ(hmac(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(HmacSha256, Rfc4231Case2) {
  EXPECT_EQ(hmac("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(HmacSha256, Rfc4231Case3) {
  EXPECT_EQ(hmac(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
}

TEST(HmacSha256, Rfc4231Case4) {
  std::string key;
  for (char c = 1; c <= 25; ++c) key.push_back(c);
  EXPECT_EQ(hmac(key, std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
}

TEST(HmacSha256, Rfc4231Case6KeyLongerThanBlock) {
  EXPECT_EQ(hmac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256, Rfc4231Case7KeyAndDataLongerThanBlock) {
  EXPECT_EQ(hmac(std::string(131, '\xaa'),
                 "This is a test using a larger than block-size key and a larger than block-size "
                 "data. The key needs to be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, KeyExactlyOneBlock) {
  EXPECT_EQ(hmac(std::string(64, 'k'), "x"),
            "f91c4c403625fb06910ef93999265bbd2d62baeaec6ff36455498cc124fe3e66");
}

TEST(HmacSha256, EmptyKeyAndMessage) {
  EXPECT_EQ(hmac("", ""), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(ConstantTimeEqual, ComparesBytes) {
  const uint8_t a[] = {1, 2, 3, 4, 5};
  uint8_t b[] = {1, 2, 3, 4, 5};
  EXPECT_TRUE(constantTimeEqual(a, b, sizeof a));
  EXPECT_TRUE(constantTimeEqual(a, b, 0));
  for (size_t i = 0; i < sizeof b; ++i) {
    b[i] ^= 0x80;
    EXPECT_FALSE(constantTimeEqual(a, b, sizeof a)) << "difference at byte " << i;
    b[i] ^= 0x80;
  }
}

TEST(RandomBytes, FillsAndDiffers) {
  // 32 random bytes are all zero, or repeat, with probability 2^-256: a failure means no entropy.
  std::array<uint8_t, 32> a{}, b{};
  randomBytes(a.data(), a.size(), "a test");
  randomBytes(b.data(), b.size(), "a test");
  EXPECT_NE(a, (std::array<uint8_t, 32>{}));
  EXPECT_NE(a, b);
  randomBytes(nullptr, 0, "nothing");  // zero bytes is a valid request
}

}  // namespace
}  // namespace squeeze
