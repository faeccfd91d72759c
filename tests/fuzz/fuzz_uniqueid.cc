// Fuzz target `uniqueid`: UniqueIdData::parse (src/bootstrap/unique_id.h), which reads the 128
// bytes of an sqzUniqueId handed to sqzCommInitRank or given as SQZ_UNIQUE_ID. Input: a flag
// byte, then the id (zero-padded or cut to 128 bytes). With the flag's low bit set, the target
// first writes the id's checksum as serialize() would, so the fuzzer gets past it to the address
// family, port and address fields (a random mutation never matches a SHA-256).
// Contract: parse returns or throws Error(kInvalidArgument); an id it accepts serializes back to
// the same 60 meaningful bytes (magic to nonce, with the address's unused tail zero) and can be
// printed and hashed.
#include <cstring>

#include "base/crypto.h"
#include "bootstrap/unique_id.h"
#include "tests/fuzz/fuzz_util.h"

using namespace squeeze;

namespace {
// Offsets inside the 128 bytes (bootstrap/unique_id.cc): the checksum covers [0, kCheckAt).
constexpr size_t kCheckAt = 52, kMeaningful = 60;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const bool fixChecksum = in.byte() & 1;
  char id[UniqueIdData::kBytes] = {};
  std::memcpy(id, in.rest(), std::min(in.left(), sizeof id));
  if (fixChecksum) {
    const Digest d = sha256(id, kCheckAt);
    std::memcpy(id + kCheckAt, d.data(), 8);
  }
  UniqueIdData parsed;
  if (fuzz::expectOnlyErrors("UniqueIdData::parse", fuzz::codeBit(ErrorCode::kInvalidArgument),
                             [&] { parsed = UniqueIdData::parse(id); }))
    return 0;
  char back[UniqueIdData::kBytes];
  parsed.serialize(back);
  // Only bytes parse does not read may differ: serialize writes zeros there (the two after the
  // port, and for IPv4 the address's last 12), and the checksum over them changes with them.
  char expect[UniqueIdData::kBytes];
  std::memcpy(expect, id, sizeof expect);
  std::memset(expect + 10, 0, 2);
  if (parsed.root.storage.ss_family == AF_INET) std::memset(expect + 16, 0, 12);
  const Digest d = sha256(expect, kCheckAt);
  std::memcpy(expect + kCheckAt, d.data(), 8);
  if (std::memcmp(back, expect, kMeaningful) != 0)
    fuzz::fail(strCat("an accepted id serializes differently: ", toHex(id, kMeaningful), " -> ",
                      toHex(back, kMeaningful)));
  fuzz::expectOnlyErrors("printing and hashing an accepted id", 0, [&] {
    (void)parsed.root.toString();
    (void)parsed.commHash(7);
  });
  return 0;
}
