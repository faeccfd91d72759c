// Small string helpers: strCat (stream-style concatenation for messages), byte-size parsing
// ("64K", "1M") and formatting, splitting on a separator.
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace squeeze {

template <class... Args>
std::string strCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Parses "123", "64K", "16M", "1G" (binary multiples, case-insensitive, optional trailing B).
// Returns nullopt on anything else, including overflow.
std::optional<uint64_t> parseBytes(std::string_view s);

// "1.0 KiB"-style rendering used in logs and tables.
std::string formatBytes(uint64_t bytes);

std::vector<std::string> split(std::string_view s, char sep);
// s without leading and trailing spaces and tabs.
std::string trim(std::string_view s);

std::string toHex(const void* data, size_t n);
// Returns false if s is not exactly 2*n hex digits.
bool fromHex(std::string_view s, void* out, size_t n);

}  // namespace squeeze
