// SQZ_NCCL_CODEC: which ncclAllReduce calls the shim sends through a Squeeze codec. The value is
// a list of SIZE-RANGE=SPEC rules ("1M-inf=topk:ratio=0.01,0-1M=dense"; byte ranges LO-HI with
// K/M/G suffixes and HI 'inf', LO <= bytes < HI), or one SPEC for every size. Commas also separate
// a spec's own keys: an item that does not start with a range continues the rule before it.
// The first rule whose range holds the call's bytes applies; no rule, or "dense", is a plain
// all-reduce. Only float32 calls with ncclSum or ncclAvg are eligible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace squeeze::nccl_shim {

struct CodecRule {
  uint64_t lo = 0, hi = UINT64_MAX;  // bytes, [lo, hi)
  std::string spec;                  // a Squeeze codec spec; "dense": no codec
};

// Throws std::invalid_argument with a message naming the bad item.
std::vector<CodecRule> parseCodecRules(std::string_view text);

// The spec for a call of `bytes`, or "" for a plain all-reduce.
std::string codecFor(const std::vector<CodecRule>& rules, uint64_t bytes);

}  // namespace squeeze::nccl_shim
