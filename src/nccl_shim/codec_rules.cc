// Parsing and matching of SQZ_NCCL_CODEC rules (codec_rules.h).
#include "nccl_shim/codec_rules.h"

#include <optional>
#include <stdexcept>

#include "base/strings.h"

namespace squeeze::nccl_shim {

namespace {

// "LO-HI" of an item "LO-HI=SPEC", or nullopt when the item does not start with a range.
std::optional<std::pair<uint64_t, uint64_t>> leadingRange(const std::string& item,
                                                          std::string* spec) {
  const size_t eq = item.find('='), dash = item.find('-');
  if (eq == std::string::npos || dash == std::string::npos || dash > eq) return std::nullopt;
  const std::string loText = trim(item.substr(0, dash)), hiText = trim(item.substr(dash + 1, eq - dash - 1));
  const auto lo = parseBytes(loText);
  const auto hi = hiText == "inf" ? std::optional<uint64_t>(UINT64_MAX) : parseBytes(hiText);
  if (!lo || !hi) return std::nullopt;
  *spec = trim(item.substr(eq + 1));
  return std::make_pair(*lo, *hi);
}

}  // namespace

std::vector<CodecRule> parseCodecRules(std::string_view text) {
  std::vector<CodecRule> rules;
  bool ranged = false;
  for (const std::string& raw : split(text, ',')) {
    const std::string item = trim(raw);
    if (item.empty()) continue;
    std::string spec;
    if (auto range = leadingRange(item, &spec)) {
      if (!rules.empty() && !ranged)
        throw std::invalid_argument(strCat(
            "SQZ_NCCL_CODEC: '", item, "' has a size range but the first codec has none; give "
            "every codec a range, e.g. 0-1M=dense,1M-inf=topk:ratio=0.01"));
      if (range->first >= range->second)
        throw std::invalid_argument(strCat("SQZ_NCCL_CODEC: '", item, "' is an empty range; "
                                           "write LO-HI with LO < HI, e.g. 1M-inf"));
      if (spec.empty())
        throw std::invalid_argument(strCat("SQZ_NCCL_CODEC: '", item, "' names no codec after "
                                           "'='; e.g. 1M-inf=topk:ratio=0.01"));
      ranged = true;
      rules.push_back(CodecRule{range->first, range->second, spec});
    } else if (rules.empty()) {
      rules.push_back(CodecRule{0, UINT64_MAX, item});
    } else {
      rules.back().spec += "," + item;  // a key of the rule before: "topk:ratio=0.01,sample=1"
    }
  }
  return rules;
}

std::string codecFor(const std::vector<CodecRule>& rules, uint64_t bytes) {
  for (const CodecRule& r : rules)
    if (bytes >= r.lo && bytes < r.hi) return r.spec == "dense" ? "" : r.spec;
  return "";
}

}  // namespace squeeze::nccl_shim
