// The settings the `codec` target (fuzz_codec.cc) picks from, per codec method in
// codecMethods() order, shared with the seed generator (make_seeds.cc) so that seeds are real
// payloads of exactly these codecs.
#pragma once

#include <cstddef>
#include <vector>

namespace squeeze::fuzz {

constexpr size_t kMaxCodecCount = 600;  // the largest chunk an input asks for

inline const std::vector<std::vector<const char*>>& codecSpecs() {
  static const std::vector<std::vector<const char*>> specs = {
      {"dense"},
      {"fp16"},
      {"bf16"},
      {"int8", "int8:block=1", "int8:block=3", "int8:block=64"},
      {"qsgd", "qsgd:levels=7,block=5", "qsgd:levels=1,block=1", "qsgd:levels=127,block=33",
       "qsgd:levels=8,block=2"},
      {"onebit", "onebit:block=1", "onebit:block=7", "onebit:block=9"},
      {"terngrad", "terngrad:block=1", "terngrad:block=3,seed=5"},
      {"topk", "topk:ratio=0.25", "topk:ratio=0.5,sample=1", "topk:ratio=1",
       "topk:ratio=0.1,sample=1"},
      {"randk", "randk:ratio=0.3,seed=7", "randk:ratio=1"},
      {"threshold:threshold=0.5", "threshold:threshold=1e-30", "threshold:threshold=1e30"},
      {"dgc", "dgc:ratio=0.2", "dgc:ratio=0.5,sample=0"},
      {"powersgd", "powersgd:rank=1", "powersgd:rank=2,cols=3"},
  };
  return specs;
}

}  // namespace squeeze::fuzz
