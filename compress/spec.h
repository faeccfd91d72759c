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
      cols, ef, minBytes, seed,
      // adaptive methods (gravac, accordion) and the pay-off guard of every lossy codec
      cfMin, cfMax, step, window, eps, omega, cfLow, cfHigh, interval, eta, autoDense;
  // gravac/accordion: the method they adapt ("topk"); the one key whose value is a name.
  std::optional<std::string> base;

  // "method" or "method:key=value,...". Throws kInvalidArgument naming the bad part.
  static CodecSpec parse(const std::string& text);
  // The canonical spec string: method and every key that is set, in kCodecKeys order.
  std::string str() const;
  // The spec with method `base` and every key except those named in `drop` (adaptive methods
  // build their base codec from it).
  CodecSpec without(const std::string& newMethod, const std::vector<std::string>& drop) const;
  // The keys that are set.
  std::vector<std::string> keysSet() const;

  // value of key or def; and checks lo <= value <= hi, naming the key when not.
  double get(const char* key, double def, double lo, double hi) const;
  // As get, and the value must be a whole number.
  double getWhole(const char* key, double def, double lo, double hi) const;
  // The sparsifiers' ratio: the fraction of values sent, in (0, 1].
  double getRatio(double def) const;
};

// Every numeric key a spec may carry, in canonical order (after "base", which comes first).
constexpr int kNumCodecKeys = 24;
extern const char* const kCodecKeys[kNumCodecKeys];

}  // namespace squeeze
