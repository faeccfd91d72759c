// The attacks, one connection each: connecting for an attack (counted in the tally), the two
// that block (bounded) and run on worker threads, garbage and wrong-secret, and the pieces the
// main loop's held attacks use (an abortive close, a non-blocking drain, a plausible hello).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "listeners.h"
#include "tally.h"

namespace squeeze::attack {

// Connects for an attack of kind k, counting the attempt and its result.
int connectFor(Kind k, const Target& t, Tally& tally);

// Closes with an RST instead of a FIN.
void abortiveClose(int fd);

// Reads whatever is there without waiting. False once the peer closed or reset the connection.
bool drain(int fd);

// A hello that passes every size and magic check and fails only the proof.
std::vector<uint8_t> plausibleHello(std::mt19937_64& rng);

// garbage: 1-16 KB of random bytes seeded with huge length fields (some after a valid auth
// magic), then what comes back for 200 ms.
void garbage(Target t, uint64_t seed, Tally& tally);

// wrong-secret: the real client handshake with a random secret; must be refused.
void wrongSecret(Target t, uint64_t seed, Tally& tally);

}  // namespace squeeze::attack
