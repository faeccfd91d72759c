// Header validation for data messages (see wire.h).
#include "core/wire.h"

#include "common/error.h"
#include "common/strings.h"
#include "core/types.h"

namespace squeeze {

std::string describeCall(const WireHeader& h) {
  std::string call = strCat(collKindName(static_cast<CollKind>(h.coll)), " #", h.seq,
                            " count=", h.count, " ",
                            h.dtype < kNumDataTypes ? dataTypeName(DataType(h.dtype)) : "?", " ",
                            h.op < kNumRedOps ? redOpName(RedOp(h.op)) : "?");
  return strCat(call, " root=", h.root, " codec=", int(h.codec));
}

void checkHeader(const WireHeader& expected, const WireHeader& got, size_t capacity, int myRank) {
  const int peer = expected.srcRank;
  if (got.magic != kWireMagic || got.version != kWireVersion)
    raise(ErrorCode::kRemote, "rank ", myRank, " received a corrupt or foreign message from rank ",
          peer, " (magic ", got.magic, " version ", got.version, "; expected ", kWireMagic,
          " version ", kWireVersion, ")");
  if (got.commHash != expected.commHash || got.srcRank != expected.srcRank)
    raise(ErrorCode::kRemote, "rank ", myRank, " received a message for another communicator from"
          " the connection to rank ", peer, " (sender says rank ", got.srcRank, ")");
  if (got.seq != expected.seq || got.coll != expected.coll || got.count != expected.count ||
      got.dtype != expected.dtype || got.op != expected.op || got.root != expected.root ||
      got.codec != expected.codec)
    raise(ErrorCode::kInvalidUsage, "ranks disagree on the collective call: rank ", myRank,
          " is in ", describeCall(expected), " but rank ", peer, " sent data for ",
          describeCall(got),
          ". Every rank must make the same calls in the same order with the same count, "
          "datatype, op and root.");
  if (got.step != expected.step || got.offset != expected.offset)
    raise(ErrorCode::kInternal, "rank ", myRank, " expected step ", expected.step, " offset ",
          expected.offset, " from rank ", peer, " in ", describeCall(expected), " but got step ",
          got.step, " offset ", got.offset, " (ranks built different schedules)");
  if (got.payloadBytes > capacity)
    raise(ErrorCode::kRemote, "rank ", peer, " sent ", got.payloadBytes, " bytes for ",
          describeCall(got), " step ", got.step, " where rank ", myRank, " expected at most ",
          capacity);
}

}  // namespace squeeze
