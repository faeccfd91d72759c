// The side of the `header` fuzz target that this rank's schedule expects, read from the input's
// first bytes (fuzz_header.cc); make_seeds.cc builds its seeds around the same header.
#pragma once

#include "base/wire.h"
#include "tests/fuzz/fuzz_util.h"

namespace squeeze::fuzz {

// Consumes 7 bytes: the collective (u16), codec and method ids (12..15: ids no codec method has),
// datatype, op and the sending rank; the other fields are fixed.
inline WireHeader expectedHeader(Input& in) {
  WireHeader expected;
  expected.coll = static_cast<uint8_t>(1 + in.pick(7));
  expected.codec = in.byte() % 16;
  expected.method = in.byte() % 16;
  expected.dtype = in.byte() % kNumDataTypes;
  expected.op = in.byte() % kNumRedOps;
  expected.srcRank = 1 + in.byte() % 8;
  expected.step = 3;
  expected.commHash = 0x0123456789abcdefull;
  expected.seq = 42;
  expected.count = 1000;
  expected.offset = 250;
  expected.root = 0;
  expected.specHash = 0xdeadbeef;
  return expected;
}

}  // namespace squeeze::fuzz
