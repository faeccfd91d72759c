// The fixed header in front of every data message, and its validation. The receiver compares
// the header with what its own schedule expects *before* it reads a payload byte or trusts a
// size, so ranks that disagree (different collective, count, datatype, op, root, codec, sequence
// number) get a sentence naming both sides instead of garbage or a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/types.h"

namespace squeeze {

// A header's codec and method bytes are a codec method's id: part of the protocol, never reused
// or renumbered. The codec registry (compress/registry.cc) registers each method's id and name
// here as it loads, so that a header mismatch names its codec without this layer knowing codecs.
// Registering an id or a name twice stops the program.
void registerCodecIdName(uint8_t id, const char* name);
// The method's name ("topk"), or null for a byte no method has.
const char* codecIdName(uint8_t id);
// The same, or "#<id>" for a byte no method has (for errors).
std::string codecName(uint8_t id);

constexpr uint32_t kWireMagic = 0x57515a53;  // "SZQW" little-endian
constexpr uint16_t kWireVersion = 2;

struct WireHeader {
  uint32_t magic = kWireMagic;
  uint16_t version = kWireVersion;
  uint8_t coll = 0;   // CollKind
  uint8_t codec = 0;  // the chunk codec on the wire (Codec::id(); 0: dense)
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t method = 0;  // the caller's codec method (CollRequest::codecMethod)
  uint8_t reserved = 0;
  int32_t srcRank = 0;
  uint32_t step = 0;      // the algorithm's step number for this message
  uint64_t commHash = 0;  // identifies the communicator
  uint64_t seq = 0;       // the communicator's collective call number
  uint64_t count = 0;     // the call's element count
  uint64_t offset = 0;    // first element of this message's chunk
  uint64_t payloadBytes = 0;
  int32_t root = 0;
  uint32_t specHash = 0;  // the codec's settings (CollRequest::specHash)
};
static_assert(sizeof(WireHeader) == 72, "WireHeader is part of the wire format");

// Checks `got` against `expected` (every field but payloadBytes) and payloadBytes against
// `capacity`. Throws Error naming both ranks and the first difference: kInvalidUsage when the
// ranks' calls disagree, kRemote for a corrupt or foreign message.
void checkHeader(const WireHeader& expected, const WireHeader& got, size_t capacity, int myRank);

// The spec hash of a rooted call's agreement messages (Communicator::agreeOnRootedCall): their
// header names the call's collective and number, and an 8-element int64 max all-reduce.
constexpr uint32_t kRootedAgreementSpec = 0x524f4f54;  // "ROOT"

std::string describeCall(const WireHeader& h);

}  // namespace squeeze
