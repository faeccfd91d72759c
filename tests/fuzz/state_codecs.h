// The codecs whose saved state the `state` target loads (fuzz_state.cc), shared with the seed
// generator (make_seeds.cc) so that seed i is a real state of codec i: every kind of state (none,
// a residual, DGC's momentum, PowerSGD's Q; with and without error feedback).
#pragma once

#include <squeeze/squeeze.h>

#include <cstddef>

namespace squeeze::fuzz {

constexpr size_t kStateCount = 37;  // 7 x 6 for PowerSGD's view: low-rank at rank 1 and 2

struct StateCodec {
  const char* spec;
  sqzDataType_t dtype;
};
inline constexpr StateCodec kStateCodecs[] = {
    {"dense", sqzInt32},
    {"fp16", sqzFloat32},
    {"int8:block=8", sqzFloat32},
    {"qsgd:levels=4", sqzFloat32},
    {"onebit", sqzFloat32},
    {"terngrad:ef=0", sqzFloat32},
    {"topk:ratio=0.2", sqzFloat32},
    {"randk:ratio=0.2", sqzFloat32},
    {"threshold:threshold=0.1", sqzFloat32},
    {"dgc:ratio=0.2,warmup=8", sqzFloat32},
    {"dgc:ratio=0.2,ef=0", sqzFloat32},
    {"powersgd:rank=1", sqzFloat32},
    {"powersgd:rank=2,ef=0,min_bytes=0", sqzFloat32},
};
constexpr size_t kNumStateCodecs = sizeof kStateCodecs / sizeof kStateCodecs[0];

}  // namespace squeeze::fuzz
