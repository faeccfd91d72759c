// Fuzz target `bootstrap`: the bytes a connecting client or a peer sends while a communicator is
// set up, each through the public function that parses them. The first byte picks
//   0  the client's hello, ServerHandshake::verify (src/bootstrap/auth.h), on 72 bytes; with the
//      next byte odd the target signs them as a client knowing the secret would (HMAC), so the
//      fuzzer reaches the fields behind the proof;
//   1  the rendezvous root's reply, parsed by joinRendezvous (src/bootstrap/rendezvous.cc): a
//      fake root on loopback authenticates, reads the join request and answers with a valid
//      reply for the chosen rank count XOR the input (all zeros: valid), maybe cut short;
//   2  a rank's join request, parsed by the real root (RendezvousRoot::start): a valid request
//      XOR the input; when it is still valid the target joins the other ranks itself so the
//      round completes;
//   3  the tcp transport's setup message (its socket count), and
//   4  the shm transport's (segment names, the pair segment's header, the acknowledgement), both
//      through Transport::connect over a PeerLink that reads the input (src/core/peer_setup.cc
//      runs connect() over the authenticated control socket; the transport choice it exchanges
//      first is 16 bytes, NUL-terminated there before use). The shm header's bytes are XORed
//      onto a valid header in a segment the target creates under the name the peer would use.
// Contract: every step returns or throws squeeze::Error with a code its caller expects; what is
// accepted is what was sent (the handshake's fields and proof, the root's table), and a setup
// accepts only sizes that fit what it maps.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "base/crypto.h"
#include "bootstrap/auth.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/rendezvous_wire.h"
#include "core/config.h"
#include "tests/fuzz/fuzz_util.h"
#include "transports/transport.h"

using namespace squeeze;

namespace {

const Secret kSecret = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
constexpr uint64_t kCommHash = 0x5a5146555a5a4552ull;

bool validCode(ErrorCode c) {
  switch (c) {
    case ErrorCode::kSystem:
    case ErrorCode::kInternal:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kInvalidUsage:
    case ErrorCode::kRemote:
    case ErrorCode::kTimeout:
      return true;
    case ErrorCode::kCuda:  // the bootstrap makes no CUDA call
      return false;
  }
  return false;
}

// ---- 0: the hello --------------------------------------------------------------------------
// The client's side of the proof, written from the wire format in auth.cc's header comment:
// HMAC(secret, role | nonce | commHash | rank | purpose | index).
Digest proofOf(char role, const uint8_t nonce[16], const uint8_t* hello) {
  uint8_t msg[1 + 16 + 8 + 4 + 1 + 2];
  msg[0] = static_cast<uint8_t>(role);
  std::memcpy(msg + 1, nonce, 16);
  std::memcpy(msg + 17, hello + 8, 8);   // commHash
  std::memcpy(msg + 25, hello + 16, 4);  // rank
  msg[29] = hello[20];                   // purpose
  std::memcpy(msg + 30, hello + 22, 2);  // index
  return hmacSha256(kSecret.data(), kSecret.size(), msg, sizeof msg);
}

void hello(fuzz::Input& in) {
  const bool sign = in.byte() & 1;
  ServerHandshake hs;
  uint8_t* h = hs.hello();
  std::memcpy(h, in.rest(), std::min(in.left(), ServerHandshake::kHelloBytes));
  const uint8_t* nonceS = hs.challenge() + 8;
  if (sign) {
    const uint32_t magic = 0x4854515a, version = 1;
    std::memcpy(h, &magic, 4);
    std::memcpy(h + 4, &version, 4);
    const Digest p = proofOf('C', nonceS, h);
    std::memcpy(h + 40, p.data(), 32);
  }
  Hello got;
  const bool threw = fuzz::expectOnlyErrors(
      "ServerHandshake::verify",
      fuzz::codeBit(ErrorCode::kRemote) | fuzz::codeBit(ErrorCode::kInvalidUsage),
      [&] { got = hs.verify(kSecret, "fuzz client"); });
  if (sign && threw) fuzz::fail("verify rejected a hello signed with the right secret");
  if (threw) return;
  if (!constantTimeEqual(h + 40, proofOf('C', nonceS, h).data(), 32))
    fuzz::fail("verify accepted a hello whose proof is wrong");
  uint64_t commHash;
  int32_t rank;
  uint16_t index;
  std::memcpy(&commHash, h + 8, 8);
  std::memcpy(&rank, h + 16, 4);
  std::memcpy(&index, h + 22, 2);
  if (got.commHash != commHash || got.rank != rank || got.index != index ||
      static_cast<uint8_t>(got.purpose) != h[20])
    fuzz::fail("verify returned other fields than the hello carries");
  if (std::memcmp(hs.proof(), proofOf('S', h + 24, h).data(), 32) != 0)
    fuzz::fail("the server's proof is not HMAC(secret, 'S' | client nonce | hello)");
}

// ---- 1 and 2: the rendezvous ---------------------------------------------------------------
using rendezvous_wire::JoinReplyHeader;
using rendezvous_wire::JoinRequest;
using rendezvous_wire::PeerRecord;

PeerRecord recordOf(int rank) {
  PeerRecord r{};
  r.rank = rank;
  r.pid = 1000 + rank;
  r.family = AF_INET;
  r.port = static_cast<uint16_t>(20000 + rank);
  r.addr[0] = 127;
  r.addr[3] = 1;
  std::snprintf(r.hostId, sizeof r.hostId, "fuzzhost/%d", rank);
  return r;
}

PeerInfo infoOf(int rank) {
  PeerInfo p;
  p.rank = rank;
  std::string err;
  p.listenAddr = *SockAddr::parse("127.0.0.1:" + std::to_string(20000 + rank), &err);
  p.hostId = strCat("fuzzhost/", rank);
  p.pid = 1000 + rank;
  return p;
}

void xorInto(void* dst, size_t n, fuzz::Input& in) {
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] ^= in.byte();
}

// A root that answers every join with gReply (mode 1).
struct FakeRoot {
  Socket listener;
  UniqueIdData id;
  std::mutex mu;
  std::vector<char> reply;  // guarded by mu

  void serve() {
    for (;;) {
      auto s = listener.acceptOne(Deadline::max());
      if (!s) continue;
      try {
        const Deadline d = deadlineAfterMs(5000);
        ServerHandshake hs;
        s->sendAll(hs.challenge(), ServerHandshake::kChallengeBytes, d, "fake root");
        s->recvAll(hs.hello(), ServerHandshake::kHelloBytes, d, "fake root");
        hs.verify(kSecret, "fuzz rank");
        s->sendAll(hs.proof(), ServerHandshake::kProofBytes, d, "fake root");
        JoinRequest req;
        s->recvAll(&req, sizeof req, d, "fake root");
        std::vector<char> r;
        {
          std::lock_guard<std::mutex> lock(mu);
          r = reply;
        }
        s->sendAll(r.data(), r.size(), d, "fake root");
      } catch (const std::exception&) {
        // The client gave up first: its own error is what the target checks.
      }
    }
  }
};
FakeRoot* gFakeRoot = nullptr;
UniqueIdData gRootId;  // the real root of mode 2

void joinReply(fuzz::Input& in) {
  const int nranks = 1 + static_cast<int>(in.byte() % 4);
  const int rank = static_cast<int>(in.byte()) % nranks;
  const uint16_t cut = in.pod<uint16_t>();
  JoinReplyHeader h{};
  h.nranks = nranks;
  h.round = 5;
  std::vector<PeerRecord> table;
  for (int r = 0; r < nranks; ++r) table.push_back(recordOf(r));
  xorInto(&h, sizeof h, in);
  xorInto(table.data(), table.size() * sizeof(PeerRecord), in);
  std::vector<char> bytes(sizeof h + table.size() * sizeof(PeerRecord));
  std::memcpy(bytes.data(), &h, sizeof h);
  std::memcpy(bytes.data() + sizeof h, table.data(), table.size() * sizeof(PeerRecord));
  if (cut & 0x8000) bytes.resize((cut & 0x7fff) % bytes.size());
  {
    std::lock_guard<std::mutex> lock(gFakeRoot->mu);
    gFakeRoot->reply = bytes;
  }
  RendezvousResult result;
  try {
    result = joinRendezvous(gFakeRoot->id, rank, nranks, infoOf(rank), 5000);
  } catch (const Error& e) {
    // A failure status the root sends (only these three) is relayed as the error; any other
    // status is the root's fault: a remote error.
    const bool relayed = bytes.size() >= sizeof h && h.status != 0;
    const bool rootCode = h.status == static_cast<int>(ErrorCode::kInvalidArgument) ||
                          h.status == static_cast<int>(ErrorCode::kInvalidUsage) ||
                          h.status == static_cast<int>(ErrorCode::kTimeout);
    if (relayed && !rootCode && e.code() != ErrorCode::kRemote)
      fuzz::fail(strCat("joinRendezvous raised the root's status ", h.status, " as error code ",
                        static_cast<int>(e.code()), validCode(e.code()) ? "" : " (no ErrorCode)",
                        " instead of a remote error: ", e.what()));
    else if (relayed && rootCode && static_cast<int>(e.code()) != h.status)
      fuzz::fail(strCat("the root's status ", h.status, " came back as code ",
                        static_cast<int>(e.code()), ": ", e.what()));
    else if (!relayed && e.code() != ErrorCode::kRemote && e.code() != ErrorCode::kSystem)
      fuzz::fail(strCat("joinRendezvous against the fake root: code ", static_cast<int>(e.code()),
                        ": ", e.what()));
    return;
  } catch (const std::exception& e) {
    fuzz::fail(strCat("joinRendezvous threw a non-squeeze exception: ", e.what()));
  }
  if (h.status != 0 || h.nranks != nranks || bytes.size() < sizeof h + nranks * sizeof(PeerRecord))
    fuzz::fail("joinRendezvous accepted a failed, foreign or truncated reply");
  if (result.peers.size() != static_cast<size_t>(nranks) || result.round != h.round)
    fuzz::fail("joinRendezvous returned another table than the root sent");
  for (int r = 0; r < nranks; ++r)
    if (result.peers[r].rank != r)
      fuzz::fail(strCat("joinRendezvous accepted a table whose entry ", r, " says rank ",
                        result.peers[r].rank));
}

// Joins the real root with `req` (after authenticating as a rank of gRootId) and returns the
// socket, the reply still to read.
Socket sendJoin(const JoinRequest& req, Deadline d) {
  Socket s = Socket::connectTo(gRootId.root, d, "fuzz rank");
  Hello hello;
  hello.commHash = gRootId.nonce;
  hello.rank = req.self.rank;
  hello.purpose = LinkPurpose::kRendezvous;
  authenticateAsClient(s, gRootId.secret, hello, d);
  s.sendAll(&req, sizeof req, d, "fuzz rank: join request");
  return s;
}

void joinRequest(fuzz::Input& in) {
  JoinRequest req{};
  req.nranks = 1;
  req.self = recordOf(0);
  xorInto(&req, sizeof req, in);
  const bool valid = req.nranks >= 1 && req.nranks <= (1 << 16) && req.self.rank >= 0 &&
                     req.self.rank < req.nranks;
  constexpr int kMaxFill = 6;  // the target joins the others itself, so a round completes
  if (valid && req.nranks > kMaxFill) return;
  const Deadline d = deadlineAfterMs(10000);
  try {
    std::vector<std::pair<Socket, JoinRequest>> joins;
    joins.emplace_back(sendJoin(req, d), req);
    if (valid)
      for (int r = 0; r < req.nranks; ++r)
        if (r != req.self.rank) {
          JoinRequest other{req.nranks, recordOf(r)};
          joins.emplace_back(sendJoin(other, d), other);
        }
    for (auto& [sock, sent] : joins) {
      JoinReplyHeader h{};
      sock.recvAll(&h, sizeof h, d, "fuzz rank: join reply");
      if (!valid) {
        if (h.status != static_cast<int32_t>(ErrorCode::kInvalidArgument))
          fuzz::fail(strCat("the root answered status ", h.status, " to rank ", sent.self.rank,
                            " of ", sent.nranks));
        continue;
      }
      if (h.status != 0 || h.nranks != req.nranks)
        fuzz::fail(strCat("the root refused a valid round: status ", h.status, ": ",
                          std::string(h.message, strnlen(h.message, sizeof h.message))));
      std::vector<PeerRecord> table(h.nranks);
      sock.recvAll(table.data(), table.size() * sizeof(PeerRecord), d, "fuzz rank: table");
      for (auto& [unused, each] : joins)
        if (std::memcmp(&table[each.self.rank], &each.self, sizeof(PeerRecord)) != 0)
          fuzz::fail(strCat("the root's table entry ", each.self.rank, " is not what it sent"));
    }
  } catch (const Error& e) {
    fuzz::fail(strCat("rendezvous with the real root: ", e.what()));
  }
}

// ---- 3 and 4: transport setup --------------------------------------------------------------
// A PeerLink whose peer says what `stream` holds; sends go nowhere. The first data socket
// request means the transport accepted everything it read: setup ends there (kReached).
class FuzzLink final : public PeerLink {
 public:
  explicit FuzzLink(std::vector<uint8_t> stream) : stream_(std::move(stream)) {}
  void sendBytes(const void*, size_t) override {}
  void recvBytes(void* data, size_t n) override {
    if (stream_.size() - at_ < n)
      raise(ErrorCode::kRemote, "fuzz link: the peer closed the connection");
    std::memcpy(data, stream_.data() + at_, n);
    at_ += n;
  }
  Socket openDataSocket(uint16_t) override {
    reached = true;
    raise(ErrorCode::kRemote, kReached);
  }
  bool reached = false;
  static constexpr const char* kReached = "fuzz link: setup reached its data sockets";

 private:
  std::vector<uint8_t> stream_;
  size_t at_ = 0;
};

CommConfig* gConfig = nullptr;
std::unique_ptr<Transport> gTcp, gShmLow, gShmHigh;  // shm as rank 0 and as rank 1 of 2
std::string gPeerBell[2];  // doorbells the target made for "peer" rank 0 and rank 1
const std::string gHash = toHex(&kCommHash, 8);

const unsigned kSetupErrors = fuzz::codeBit(ErrorCode::kRemote) | fuzz::codeBit(ErrorCode::kSystem);

void runConnect(Transport& t, int myRank, int peer, FuzzLink& link, const char* what) {
  const PeerInfo self = infoOf(myRank), other = infoOf(peer);
  fuzz::expectOnlyErrors(what, kSetupErrors, [&] {
    try {
      (void)t.connect(LinkSetup{myRank, self, other, kCommHash, *gConfig, link});
    } catch (const Error&) {
      if (!link.reached) throw;
    }
  });
}

void tcpSetup(fuzz::Input& in) {
  // The peer's int32 socket count: the rest of the input, as short as it is.
  FuzzLink link(std::vector<uint8_t>(in.rest(), in.rest() + in.left()));
  const int32_t theirs = in.pod<int32_t>();
  runConnect(*gTcp, 1, 0, link, "tcp connect");
  if (link.reached && (theirs < 1 || theirs > 16))
    fuzz::fail(strCat("tcp setup accepted ", theirs, " sockets"));
}

void putString(std::vector<uint8_t>& out, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  out.insert(out.end(), reinterpret_cast<const uint8_t*>(&n),
             reinterpret_cast<const uint8_t*>(&n) + 4);
  out.insert(out.end(), s.begin(), s.end());
}

// A string the input spells (u32 length, then up to 300 bytes), or `prepared`.
std::string nameFrom(fuzz::Input& in, bool usePrepared, const std::string& prepared) {
  if (usePrepared) return prepared;
  const size_t n = in.pick(301);
  std::string s(reinterpret_cast<const char*>(in.rest()), std::min(n, in.left()));
  for (size_t i = 0; i < s.size(); ++i) (void)in.byte();
  return s;
}

void shmSetup(fuzz::Input& in) {
  const uint8_t flags = in.byte();
  std::vector<uint8_t> stream;
  if (flags & 1) {  // rank 0 of the pair: makes the segment, reads the peer's doorbell name
    putString(stream, nameFrom(in, flags & 2, gPeerBell[1]));
    const uint32_t ack = 0x4b434153;
    stream.insert(stream.end(), reinterpret_cast<const uint8_t*>(&ack),
                  reinterpret_cast<const uint8_t*>(&ack) + 4);
    FuzzLink link(stream);
    runConnect(*gShmLow, 0, 1, link, "shm connect (lower rank)");
    return;
  }
  // Rank 1 of the pair: opens the segment rank 0 names, checks its header, maps rank 0's bell.
  const std::string pairName = strCat("/sqz-", gHash, "-0-1-fz", getpid(), "-pair");
  const size_t pages = 1 + in.byte() % 4;
  struct {
    uint64_t magic = 0x524941505a515153ull;
    uint32_t version = 1;
    int32_t loRank = 0, hiRank = 1;
    uint32_t reserved = 0;
    uint64_t commHash = kCommHash;
    uint64_t ringBytes = 4096;
  } header;
  static_assert(sizeof header == 40);
  xorInto(&header, sizeof header, in);
  const int fd = shm_open(pairName.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(pages * 4096)) != 0 ||
      pwrite(fd, &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header))
    fuzz::fail(strCat("cannot prepare ", pairName, ": ", std::strerror(errno)));
  close(fd);
  putString(stream, nameFrom(in, flags & 2, pairName));
  putString(stream, nameFrom(in, flags & 4, gPeerBell[0]));
  const uint32_t ack = 0x4b434153 ^ in.pod<uint32_t>();
  stream.insert(stream.end(), reinterpret_cast<const uint8_t*>(&ack),
                reinterpret_cast<const uint8_t*>(&ack) + 4);
  FuzzLink link(stream);
  runConnect(*gShmHigh, 1, 0, link, "shm connect (higher rank)");
  shm_unlink(pairName.c_str());
  if (link.reached) {
    // Exact arithmetic: the segment must hold a header page and two rings of ringBytes.
    const unsigned __int128 need =
        4096 + 2 * ((static_cast<unsigned __int128>(header.ringBytes) + 4095) / 4096 * 4096);
    if (need > pages * 4096)
      fuzz::fail(strCat("shm setup accepted a pair segment of ", pages * 4096,
                        " bytes whose header says rings of ", header.ringBytes, " bytes"));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("SQZ_DEBUG", "NONE", 0);
  std::string err;
  SockAddr loopback = *SockAddr::parse("127.0.0.1:1", &err);
  loopback.setPort(0);  // ephemeral (parse takes 1 to 65535)
  gFakeRoot = new FakeRoot;
  gFakeRoot->listener = Socket::listenOn(loopback);
  gFakeRoot->id = UniqueIdData::fromSecret(gFakeRoot->listener.localAddr(), kSecret);
  std::thread([] { gFakeRoot->serve(); }).detach();
  gRootId = RendezvousRoot::startWithSecret(loopback, kSecret, 0, 10000);

  gConfig = new CommConfig;
  gConfig->shmBufferBytes = 64 << 10;
  gTcp = createTransport("tcp", TransportContext{1, 2, kCommHash, *gConfig});
  gShmLow = createTransport("shm", TransportContext{0, 2, kCommHash, *gConfig});
  gShmHigh = createTransport("shm", TransportContext{1, 2, kCommHash, *gConfig});
  // Nobody else maps the transports' own doorbells: their names can go now.
  for (int r = 0; r < 2; ++r)
    shm_unlink(strCat("/sqz-", gHash, "-", r, "-", getpid(), "-bell").c_str());
  for (int r = 0; r < 2; ++r) {
    gPeerBell[r] = strCat("/sqz-", gHash, "-", r, "-fz", getpid(), "-bell");
    const int fd = shm_open(gPeerBell[r].c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) fuzz::fail(strCat("cannot create ", gPeerBell[r]));
    close(fd);
  }
  std::atexit([] {
    for (const std::string& name : gPeerBell) shm_unlink(name.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  switch (in.byte() % 5) {
    case 0:
      hello(in);
      break;
    case 1:
      joinReply(in);
      break;
    case 2:
      joinRequest(in);
      break;
    case 3:
      tcpSetup(in);
      break;
    default:
      shmSetup(in);
      break;
  }
  return 0;
}
