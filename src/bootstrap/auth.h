// Mutual challenge-response on a new socket: each side sends a random nonce and proves it knows
// the job secret with HMAC-SHA256 over the other side's nonce and the connection's purpose. Only
// a fixed-size hello is read before the proof checks out, and the secret never crosses the wire.
#pragma once

#include <cstdint>

#include "bootstrap/unique_id.h"
#include "transports/tcp/socket.h"

namespace squeeze {

enum class LinkPurpose : uint8_t { kRendezvous = 1, kControl = 2, kData = 3 };

struct Hello {
  uint64_t commHash = 0;
  int32_t rank = -1;
  LinkPurpose purpose = LinkPurpose::kControl;
  uint16_t index = 0;
};

// Connecting side: sends `hello`, answers the challenge, checks the server's proof.
// Throws Error(kInvalidUsage) if the server does not know the secret.
void authenticateAsClient(Socket& s, const Secret& secret, const Hello& hello, Deadline deadline);

// Accepting side: returns the client's hello once its proof checks out. Throws
// Error(kInvalidUsage) for a wrong secret, kRemote for garbage or a closed connection.
Hello authenticateAsServer(Socket& s, const Secret& secret, Deadline deadline);

}  // namespace squeeze
