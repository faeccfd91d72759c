// CodecSpec: a codec's method and settings, parsed from a spec string ("topk:ratio=0.001") or
// filled from sqzCodecConfig_t. Values stay "unset" until the method's defaults apply them.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace squeeze {

struct CodecSpec {
  std::string method;
  // One slot per key; the key names are the spec string's (kCodecKeys).
  std::optional<double> ratio, levels, block, threshold, sample, momentum, clip, warmup, rank,
      cols, ef, minBytes, seed;

  // "method" or "method:key=value,...". Throws kInvalidArgument naming the bad part.
  static CodecSpec parse(const std::string& text);
  // The canonical spec string: method and every key that is set, in kCodecKeys order.
  std::string str() const;
  // The keys that are set.
  std::vector<std::string> keysSet() const;

  // value of key or def; and checks lo <= value <= hi, naming the key when not.
  double get(const char* key, double def, double lo, double hi) const;
  // As get, and the value must be a whole number.
  double getWhole(const char* key, double def, double lo, double hi) const;
  // The sparsifiers' ratio: the fraction of values sent, in (0, 1].
  double getRatio(double def) const;
};

// Every key a spec may carry, in canonical order.
extern const char* const kCodecKeys[13];

}  // namespace squeeze
