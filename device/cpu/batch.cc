// The CPU form of one quantizer job of device/batch.h: the cpu* kernel its QuantSetting names,
// on the job's chunk. What the CUDA stand-in runs for each job of a batch, and what the tests
// compare a GPU's batch with.
#include "device/batch.h"

namespace squeeze::device {

void cpuQuantEncodeJob(const QuantSetting& s, const QuantEncodeJob& j, Feedback* feedback) {
  switch (s.kind) {
    case QuantKind::kInt8:
      return cpuInt8Encode(j.x, j.n, s.block, j.scales, j.codes, feedback);
    case QuantKind::kQsgd:
      return cpuQsgdEncode(j.x, j.n, s.block, s.levels, s.bits, s.key, j.index0, j.scales, j.codes,
                           feedback);
    case QuantKind::kOnebit:
      return cpuOnebitEncode(j.x, j.n, s.block, j.scales, j.codes, feedback);
    case QuantKind::kTerngrad:
      return cpuTerngradEncode(j.x, j.n, s.block, s.key, j.index0, j.scales, j.codes, feedback);
  }
}

void cpuQuantDecodeJob(const QuantSetting& s, const QuantDecodeJob& j, bool add) {
  switch (s.kind) {
    case QuantKind::kInt8:
      return add ? cpuInt8DecodeAdd(j.out, j.local, j.scales, j.codes, j.n, s.block)
                 : cpuInt8Decode(j.scales, j.codes, j.n, s.block, j.out);
    case QuantKind::kQsgd:
      return add ? cpuQsgdDecodeAdd(j.out, j.local, j.scales, j.codes, j.n, s.block, s.levels,
                                    s.bits)
                 : cpuQsgdDecode(j.scales, j.codes, j.n, s.block, s.levels, s.bits, j.out);
    case QuantKind::kOnebit:
      return add ? cpuOnebitDecodeAdd(j.out, j.local, j.scales, j.codes, j.n, s.block)
                 : cpuOnebitDecode(j.scales, j.codes, j.n, s.block, j.out);
    case QuantKind::kTerngrad:
      return add ? cpuTerngradDecodeAdd(j.out, j.local, j.scales, j.codes, j.n, s.block)
                 : cpuTerngradDecode(j.scales, j.codes, j.n, s.block, j.out);
  }
}

}  // namespace squeeze::device
