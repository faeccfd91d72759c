// The shrink's agreement (see shrink_agreement.h).
#include "core/shrink_agreement.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "base/error.h"
#include "base/logging.h"
#include "bootstrap/acceptor.h"
#include "bootstrap/auth.h"
#include "bootstrap/rendezvous.h"

namespace squeeze {
namespace {

constexpr char kProposalMagic[4] = {'S', 'Q', 'Z', 'K'};
constexpr char kVerdictMagic[4] = {'S', 'Q', 'Z', 'V'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxVerdictText = 1024;
// A follower's proposal follows its handshake at once: a connection that sends less within this
// is dropped (it is not a survivor in its shrink).
constexpr int kProposalWaitMs = 5000;

struct ProposalHead {
  char magic[4];
  uint32_t version;
  int32_t rank;
  int32_t nranks;
  uint32_t excluded;
};

struct VerdictHead {
  char magic[4];
  uint32_t code;  // 0: agreed; else the ErrorCode every survivor fails with
  uint32_t textBytes;
};

std::string listText(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += strCat(i ? ", " : "", ranks[i]);
  return s + "}";
}

// The excluded ranks of a sorted survivor list.
std::vector<int> excludedOf(const std::vector<int>& survivors, int nranks) {
  std::vector<int> out;
  for (int r = 0; r < nranks; ++r)
    if (!std::binary_search(survivors.begin(), survivors.end(), r)) out.push_back(r);
  return out;
}

// id null: the shrink fails with `code` and `text`.
void sendVerdict(Socket& s, ErrorCode code, const std::string& text, const UniqueIdData* id,
                 Deadline deadline) {
  const bool ok = id != nullptr;
  VerdictHead h{};
  std::memcpy(h.magic, kVerdictMagic, 4);
  h.code = ok ? 0 : static_cast<uint32_t>(code);
  h.textBytes = static_cast<uint32_t>(std::min<size_t>(text.size(), kMaxVerdictText));
  s.sendAll(&h, sizeof h, deadline, "the shrink's verdict");
  s.sendAll(text.data(), h.textBytes, deadline, "the shrink's verdict");
  if (ok) {
    char bytes[UniqueIdData::kBytes];
    id->serialize(bytes);
    s.sendAll(bytes, sizeof bytes, deadline, "the new communicator's id");
  }
}

// The leader: gathers every other survivor's proposal, then gives its verdict.
UniqueIdData lead(const ShrinkParty& p, const std::vector<int>& survivors) {
  const std::vector<int> excluded = excludedOf(survivors, p.nranks);
  const Deadline deadline = deadlineAfterMs(p.timeoutMs);
  AuthAcceptor acceptor(*p.listener, p.secret, strCat("rank ", p.rank, " (shrink leader)"));
  std::map<int, Socket> followers;
  std::string problem;
  ErrorCode code = ErrorCode::kInvalidUsage;
  while (followers.size() + 1 < survivors.size()) {
    std::optional<AuthenticatedPeer> peer = acceptor.next(deadline);
    if (!peer) break;
    if (peer->hello.purpose != LinkPurpose::kRecover || peer->hello.commHash != p.commHash)
      continue;  // not a survivor of this communicator's shrink
    const int from = peer->hello.rank;
    ProposalHead h{};
    std::vector<int32_t> theirs;
    try {
      const Deadline d = std::min(deadline, deadlineAfterMs(kProposalWaitMs));
      peer->sock.recvAll(&h, sizeof h, d, "a shrink proposal");
      if (std::memcmp(h.magic, kProposalMagic, 4) != 0 || h.version != kVersion ||
          h.rank != from || h.nranks != p.nranks || h.excluded > uint32_t(p.nranks))
        continue;
      theirs.resize(h.excluded);
      peer->sock.recvAll(theirs.data(), theirs.size() * sizeof(int32_t), d, "a shrink proposal");
    } catch (const Error& e) {
      SQZ_INFO(kInit, "rank ", p.rank, ": a shrink proposal from rank ", from, " was dropped: ",
               e.what());
      continue;
    }
    const std::vector<int> list(theirs.begin(), theirs.end());
    if (!std::binary_search(survivors.begin(), survivors.end(), from)) {
      if (problem.empty())
        problem = strCat("rank ", from, " called sqzCommShrink, but rank ", p.rank,
                         "'s exclude list ", listText(excluded), " has it");
    } else if (list != excluded) {
      if (problem.empty())
        problem = strCat("the ranks' exclude lists differ: rank ", from, "'s is ",
                         listText(list), ", rank ", p.rank, "'s ", listText(excluded));
    }
    followers[from] = std::move(peer->sock);
  }
  if (problem.empty() && followers.size() + 1 < survivors.size()) {
    std::vector<int> missing;
    for (int r : survivors)
      if (r != p.rank && !followers.count(r)) missing.push_back(r);
    code = ErrorCode::kRemote;
    problem = strCat("rank(s) ", listText(missing), " did not join the shrink within ",
                     p.timeoutMs, " ms (SQZ_TIMEOUT_MS): lost as well, or they did not call "
                     "sqzCommShrink with the exclude list ", listText(excluded));
  }
  const Deadline sendBy = deadlineAfterMs(p.timeoutMs);
  if (!problem.empty()) {
    for (auto& [r, s] : followers) {
      try {
        sendVerdict(s, code, problem, nullptr, sendBy);
      } catch (const Error&) {  // that follower is gone too; the others still hear why
      }
    }
    raise(code, "sqzCommShrink: ", problem, "; nothing was changed.");
  }
  SockAddr bind = p.listenAddrs[p.rank];
  bind.setPort(0);
  const UniqueIdData id = RendezvousRoot::start(bind, 1, p.timeoutMs);
  // A follower lost from here on fails every member's init of the new communicator.
  for (auto& [r, s] : followers) {
    try {
      sendVerdict(s, ErrorCode::kInternal, "", &id, sendBy);
    } catch (const Error& e) {
      SQZ_INFO(kInit, "rank ", p.rank, ": the shrink's verdict did not reach rank ", r, ": ",
               e.what());
    }
  }
  return id;
}

// A follower: proposes to the leader and takes its verdict.
UniqueIdData follow(const ShrinkParty& p, const std::vector<int>& survivors) {
  const int leader = survivors.front();
  const std::vector<int> excluded = excludedOf(survivors, p.nranks);
  const std::string what = strCat("rank ", p.rank, ": the shrink's leader, rank ", leader);
  // The leader waits up to the timeout for the last survivor, then answers.
  const Deadline deadline = deadlineAfterMs(2 * p.timeoutMs + 2000);
  Socket s = Socket::connectTo(p.listenAddrs[leader], deadlineAfterMs(p.timeoutMs), what);
  authenticateAsClient(s, p.secret, Hello{p.commHash, p.rank, LinkPurpose::kRecover, 0},
                       deadline);
  ProposalHead h{};
  std::memcpy(h.magic, kProposalMagic, 4);
  h.version = kVersion;
  h.rank = p.rank;
  h.nranks = p.nranks;
  h.excluded = static_cast<uint32_t>(excluded.size());
  const std::vector<int32_t> list(excluded.begin(), excluded.end());
  s.sendAll(&h, sizeof h, deadline, what);
  s.sendAll(list.data(), list.size() * sizeof(int32_t), deadline, what);
  VerdictHead v{};
  s.recvAll(&v, sizeof v, deadline, what);
  if (std::memcmp(v.magic, kVerdictMagic, 4) != 0 || v.textBytes > kMaxVerdictText)
    raise(ErrorCode::kRemote, what, " sent a verdict this rank cannot read");
  std::string text(v.textBytes, '\0');
  s.recvAll(text.data(), text.size(), deadline, what);
  if (v.code != 0)
    raise(v.code == uint32_t(ErrorCode::kInvalidUsage) ? ErrorCode::kInvalidUsage
                                                       : ErrorCode::kRemote,
          "sqzCommShrink: rank ", leader, " (the shrink's leader): ", text,
          "; nothing was changed.");
  char bytes[UniqueIdData::kBytes];
  s.recvAll(bytes, sizeof bytes, deadline, what);
  return UniqueIdData::parse(bytes);
}

}  // namespace

UniqueIdData agreeOnShrink(const ShrinkParty& party, const std::vector<int>& survivors) {
  if (survivors.front() == party.rank) return lead(party, survivors);
  try {
    return follow(party, survivors);
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("sqzCommShrink", 0) == 0) throw;  // the leader's verdict
    raise(e.code(), "sqzCommShrink: rank ", party.rank, " lost the shrink's leader, rank ",
          survivors.front(), " (lost as well, or it did not call sqzCommShrink): ", e.what(),
          "; nothing was changed.");
  }
}

}  // namespace squeeze
