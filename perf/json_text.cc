// The -J files' layout and number text around nlohmann's document and string escaping; see
// json_text.h.
#include "json_text.h"

#include <charconv>
#include <cmath>

namespace squeeze::perf {
namespace {

void appendString(std::string& out, const std::string& s) {
  // nlohmann's escaping: quote, backslash and control characters; UTF-8 stays as it is.
  out += Json(s).dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

void appendDouble(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, ec == std::errc() ? end : buf);
}

void newline(std::string& out, int level) {
  out += '\n';
  out.append(2 * static_cast<size_t>(level), ' ');
}

// Appends v, whose members (if it has any) are nested `level` deep.
void append(std::string& out, const Json& v, int level, int lineDepth) {
  switch (v.type()) {
    case Json::value_t::object:
    case Json::value_t::array: {
      const bool object = v.is_object();
      if (v.empty()) {
        out += object ? "{}" : "[]";
        return;
      }
      const bool ownLines = level <= lineDepth;
      out += object ? '{' : '[';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ',';
        if (ownLines)
          newline(out, level);
        else if (!first)
          out += ' ';
        first = false;
        if (object) {
          appendString(out, it.key());
          out += ": ";
        }
        append(out, *it, level + 1, lineDepth);
      }
      if (ownLines) newline(out, level - 1);
      out += object ? '}' : ']';
      return;
    }
    case Json::value_t::string:
      appendString(out, v.get_ref<const std::string&>());
      return;
    case Json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      out += std::to_string(v.get<int64_t>());
      return;
    case Json::value_t::number_unsigned:
      out += std::to_string(v.get<uint64_t>());
      return;
    case Json::value_t::number_float:
      appendDouble(out, v.get<double>());
      return;
    default:  // null, and the binary and discarded values no -J document holds
      out += "null";
      return;
  }
}

}  // namespace

std::string jsonText(const Json& doc, int lineDepth) {
  std::string out;
  append(out, doc, 1, lineDepth);
  return out;
}

}  // namespace squeeze::perf
