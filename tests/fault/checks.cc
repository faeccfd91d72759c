// A rank's exit, its timeout message and its log, as the cases check and print them (see
// checks.h).
#include "checks.h"

#include <squeeze/squeeze.h>
#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "protocol.h"

namespace squeeze::fault {
namespace {

// "#N": how a message names call N. Appended piecewise: g++ 12 warns (-Wrestrict, a false
// positive) on "#" + std::to_string(n) here.
std::string callNumber(int call) {
  std::string s = "#";
  s += std::to_string(call);
  return s;
}

// The ranks named in a message as "rank N".
std::vector<int> ranksNamed(const std::string& text) {
  std::vector<int> named;
  for (size_t pos = 0; (pos = text.find("rank ", pos)) != std::string::npos;) {
    pos += 5;
    if (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
      named.push_back(std::atoi(text.c_str() + pos));
  }
  return named;
}

bool containsNoCase(std::string hay, std::string needle) {
  for (auto* s : {&hay, &needle})
    for (char& c : *s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return hay.find(needle) != std::string::npos;
}

}  // namespace

std::string exitText(const RankProc& rp) {
  if (!rp.reaped) return "not reaped";
  if (WIFEXITED(rp.status)) return "exit " + std::to_string(WEXITSTATUS(rp.status));
  if (WIFSIGNALED(rp.status)) return std::string("killed by ") + strsignal(WTERMSIG(rp.status));
  return "status " + std::to_string(rp.status);
}

bool exitedCleanly(const RankProc& rp) {
  return rp.reaped && WIFEXITED(rp.status) && WEXITSTATUS(rp.status) == 0;
}

void printRankLogs(const std::vector<RankProc>& ranks) {
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const RankProc& rp = ranks[r];
    std::printf("  --- rank %d (pid %d, %s): %d successful calls\n", r, static_cast<int>(rp.pid),
                exitText(rp).c_str(), rp.okCalls());
    for (const Event& e : rp.events)
      if (e.kind != "call" || e.rc != sqzSuccess)
        std::printf("    %s %s%s%s\n", e.kind.c_str(),
                    e.kind == "call" ? (callNumber(e.call) + " ").c_str() : "",
                    e.kind == "call" ? resultName(e.rc) : "",
                    e.text.empty() ? "" : (" " + e.text).c_str());
    if (!rp.err.empty()) {
      std::printf("    stderr:\n");
      size_t from = rp.err.size() > 4000 ? rp.err.size() - 4000 : 0;
      std::string tail = rp.err.substr(from);
      for (size_t pos = 0; pos < tail.size();) {
        size_t nl = tail.find('\n', pos);
        if (nl == std::string::npos) nl = tail.size();
        std::printf("      %s\n", tail.substr(pos, nl - pos).c_str());
        pos = nl + 1;
      }
    }
  }
}

std::string timeoutMessageProblem(const Event& e, int self) {
  std::string missing;
  if (!containsNoCase(e.text, "allreduce") && !containsNoCase(e.text, "all-reduce"))
    missing += " the operation (allreduce)";
  if (e.text.find(callNumber(e.call)) == std::string::npos && !containsNoCase(e.text, "seq"))
    missing += " the sequence number (#" + std::to_string(e.call) + " or 'seq')";
  bool peer = false;
  for (int r : ranksNamed(e.text)) peer |= r != self && r >= 0 && r < kRanks;
  if (!peer) missing += " a peer ('rank N', N other than " + std::to_string(self) + ")";
  return missing.empty() ? "" : "does not name" + missing;
}

bool namesRank(const std::string& text, int rank) {
  for (int r : ranksNamed(text))
    if (r == rank) return true;
  return false;
}

}  // namespace squeeze::fault
