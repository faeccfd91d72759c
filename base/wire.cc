// Header validation for data messages (see wire.h).
#include "base/wire.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/strings.h"
#include "base/types.h"

namespace squeeze {
std::string codecName(uint8_t id) {
  const char* name = codecIdName(id);
  return name ? name : strCat("#", int(id));
}

namespace {

// "topk", or "powersgd (dense on the wire)" when the method sends another chunk codec.
std::string describeCodec(const WireHeader& h) {
  if (h.method == h.codec) return codecName(h.method);
  return strCat(codecName(h.method), " (", codecName(h.codec), " on the wire)");
}

}  // namespace

namespace {
// Filled before main by the methods' registrations; read-only after.
const char** codecIdNames() {
  static const char* names[256] = {};
  return names;
}
}  // namespace

void registerCodecIdName(uint8_t id, const char* name) {
  const char** names = codecIdNames();
  for (int other = 0; other < 256; ++other)
    if (names[other] && std::strcmp(names[other], name) == 0 && other != id) {
      std::fprintf(stderr, "squeeze: codec method '%s' is registered under ids %d and %d\n",
                   name, other, int(id));
      std::abort();
    }
  if (names[id] && std::strcmp(names[id], name) != 0) {
    std::fprintf(stderr, "squeeze: codec methods '%s' and '%s' both have wire id %d; give the "
                 "new one an unused id\n", names[id], name, int(id));
    std::abort();
  }
  names[id] = name;
}

const char* codecIdName(uint8_t id) { return codecIdNames()[id]; }

std::string describeCall(const WireHeader& h) {
  if (h.specHash == kRootedAgreementSpec && h.method == 0)
    return strCat(collKindName(static_cast<CollKind>(h.coll)), " #", h.seq,
                  " (the ranks' agreement on its root, count, datatype and op)");
  std::string call = strCat(collKindName(static_cast<CollKind>(h.coll)), " #", h.seq,
                            " count=", h.count, " ",
                            h.dtype < kNumDataTypes ? dataTypeName(DataType(h.dtype)) : "?", " ",
                            h.op < kNumRedOps ? redOpName(RedOp(h.op)) : "?");
  return strCat(call, " root=", h.root, " codec=", describeCodec(h));
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
      got.codec != expected.codec || got.method != expected.method)
    raise(ErrorCode::kInvalidUsage, "ranks disagree on the collective call: rank ", myRank,
          " is in ", describeCall(expected), " but rank ", peer, " sent data for ",
          describeCall(got),
          ". Every rank must make the same calls in the same order with the same count, "
          "datatype, op, root and codec.");
  if (got.specHash != expected.specHash)
    raise(ErrorCode::kInvalidUsage, "ranks disagree on the codec's settings: rank ", myRank,
          " and rank ", peer, " are both in ", describeCall(expected), " but created the codec "
          "with different settings (spec hashes ", toHex(&expected.specHash, 4), " and ",
          toHex(&got.specHash, 4), "). Create it from the same spec string (or "
          "sqzCodecConfig_t) on every rank.");
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
