// Mutual challenge-response on a new socket: each side sends a random nonce and proves it knows
// the job secret with HMAC-SHA256 over the other side's nonce and the connection's purpose. Only
// fixed-size messages are read before the proof checks out, and the secret never crosses the wire.
//
// The connecting side runs its half blocking (authenticateAsClient). The accepting side is a
// pure step (ServerHandshake): an AuthAcceptor drives many of them at once, so a client that
// sends nothing, or one byte at a time, delays no one else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bootstrap/unique_id.h"
#include "transports/tcp/socket.h"

namespace squeeze {

// kRecover: a survivor's link to the shrink's leader (core/shrink_agreement.h).
enum class LinkPurpose : uint8_t { kRendezvous = 1, kControl = 2, kData = 3, kRecover = 4 };

struct Hello {
  uint64_t commHash = 0;
  int32_t rank = -1;
  LinkPurpose purpose = LinkPurpose::kControl;
  uint16_t index = 0;
};

// Connecting side: sends `hello`, answers the challenge, checks the server's proof.
// Throws Error(kInvalidUsage) if the server does not know the secret.
void authenticateAsClient(Socket& s, const Secret& secret, const Hello& hello, Deadline deadline);

// Accepting side of one handshake, without I/O: send challenge(), read exactly kHelloBytes into
// hello(), call verify(), send proof(). Every size is fixed before anything is read.
class ServerHandshake {
 public:
  static constexpr size_t kChallengeBytes = 24;
  static constexpr size_t kHelloBytes = 72;
  static constexpr size_t kProofBytes = 32;

  ServerHandshake();  // draws a fresh nonce
  const uint8_t* challenge() const { return challenge_; }
  uint8_t* hello() { return hello_; }
  // Checks the hello read into hello() against the secret. Returns the client's hello and fills
  // proof(); throws Error(kRemote) for bytes that are not a Squeeze hello of this version and
  // Error(kInvalidUsage) for a wrong secret. `from` names the client in the message.
  Hello verify(const Secret& secret, const std::string& from);
  const uint8_t* proof() const { return proof_; }

 private:
  uint8_t challenge_[kChallengeBytes];
  uint8_t hello_[kHelloBytes] = {};
  uint8_t proof_[kProofBytes] = {};
};

}  // namespace squeeze
