// Challenge-response (see auth.h). Wire, after connect:
//   server -> client: ServerChallenge {magic, version, nonceS}
//   client -> server: ClientHello {magic, version, hello fields, nonceC, HMAC(secret, "C"|nonceS|hello)}
//   server -> client: ServerProof {HMAC(secret, "S"|nonceC|hello)}
// Every message has a fixed size, so nothing is allocated from what an unauthenticated peer says.
#include "bootstrap/auth.h"

#include <cstring>

#include "base/crypto.h"
#include "base/error.h"

namespace squeeze {
namespace {

constexpr uint32_t kAuthMagic = 0x4854515a;  // "ZQTH"
constexpr uint32_t kAuthVersion = 1;

struct ServerChallenge {
  uint32_t magic;
  uint32_t version;
  uint8_t nonce[16];
};

struct ClientHello {
  uint32_t magic;
  uint32_t version;
  uint64_t commHash;
  int32_t rank;
  uint8_t purpose;
  uint8_t pad;
  uint16_t index;
  uint8_t nonce[16];
  uint8_t proof[32];
};

struct ServerProof {
  uint8_t proof[32];
};

static_assert(sizeof(ServerChallenge) == ServerHandshake::kChallengeBytes);
static_assert(sizeof(ClientHello) == ServerHandshake::kHelloBytes);
static_assert(sizeof(ServerProof) == ServerHandshake::kProofBytes);

Digest prove(const Secret& secret, char role, const uint8_t nonce[16], const ClientHello& h) {
  uint8_t msg[1 + 16 + 8 + 4 + 1 + 2];
  size_t o = 0;
  msg[o++] = static_cast<uint8_t>(role);
  std::memcpy(msg + o, nonce, 16); o += 16;
  std::memcpy(msg + o, &h.commHash, 8); o += 8;
  std::memcpy(msg + o, &h.rank, 4); o += 4;
  msg[o++] = h.purpose;
  std::memcpy(msg + o, &h.index, 2); o += 2;
  return hmacSha256(secret.data(), secret.size(), msg, o);
}

}  // namespace

void authenticateAsClient(Socket& s, const Secret& secret, const Hello& hello, Deadline deadline) {
  ServerChallenge ch{};
  s.recvAll(&ch, sizeof ch, deadline, "authentication: reading the challenge");
  if (ch.magic != kAuthMagic || ch.version != kAuthVersion)
    raise(ErrorCode::kRemote, "authentication: ", s.peerAddr().toString(),
          " is not a Squeeze endpoint of this version (magic ", ch.magic, ", version ",
          ch.version, ")");
  ClientHello h{};
  h.magic = kAuthMagic;
  h.version = kAuthVersion;
  h.commHash = hello.commHash;
  h.rank = hello.rank;
  h.purpose = static_cast<uint8_t>(hello.purpose);
  h.index = hello.index;
  randomBytes(h.nonce, sizeof h.nonce, "the client's handshake nonce");
  Digest p = prove(secret, 'C', ch.nonce, h);
  std::memcpy(h.proof, p.data(), 32);
  s.sendAll(&h, sizeof h, deadline, "authentication: sending the hello");
  ServerProof sp{};
  s.recvAll(&sp, sizeof sp, deadline,
            "authentication: waiting for the peer to accept (a peer closing here usually means "
            "the ranks were given different unique ids or secrets)");
  Digest expect = prove(secret, 'S', h.nonce, h);
  if (!constantTimeEqual(sp.proof, expect.data(), 32))
    raise(ErrorCode::kInvalidUsage, "authentication: ", s.peerAddr().toString(),
          " does not know this job's secret: the ranks were given different unique ids (or "
          "SQZ_SECRET values).");
}

ServerHandshake::ServerHandshake() {
  ServerChallenge ch{};
  ch.magic = kAuthMagic;
  ch.version = kAuthVersion;
  randomBytes(ch.nonce, sizeof ch.nonce, "the server's handshake challenge");
  std::memcpy(challenge_, &ch, sizeof ch);
}

Hello ServerHandshake::verify(const Secret& secret, const std::string& from) {
  ClientHello h{};
  std::memcpy(&h, hello_, sizeof h);
  if (h.magic != kAuthMagic || h.version != kAuthVersion)
    raise(ErrorCode::kRemote, "authentication: ", from, " sent a hello that is not Squeeze's"
          " (magic ", h.magic, ", version ", h.version, ")");
  ServerChallenge ch{};
  std::memcpy(&ch, challenge_, sizeof ch);
  Digest expect = prove(secret, 'C', ch.nonce, h);
  if (!constantTimeEqual(h.proof, expect.data(), 32))
    raise(ErrorCode::kInvalidUsage, "authentication: a connection from ", from, " claiming rank ",
          h.rank, " does not know this job's secret (a different unique id or SQZ_SECRET);"
          " ignored.");
  Digest mine = prove(secret, 'S', h.nonce, h);
  std::memcpy(proof_, mine.data(), sizeof proof_);
  Hello out;
  out.commHash = h.commHash;
  out.rank = h.rank;
  out.purpose = static_cast<LinkPurpose>(h.purpose);
  out.index = h.index;
  return out;
}

}  // namespace squeeze
