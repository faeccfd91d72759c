// Fuzz target `header`: the 72-byte WireHeader a peer puts in front of every data message, as
// checkHeader (base/wire.h) validates it against what this rank's schedule expects. The
// input is the received header, the receive buffer's capacity and this rank's number; the first
// bytes also vary the expected side (collective, codec ids, datatype), including codec ids no
// method has. Contract: checkHeader returns or throws squeeze::Error (kRemote, kInvalidUsage or
// kInternal), and when it returns, the header matches the expected one in every field but
// payloadBytes, and payloadBytes fits the capacity.
#include "base/wire.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/header_case.h"

using namespace squeeze;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const WireHeader expected = fuzz::expectedHeader(in);

  WireHeader got = in.pod<WireHeader>();
  const size_t capacity = in.pod<uint64_t>();
  const int myRank = in.pod<int32_t>();

  fuzz::expectOnlyErrors("describeCall", 0, [&] { (void)describeCall(got); });
  const bool threw = fuzz::expectOnlyErrors("checkHeader",
                                            fuzz::codeBit(ErrorCode::kRemote) |
                                                fuzz::codeBit(ErrorCode::kInvalidUsage) |
                                                fuzz::codeBit(ErrorCode::kInternal),
                                            [&] { checkHeader(expected, got, capacity, myRank); });
  if (!threw) {
    if (got.payloadBytes > capacity)
      fuzz::fail(strCat("checkHeader accepted ", got.payloadBytes,
                        " payload bytes for a capacity of ", capacity));
    // Field by field: `reserved` and the padding after `step` carry nothing.
    const WireHeader& e = expected;
    if (got.magic != e.magic || got.version != e.version || got.coll != e.coll ||
        got.codec != e.codec || got.dtype != e.dtype || got.op != e.op || got.method != e.method ||
        got.srcRank != e.srcRank || got.step != e.step || got.commHash != e.commHash ||
        got.seq != e.seq || got.count != e.count || got.offset != e.offset || got.root != e.root ||
        got.specHash != e.specHash)
      fuzz::fail(strCat("checkHeader accepted a header that differs from the expected one: got ",
                        describeCall(got), " step ", got.step, " offset ", got.offset,
                        "; expected ", describeCall(expected)));
  }
  return 0;
}
