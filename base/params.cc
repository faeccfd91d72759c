// Parameter registry: reads and validates SQZ_* variables (see params.h for the table).
#include "base/params.h"

#include <cstdlib>
#include <string_view>

#include "base/error.h"
#include "base/strings.h"

namespace squeeze {
namespace {

constexpr std::string_view kKeys[] = {
#define SQZ_PARAM_KEY(field, type, key, def, help) key,
    SQZ_PARAMS(SQZ_PARAM_KEY)
#undef SQZ_PARAM_KEY
};

constexpr bool keysAreUnique() {
  for (size_t i = 0; i < std::size(kKeys); ++i)
    for (size_t j = i + 1; j < std::size(kKeys); ++j)
      if (kKeys[i] == kKeys[j]) return false;
  return true;
}
static_assert(keysAreUnique(), "SQZ_PARAMS has a duplicate key");

std::string rawValue(const char* key, const char* def) {
  const char* v = std::getenv(key);
  return v ? std::string(v) : std::string(def);
}

void parseInto(const char* key, const std::string& s, int64_t& out) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    raise(ErrorCode::kInvalidArgument, key, "='", s,
          "' is not an integer; set it to a whole number, e.g. ", key, "=1000, or unset it.");
  out = v;
}

void parseInto(const char* key, const std::string& s, uint64_t& out) {
  auto v = parseBytes(s);
  if (!v)
    raise(ErrorCode::kInvalidArgument, key, "='", s,
          "' is not a byte size; use a number with an optional K, M or G suffix, e.g. ", key,
          "=512K.");
  out = *v;
}

void parseInto(const char* key, const std::string& s, double& out) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v > 0))
    raise(ErrorCode::kInvalidArgument, key, "='", s,
          "' is not a positive number; set it like ", key, "=2.5, or unset it.");
  out = v;
}

void parseInto(const char*, const std::string& s, std::string& out) { out = s; }

}  // namespace

const std::vector<ParamInfo>& paramTable() {
  static const std::vector<ParamInfo> table = {
#define SQZ_PARAM_INFO(field, type, key, def, help) {key, ParamType::type, def, help},
      SQZ_PARAMS(SQZ_PARAM_INFO)
#undef SQZ_PARAM_INFO
  };
  return table;
}

Params loadParams() {
  Params p;
#define SQZ_PARAM_LOAD(field, type, key, def, help) parseInto(key, rawValue(key, def), p.field);
  SQZ_PARAMS(SQZ_PARAM_LOAD)
#undef SQZ_PARAM_LOAD
  return p;
}

std::string paramValueString(const ParamInfo& info) {
  return rawValue(info.key, info.defaultValue);
}

}  // namespace squeeze
