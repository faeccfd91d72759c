// Unit tests for base/strings.h: byte-size parsing and formatting, split, hex encoding.
#include "base/strings.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace squeeze {
namespace {

TEST(ParseBytes, PlainNumbers) {
  EXPECT_EQ(parseBytes("0"), 0u);
  EXPECT_EQ(parseBytes("1"), 1u);
  EXPECT_EQ(parseBytes("4096"), 4096u);
  EXPECT_EQ(parseBytes("18446744073709551615"), UINT64_MAX);
}

TEST(ParseBytes, BinarySuffixes) {
  EXPECT_EQ(parseBytes("64K"), 64u << 10);
  EXPECT_EQ(parseBytes("64k"), 64u << 10);
  EXPECT_EQ(parseBytes("16M"), 16u << 20);
  EXPECT_EQ(parseBytes("1G"), 1ull << 30);
  EXPECT_EQ(parseBytes("2T"), 2ull << 40);
  EXPECT_EQ(parseBytes("0K"), 0u);
}

TEST(ParseBytes, OptionalTrailingB) {
  EXPECT_EQ(parseBytes("12kb"), 12u << 10);
  EXPECT_EQ(parseBytes("12KB"), 12u << 10);
  EXPECT_EQ(parseBytes("3Mb"), 3u << 20);
  EXPECT_EQ(parseBytes("7B"), 7u);
  EXPECT_EQ(parseBytes("7b"), 7u);
}

TEST(ParseBytes, RejectsOverflow) {
  EXPECT_EQ(parseBytes("18446744073709551616"), std::nullopt);   // 2^64
  EXPECT_EQ(parseBytes("99999999999999999999999"), std::nullopt);
  EXPECT_EQ(parseBytes("16777216T"), std::nullopt);             // 2^24 * 2^40 = 2^64
  EXPECT_EQ(parseBytes("17179869184G"), std::nullopt);          // 2^34 * 2^30 = 2^64
  EXPECT_EQ(parseBytes("16777215T"), (16777215ull << 40));      // just below: fits
}

TEST(ParseBytes, RejectsGarbage) {
  for (const char* s : {"", "x", "1Q", "K", "-1", "+1", " 1", "1 ", "1.5M", "1KK", "1BB", "1KBB",
                        "0x10", "1e3", "M1"}) {
    EXPECT_EQ(parseBytes(s), std::nullopt) << "input '" << s << "'";
  }
}

TEST(FormatBytes, Units) {
  EXPECT_EQ(formatBytes(0), "0 B");
  EXPECT_EQ(formatBytes(1023), "1023 B");
  EXPECT_EQ(formatBytes(1024), "1.0 KiB");
  EXPECT_EQ(formatBytes(1536), "1.5 KiB");
  EXPECT_EQ(formatBytes(1ull << 20), "1.0 MiB");
  EXPECT_EQ(formatBytes(3ull << 30), "3.0 GiB");
  EXPECT_EQ(formatBytes(5ull << 40), "5.0 TiB");
}

TEST(FormatBytes, ParsesBackForExactMultiples) {
  // formatBytes is for humans, but its exact multiples must not drift from parseBytes.
  EXPECT_EQ(parseBytes("512K"), 512u << 10);
  EXPECT_EQ(formatBytes(*parseBytes("512K")), "512.0 KiB");
}

TEST(Split, Basic) {
  EXPECT_EQ(split("a,b,c", ','), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(split("shm,tcp", ','), (std::vector<std::string>{"shm", "tcp"}));
  EXPECT_EQ(split("one", ','), (std::vector<std::string>{"one"}));
}

TEST(Split, KeepsEmptyFields) {
  EXPECT_EQ(split("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(split(",", ','), (std::vector<std::string>{"", ""}));
  EXPECT_EQ(split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split("a,", ','), (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(split(",a", ','), (std::vector<std::string>{"", "a"}));
}

TEST(Split, OtherSeparator) {
  EXPECT_EQ(split("0-64k:rhd#64k-inf:ring", '#'),
            (std::vector<std::string>{"0-64k:rhd", "64k-inf:ring"}));
}

TEST(StrCat, MixesTypes) {
  EXPECT_EQ(strCat("rank ", 3, " of ", 8u, ": ", 1.5), "rank 3 of 8: 1.5");
}

TEST(Hex, KnownEncoding) {
  const uint8_t bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
  EXPECT_EQ(toHex(bytes, sizeof bytes), "00017f80abff");
  EXPECT_EQ(toHex(bytes, 0), "");
}

TEST(Hex, RoundTripsEveryByte) {
  std::array<uint8_t, 256> in{};
  for (int i = 0; i < 256; ++i) in[i] = static_cast<uint8_t>(i);
  std::string hex = toHex(in.data(), in.size());
  ASSERT_EQ(hex.size(), 512u);
  std::array<uint8_t, 256> out{};
  ASSERT_TRUE(fromHex(hex, out.data(), out.size()));
  EXPECT_EQ(in, out);
}

TEST(Hex, AcceptsUpperCase) {
  uint8_t out[3] = {};
  ASSERT_TRUE(fromHex("ABcdEF", out, 3));
  EXPECT_EQ(out[0], 0xab);
  EXPECT_EQ(out[1], 0xcd);
  EXPECT_EQ(out[2], 0xef);
}

TEST(Hex, RejectsBadInput) {
  uint8_t out[2] = {0x11, 0x22};
  EXPECT_FALSE(fromHex("", out, 2));       // too short
  EXPECT_FALSE(fromHex("abc", out, 2));    // odd length
  EXPECT_FALSE(fromHex("abcdef", out, 2)); // too long
  EXPECT_FALSE(fromHex("zz00", out, 2));   // not hex
  EXPECT_FALSE(fromHex("00g0", out, 2));
  EXPECT_FALSE(fromHex("0x00", out, 2));
  EXPECT_FALSE(fromHex(" 000", out, 2));
  EXPECT_FALSE(fromHex("00-0", out, 2));
  EXPECT_TRUE(fromHex("", out, 0));        // zero bytes: the empty string is exact
}

}  // namespace
}  // namespace squeeze
