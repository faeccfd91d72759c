// CodecSpec parsing and printing (see spec.h).
#include "compress/spec.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/error.h"
#include "base/strings.h"

namespace squeeze {

const char* const kCodecKeys[kNumCodecKeys] = {
    "ratio", "levels", "block",  "threshold", "sample",   "momentum", "clip",     "warmup",
    "rank",  "cols",   "ef",     "min_bytes", "seed",     "cf_min",   "cf_max",   "step",
    "window", "eps",   "omega",  "cf_low",    "cf_high",  "interval", "eta",      "auto_dense"};

namespace {

std::optional<double> CodecSpec::*slotOf(const std::string& key) {
  static std::optional<double> CodecSpec::*const slots[kNumCodecKeys] = {
      &CodecSpec::ratio,    &CodecSpec::levels, &CodecSpec::block,    &CodecSpec::threshold,
      &CodecSpec::sample,   &CodecSpec::momentum, &CodecSpec::clip,   &CodecSpec::warmup,
      &CodecSpec::rank,     &CodecSpec::cols,   &CodecSpec::ef,       &CodecSpec::minBytes,
      &CodecSpec::seed,     &CodecSpec::cfMin,  &CodecSpec::cfMax,    &CodecSpec::step,
      &CodecSpec::window,   &CodecSpec::eps,    &CodecSpec::omega,    &CodecSpec::cfLow,
      &CodecSpec::cfHigh,   &CodecSpec::interval, &CodecSpec::eta,    &CodecSpec::autoDense};
  for (int i = 0; i < kNumCodecKeys; ++i)
    if (key == kCodecKeys[i]) return slots[i];
  return nullptr;
}

// The largest min_bytes kept: beyond 2^53 bytes a double no longer holds every whole number, and
// the canonical string (str()) must parse back to the same value.
constexpr double kMaxMinBytes = 0x1p53;

// The shortest text that parses back to exactly v (str() feeds the spec hash every message
// carries and the saved codec state, so "0.1234567" must not come back as "0.123457").
std::string exactNumber(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

CodecSpec CodecSpec::parse(const std::string& text) {
  CodecSpec spec;
  size_t colon = text.find(':');
  spec.method = trim(text.substr(0, colon));
  if (spec.method.empty())
    raise(ErrorCode::kInvalidArgument, "codec spec '", text, "' has no method; write e.g. "
          "\"topk:ratio=0.001\" or \"qsgd:levels=16\".");
  if (colon == std::string::npos) return spec;
  for (const std::string& raw : split(text.substr(colon + 1), ',')) {
    std::string item = trim(raw);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string key = trim(item.substr(0, eq));
    auto slot = slotOf(key);
    if (!slot && key != "base") {
      std::string keys = "base";
      for (const char* k : kCodecKeys) keys += strCat(", ", k);
      raise(ErrorCode::kInvalidArgument, "codec spec '", text, "': unknown key '", key,
            "'; keys are ", keys, ".");
    }
    if (eq == std::string::npos)
      raise(ErrorCode::kInvalidArgument, "codec spec '", text, "': key '", key,
            "' has no value; write ", key, "=VALUE.");
    std::string value = trim(item.substr(eq + 1));
    if (key == "base") {
      if (value.empty() || value.find_first_of(":=") != std::string::npos)
        raise(ErrorCode::kInvalidArgument, "codec spec '", text, "': base = '", value,
              "' is not a method name; write e.g. base=topk and give topk's keys beside it.");
      if (spec.base)
        raise(ErrorCode::kInvalidArgument, "codec spec '", text, "': key 'base' given twice.");
      spec.base = value;
      continue;
    }
    double v = 0;
    if (key == "min_bytes") {
      auto bytes = parseBytes(value);
      if (!bytes)
        raise(ErrorCode::kInvalidArgument, "codec spec '", text, "': min_bytes '", value,
              "' is not a size (e.g. 4096 or 64K).");
      if (static_cast<double>(*bytes) > kMaxMinBytes)
        raise(ErrorCode::kInvalidArgument, "codec spec '", text, "': min_bytes '", value,
              "' is too large; at most 8P (2^53 bytes), which already sends every tensor dense.");
      v = static_cast<double>(*bytes);
    } else {
      char* end = nullptr;
      v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(v))
        raise(ErrorCode::kInvalidArgument, "codec spec '", text, "': ", key, " = '", value,
              "' is not a number.");
    }
    if (spec.*slot)
      raise(ErrorCode::kInvalidArgument, "codec spec '", text, "': key '", key, "' given twice.");
    spec.*slot = v;
  }
  return spec;
}

std::string CodecSpec::str() const {
  std::string out = method;
  const char* sep = ":";
  if (base) {
    out += strCat(sep, "base=", *base);
    sep = ",";
  }
  for (const char* key : kCodecKeys) {
    const auto& slot = this->*slotOf(key);
    if (!slot) continue;
    // min_bytes is written as the whole number parse reads (parseBytes takes no exponent).
    const bool wholeBytes = &slot == &minBytes && *slot >= 0 && *slot <= kMaxMinBytes &&
                            *slot == std::floor(*slot);
    out += strCat(sep, key, "=",
                  wholeBytes ? std::to_string(static_cast<uint64_t>(*slot)) : exactNumber(*slot));
    sep = ",";
  }
  return out;
}

CodecSpec CodecSpec::without(const std::string& newMethod,
                             const std::vector<std::string>& drop) const {
  CodecSpec out = *this;
  out.method = newMethod;
  out.base.reset();
  for (const std::string& key : drop)
    if (auto slot = slotOf(key)) (out.*slot).reset();
  return out;
}

std::vector<std::string> CodecSpec::keysSet() const {
  std::vector<std::string> keys;
  if (base) keys.push_back("base");
  for (const char* key : kCodecKeys)
    if (this->*slotOf(key)) keys.push_back(key);
  return keys;
}

double CodecSpec::get(const char* key, double def, double lo, double hi) const {
  const auto& slot = this->*slotOf(key);
  double v = slot ? *slot : def;
  if (!(v >= lo && v <= hi))
    raise(ErrorCode::kInvalidArgument, "codec ", method, ": ", key, " = ", v,
          " is out of range; it must be in [", lo, ", ", hi, "].");
  return v;
}

double CodecSpec::getWhole(const char* key, double def, double lo, double hi) const {
  const double v = get(key, def, lo, hi);
  if (v != std::floor(v))
    raise(ErrorCode::kInvalidArgument, "codec ", method, ": ", key, " = ", v,
          " is not a whole number; write e.g. ", key, "=", def, ".");
  return v;
}

double CodecSpec::getRatio(double def) const {
  const double ratio = get("ratio", def, 0, 1);
  if (!(ratio > 0))
    raise(ErrorCode::kInvalidArgument, "codec ", method, ": ratio must be above 0 (the fraction "
          "of values sent, e.g. ", method, ":ratio=", def, ").");
  return ratio;
}

}  // namespace squeeze
