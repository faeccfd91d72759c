// The kill, stop, abort and recover cases: run the ranks, inject the fault, judge the bounds
// (see cases.h).
#include "cases.h"

#include <signal.h>
#include <squeeze/squeeze.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "census.h"
#include "checks.h"
#include "protocol.h"
#include "rank_control.h"

namespace squeeze::fault {
namespace {

std::string msText(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", ns / 1e6);
  return buf;
}

bool newUniqueId(sqzUniqueId* id) {
  sqzResult_t rc = sqzGetUniqueId(id);
  if (rc == sqzSuccess) return true;
  std::printf("  ERROR: sqzGetUniqueId: %s: %s\n", resultName(rc), sqzGetLastError(nullptr));
  return false;
}

struct Totals {
  int reps = 0;
  int passed = 0;
  double maxMs = 0;
  double minMs = 1e300;
};

// "tcp", or "tcp -d cuda" for the device variant: how the lines name a case's setting.
std::string settingName(const char* transport, bool cuda) {
  return std::string(transport) + (cuda ? " -d cuda" : "");
}

// One kill or stop repetition; prints its line and returns whether it met every bound. cuda: the
// ranks' calls are on device buffers, enqueued on a stream (rank.h); each survivor's message is
// printed.
bool signalRepetition(bool stop, const char* transport, bool cuda, int rep, int reps,
                      std::mt19937_64& rng, Totals& totals) {
  const int timeoutMs = stop ? kStopTimeoutMs : kKillTimeoutMs;
  const int64_t upperNs = stop ? timeoutMs * kMs * 11 / 10 : timeoutMs * kMs + 2 * kSec;
  const int64_t lowerNs = stop ? timeoutMs * kMs * 95 / 100 : 0;
  const int sig = stop ? SIGSTOP : SIGKILL;
  const char* caseName = stop ? "stop" : "kill";
  std::string why;  // empty: the repetition passed

  sqzUniqueId id{};
  if (!newUniqueId(&id)) {
    ++totals.reps;
    std::printf("%s %s %d/%d: FAILED: no rendezvous id\n", caseName,
                settingName(transport, cuda).c_str(), rep, reps);
    return false;
  }
  std::vector<std::string> rankArgs = {"loop", hexEncode(id)};
  if (cuda) rankArgs.push_back("cuda");
  std::vector<RankProc> ranks = spawnRanks(rankArgs, transport, timeoutMs);

  // All four inside the loop: each has finished its second call.
  auto anyFailed = [&] {
    for (const RankProc& rp : ranks)
      if (rp.firstFailedCall() || rp.find("fail") || rp.find("done") || rp.eventFd < 0) return true;
    return false;
  };
  auto allRunning = [&] {
    if (anyFailed()) return true;
    for (const RankProc& rp : ranks)
      if (rp.okCalls() < 2) return false;
    return true;
  };
  pump(ranks, nowNs() + 60 * kSec, allRunning);
  int victim = -1;
  int64_t signalledAt = 0;
  std::vector<int> survivors;
  if (anyFailed()) {
    why = "a rank failed or left before the signal";
  } else if (!allRunning()) {
    why = "the 4 ranks did not all finish 2 calls within 60 s";
  } else {
    sleepNs(static_cast<int64_t>(rng() % 201) * kMs);
    victim = static_cast<int>(rng() % kRanks);
    signalledAt = nowNs();
    kill(ranks[victim].pid, sig);
    for (int r = 0; r < kRanks; ++r)
      if (r != victim) survivors.push_back(r);
    // Wait past the bound a little, so a late error is told apart from none at all.
    pump(ranks, signalledAt + upperNs + 3 * kSec, [&] {
      for (int r : survivors)
        if (!ranks[r].firstFailedCall() && ranks[r].eventFd >= 0) return false;
      return true;
    });
  }
  if (stop && victim >= 0) kill(ranks[victim].pid, SIGCONT);
  if (victim >= 0) kill(ranks[victim].pid, SIGKILL);
  // Survivors leave on their own once their call has failed.
  std::vector<int> killed = reapAll(ranks, nowNs() + 5 * kSec);

  char line[1024];
  std::string detail;
  bool sawTimeout = false;
  std::vector<std::string> messages;
  for (int r : survivors) {
    const Event* e = ranks[r].firstFailedCall();
    if (!e) {
      snprintf(line, sizeof line, "%s rank %d no error", detail.empty() ? "" : ";", r);
      detail += line;
      if (why.empty())
        why = "rank " + std::to_string(r) + " reported no failed call within " +
              std::to_string((upperNs + 3 * kSec) / kMs) + " ms of the signal" +
              (cuda ? " (cudaStreamSynchronize never returned: the stream was not released)" : "");
      continue;
    }
    const double ms = (e->t - signalledAt) / 1e6;
    snprintf(line, sizeof line, "%s rank %d %s in #%d after %.0f ms", detail.empty() ? "" : ";", r,
             resultName(e->rc), e->call, ms);
    detail += line;
    totals.maxMs = std::max(totals.maxMs, ms);
    totals.minMs = std::min(totals.minMs, ms);
    if (why.empty() && e->rc != sqzRemoteError && e->rc != sqzTimeout)
      why = "rank " + std::to_string(r) + " got " + resultName(e->rc) +
            " (expected RemoteError or Timeout): " + e->text;
    if (why.empty() && e->t < signalledAt)
      why = "rank " + std::to_string(r) + "'s call failed before the signal: " + e->text;
    if (why.empty() && e->t - signalledAt > upperNs)
      why = "rank " + std::to_string(r) + " failed " + msText(e->t - signalledAt) +
            " ms after the signal, past the bound of " + std::to_string(upperNs / kMs) + " ms";
    if (why.empty() && e->t - signalledAt < lowerNs)
      why = "rank " + std::to_string(r) + " failed " + msText(e->t - signalledAt) +
            " ms after the signal, before the timeout could have passed (" +
            std::to_string(lowerNs / kMs) + " ms)";
    if (cuda) messages.push_back("rank " + std::to_string(r) + ": " + e->text);
    if (e->rc == sqzTimeout) {
      sawTimeout = true;
      if (stop) {
        messages.push_back("rank " + std::to_string(r) + ": " + e->text);
        std::string problem = timeoutMessageProblem(*e, r);
        if (why.empty() && !problem.empty())
          why = "rank " + std::to_string(r) + "'s timeout message " + problem + ": " + e->text;
      }
    }
    if (why.empty() && ranks[r].find("fail"))
      why = "rank " + std::to_string(r) + ": " + ranks[r].find("fail")->text;
    if (why.empty() && !exitedCleanly(ranks[r]))
      why = "rank " + std::to_string(r) + " did not exit cleanly after its error (" +
            exitText(ranks[r]) + ")";
  }
  // The first survivor to fail lost the killed rank itself; the others may name that survivor.
  if (why.empty() && cuda && victim >= 0 &&
      std::none_of(survivors.begin(), survivors.end(), [&](int r) {
        const Event* e = ranks[r].firstFailedCall();
        return e && namesRank(e->text, victim);
      }))
    why = "no survivor's error names the killed rank " + std::to_string(victim);
  if (why.empty() && stop && !sawTimeout && victim >= 0)
    why = "no survivor reported Timeout: somebody must have waited on the stopped rank";
  for (int r : killed)
    if (why.empty() && r != victim)
      why = "rank " + std::to_string(r) + " had to be killed: it did not exit 5 s after the fault";
  // Survivors unlinked their segments; a SIGKILLed victim cannot, so its are noted and removed.
  for (int r = 0; r < kRanks; ++r) {
    for (const std::string& name : shmSegmentsOf(ranks[r].pid)) {
      if (r == victim) {
        std::printf("  note: the killed rank %d left /dev/shm/%s; removed\n", r, name.c_str());
        unlink(("/dev/shm/" + name).c_str());
      } else if (why.empty()) {
        why = "rank " + std::to_string(r) + " exited and left /dev/shm/" + name;
      }
    }
  }

  ++totals.reps;
  const bool ok = why.empty();
  totals.passed += ok;
  // The victim's reported calls say whether the signal landed inside the survivors' failed call.
  std::printf("%s %s %d/%d: victim rank %d (had reported %d calls):%s -> %s%s\n", caseName,
              settingName(transport, cuda).c_str(), rep, reps, victim,
              victim >= 0 ? ranks[victim].okCalls() : 0, detail.c_str(),
              ok ? "ok" : "FAILED: ", why.c_str());
  for (const std::string& m : messages)
    std::printf("  %s of %s\n", cuda ? "a later call's message" : "timeout message", m.c_str());
  if (!ok) printRankLogs(ranks);
  std::fflush(stdout);
  return ok;
}

}  // namespace

namespace {

// ---- recover --------------------------------------------------------------------------------

struct RecoverTotals {
  int reps = 0, passed = 0;
  int allShrunk = 0, allFailed = 0, mixed = 0;  // second: the shrink's outcomes
  std::vector<double> recoveryMs;               // kill -> first call on the shrunk communicator
};

// The number after `key` in text (" shrunk SIZE NEWRANK REVOKEAT SHRUNKAT": field k of it).
int64_t field(const std::string& text, int k) {
  std::istringstream in(text);
  std::string word;
  int64_t v = -1;
  in >> word;  // "shrunk"
  for (int i = 0; i <= k && (in >> v); ++i) {
  }
  return v;
}

const Event* callEvent(const RankProc& rp, int call) {
  for (const Event& e : rp.events)
    if (e.kind == "call" && e.call == call) return &e;
  return nullptr;
}

// One recover repetition (see fault_harness.cc); prints its line, returns whether it passed.
bool recoverRepetition(const char* transport, bool second, int rep, int reps, std::mt19937_64& rng,
                       RecoverTotals& totals) {
  const int timeoutMs = kKillTimeoutMs;
  const int64_t detectBoundNs = timeoutMs * kMs + 2 * kSec;
  const char* caseName = second ? "recover-second" : "recover";
  std::string why;
  ++totals.reps;
  sqzUniqueId id{}, growId{};
  if (!newUniqueId(&id) || !newUniqueId(&growId)) {
    std::printf("%s %s %d/%d: FAILED: no rendezvous id\n", caseName, transport, rep, reps);
    return false;
  }
  std::vector<std::string> args = {"recover", hexEncode(id), hexEncode(growId)};
  if (second) args.push_back("second");
  std::vector<RankProc> ranks = spawnRanks(args, transport, timeoutMs);
  auto anyFailed = [&] {
    for (const RankProc& rp : ranks)
      if (rp.firstFailedCall() || rp.find("fail") || rp.find("done") || rp.eventFd < 0) return true;
    return false;
  };
  pump(ranks, nowNs() + 60 * kSec, [&] {
    if (anyFailed()) return true;
    for (const RankProc& rp : ranks)
      if (rp.okCalls() < 2) return false;
    return true;
  });
  int victim = -1, victim2 = -1;
  int64_t signalledAt = 0;
  std::vector<int> survivors, remaining;
  if (anyFailed()) {
    why = "a rank failed or left before the kill";
  } else {
    sleepNs(static_cast<int64_t>(rng() % 201) * kMs);
    victim = static_cast<int>(rng() % kRanks);
    signalledAt = nowNs();
    kill(ranks[victim].pid, SIGKILL);
    for (int r = 0; r < kRanks; ++r)
      if (r != victim) survivors.push_back(r);
    pump(ranks, signalledAt + detectBoundNs + 3 * kSec, [&] {
      for (int r : survivors)
        if (!ranks[r].firstFailedCall() && ranks[r].eventFd >= 0) return false;
      return true;
    });
    remaining = survivors;
    // second: the next victim dies up to 3 ms before the survivors learn of the first (it never
    // joins the shrink) or up to 12 ms after (the shrink takes a few ms on loopback).
    const int64_t secondAfterNs = second ? (static_cast<int64_t>(rng() % 16) - 3) * kMs : 0;
    if (second) victim2 = survivors[rng() % survivors.size()];
    if (second && secondAfterNs < 0) {
      kill(ranks[victim2].pid, SIGKILL);
      sleepNs(-secondAfterNs);
    }
    for (int r : survivors) {
      const Event* e = ranks[r].firstFailedCall();
      if (why.empty() && !e) why = "rank " + std::to_string(r) + " saw no failed call";
      if (why.empty() && e->t - signalledAt > detectBoundNs)
        why = "rank " + std::to_string(r) + " failed " + msText(e->t - signalledAt) +
              " ms after the kill, past the bound of " + msText(detectBoundNs) + " ms";
      const char victimByte = static_cast<char>('0' + victim);
      if (ranks[r].goFd >= 0 && write(ranks[r].goFd, &victimByte, 1) != 1 && why.empty() &&
          r != victim2)
        why = "cannot tell rank " + std::to_string(r) + " the victim";
    }
    if (second) {
      if (secondAfterNs >= 0) {
        sleepNs(secondAfterNs);
        kill(ranks[victim2].pid, SIGKILL);
      }
      remaining.erase(std::find(remaining.begin(), remaining.end(), victim2));
      pump(ranks, nowNs() + 2 * timeoutMs * kMs + 10 * kSec, [&] {
        for (int r : remaining)
          if (!ranks[r].find("done") && ranks[r].eventFd >= 0) return false;
        return true;
      });
    } else {
      pump(ranks, nowNs() + 60 * kSec, [&] {
        for (int r : remaining)
          if (!ranks[r].find("stage", "grow") && !ranks[r].find("fail") && ranks[r].eventFd >= 0)
            return false;
        return true;
      });
      // The replacement joins the grow as rank 3, on the lost rank's host.
      std::vector<RankProc> joiner =
          spawnRanks({"join", hexEncode(growId)}, transport, timeoutMs, kRanks - 1, 1, victim);
      ranks.push_back(std::move(joiner[0]));
      pump(ranks, nowNs() + 60 * kSec, [&] {
        for (size_t r = 0; r < ranks.size(); ++r)
          if (static_cast<int>(r) != victim && !ranks[r].find("done") && ranks[r].eventFd >= 0)
            return false;
        return true;
      });
    }
  }
  for (int v : {victim, victim2})
    if (v >= 0) kill(ranks[v].pid, SIGKILL);
  std::vector<int> killed = reapAll(ranks, nowNs() + 10 * kSec);

  for (size_t r = 0; r < ranks.size() && why.empty(); ++r) {
    if (static_cast<int>(r) == victim || static_cast<int>(r) == victim2) continue;
    const std::string who = r < kRanks ? "rank " + std::to_string(r) : "the joining process";
    if (const Event* f = ranks[r].find("fail")) why = who + ": " + f->text;
    else if (std::find(killed.begin(), killed.end(), static_cast<int>(r)) != killed.end())
      why = who + " had to be killed: it hung";
    else if (!ranks[r].find("done")) why = who + " did not finish";
  }
  std::string detail;
  if (why.empty() && second) {
    // One member list (the leader's), or failures: never two lists.
    int shrunk = 0, size = -1;
    for (int r : remaining) {
      if (const Event* e = ranks[r].find("stage"); e && e->text.rfind("shrunk", 0) == 0) {
        ++shrunk;
        if (size >= 0 && field(e->text, 0) != size)
          why = "a split: the survivors' new communicators have different sizes";
        size = static_cast<int>(field(e->text, 0));
      } else if (!ranks[r].find("shrinkfail")) {
        why = "rank " + std::to_string(r) + " reported no outcome of its shrink";
      }
    }
    const int n = static_cast<int>(remaining.size());
    totals.allShrunk += shrunk == n;
    totals.allFailed += shrunk == 0;
    totals.mixed += shrunk > 0 && shrunk < n;
    detail = shrunk == n ? "all shrunk to " + std::to_string(size)
             : shrunk == 0 ? "all failed"
                           : std::to_string(shrunk) + " of " + std::to_string(n) +
                                 " shrunk to " + std::to_string(size) + ", the others failed";
    if (shrunk == 0)
      if (const Event* e = ranks[remaining[0]].find("shrinkfail")) detail += ": " + e->text;
  } else if (why.empty()) {
    std::map<std::string, std::string> hashes;  // "call codec" -> hash
    int64_t firstCallAt = 0, detectNs = 0, shrinkNs = 0;
    for (int r : survivors) {
      const Event* s = ranks[r].find("stage");
      for (const Event& e : ranks[r].events)
        if (e.kind == "stage" && e.text.rfind("shrunk", 0) == 0) s = &e;
      if (!s || s->text.rfind("shrunk", 0) != 0 || field(s->text, 0) != kRanks - 1) {
        why = "rank " + std::to_string(r) + " did not shrink to 3 ranks";
        break;
      }
      detectNs = std::max(detectNs, ranks[r].firstFailedCall()->t - signalledAt);
      shrinkNs = std::max(shrinkNs, field(s->text, 3) - field(s->text, 2));
      if (const Event* c = callEvent(ranks[r], 1000)) firstCallAt = std::max(firstCallAt, c->t);
      int n = 0;
      for (const Event& e : ranks[r].events) {
        if (e.kind != "hash") continue;
        ++n;
        const std::string key = e.text.substr(0, e.text.rfind(' '));
        const std::string h = e.text.substr(e.text.rfind(' ') + 1);
        auto [it, fresh] = hashes.emplace(key, h);
        if (!fresh && it->second != h && why.empty())
          why = "rank " + std::to_string(r) + "'s compressed result of call/codec " + key +
                " differs from another survivor's";
      }
      if (n != 100 && why.empty())
        why = "rank " + std::to_string(r) + " reported " + std::to_string(n) +
              " compressed results after the shrink, not 100";
    }
    if (why.empty() && firstCallAt > 0) {
      const double ms = (firstCallAt - signalledAt) / 1e6;
      totals.recoveryMs.push_back(ms);
      char line[256];
      std::snprintf(line, sizeof line, "recovery %.0f ms (detect %.0f, revoke+shrink %.0f, first "
                    "call %.0f)", ms, detectNs / 1e6, shrinkNs / 1e6,
                    ms - detectNs / 1e6 - shrinkNs / 1e6);
      detail = line;
    }
  }
  const bool ok = why.empty();
  totals.passed += ok;
  std::printf("%s %s %d/%d: victim rank %d%s: %s -> %s%s\n", caseName, transport, rep, reps,
              victim, victim2 >= 0 ? (", then rank " + std::to_string(victim2)).c_str() : "",
              detail.c_str(), ok ? "ok" : "FAILED: ", why.c_str());
  if (!ok) printRankLogs(ranks);
  std::fflush(stdout);
  return ok;
}

}  // namespace

int recoverCase(const char* transport, bool second, int reps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  RecoverTotals totals;
  for (int rep = 1; rep <= reps; ++rep) recoverRepetition(transport, second, rep, reps, rng, totals);
  std::sort(totals.recoveryMs.begin(), totals.recoveryMs.end());
  if (second)
    std::printf("SUMMARY recover-second %s: %d/%d repetitions ok (shrink outcomes: all shrunk %d, "
                "all failed %d, mixed %d; never a split, never a hang), seed %" PRIu64 "\n",
                transport, totals.passed, reps, totals.allShrunk, totals.allFailed, totals.mixed,
                seed);
  else
    std::printf("SUMMARY recover %s: %d/%d repetitions ok; kill -> first call on the shrunk "
                "communicator: median %.0f ms, max %.0f ms (SQZ_TIMEOUT_MS=%d), seed %" PRIu64 "\n",
                transport, totals.passed, reps,
                totals.recoveryMs.empty() ? 0 : totals.recoveryMs[totals.recoveryMs.size() / 2],
                totals.recoveryMs.empty() ? 0 : totals.recoveryMs.back(), kKillTimeoutMs, seed);
  return totals.passed == reps ? 0 : 1;
}

int signalCase(bool stop, const char* transport, bool cuda, int reps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Totals totals;
  for (int rep = 1; rep <= reps; ++rep)
    signalRepetition(stop, transport, cuda, rep, reps, rng, totals);
  const int timeoutMs = stop ? kStopTimeoutMs : kKillTimeoutMs;
  std::printf(
      "SUMMARY %s %s: %d/%d repetitions ok; survivors' errors max %.0f ms (min %.0f) after the "
      "signal (bound %s%d ms, SQZ_TIMEOUT_MS=%d, seed %" PRIu64 ")\n",
      stop ? "stop" : "kill", settingName(transport, cuda).c_str(), totals.passed, reps,
      totals.maxMs, totals.minMs > 1e299 ? 0 : totals.minMs,
      stop ? (std::to_string(timeoutMs * 95 / 100) + "..").c_str() : "<= ",
      stop ? timeoutMs * 11 / 10 : timeoutMs + 2000, timeoutMs, seed);
  return totals.passed == reps ? 0 : 1;
}

int abortCase(const char* transport) {
  constexpr int64_t kBoundNs = kSec;
  sqzUniqueId first{}, second{};
  if (!newUniqueId(&first) || !newUniqueId(&second)) return 1;
  std::vector<RankProc> ranks =
      spawnRanks({"abort", hexEncode(first), hexEncode(second)}, transport, kAbortTimeoutMs);
  std::string why;
  auto failedEarly = [&] {
    for (const RankProc& rp : ranks)
      if (rp.find("fail") || rp.eventFd < 0) return true;
    return false;
  };
  auto staged = [&] {
    if (failedEarly()) return true;
    if (!ranks[0].find("stage", "aborted")) return false;
    for (int r = 1; r < kRanks; ++r)
      if (!ranks[r].find("stage", "waiting")) return false;
    return true;
  };
  pump(ranks, nowNs() + 60 * kSec, staged);
  if (!staged()) why = "the ranks did not reach the abort within 60 s";
  // Ranks 1-3 go on even after a failure of rank 0, so it shows whether they can recover.
  for (int r = 1; r < kRanks; ++r)
    if (ranks[r].goFd >= 0 && write(ranks[r].goFd, "g", 1) != 1 && why.empty())
      why = "cannot send the go-ahead to rank " + std::to_string(r);
  auto allDone = [&] {
    for (const RankProc& rp : ranks)
      if (rp.eventFd >= 0) return false;
    return true;
  };
  pump(ranks, nowNs() + 60 * kSec, allDone);
  std::vector<int> killed = reapAll(ranks, nowNs() + 5 * kSec);

  const Event* a = ranks[0].find("abort");
  double abortMs = a ? a->t / 1e6 : -1;
  if (why.empty() && !a) why = "rank 0 did not report the aborted call";
  if (why.empty() && a->t > kBoundNs)
    why = "the aborted call returned " + msText(a->t) + " ms after sqzCommAbort (bound 1000)";
  for (int r = 0; r < kRanks && why.empty(); ++r) {
    if (const Event* f = ranks[r].find("fail"))
      why = "rank " + std::to_string(r) + ": " + f->text;
    else if (std::find(killed.begin(), killed.end(), r) != killed.end())
      why = "rank " + std::to_string(r) + " had to be killed";
    else if (!exitedCleanly(ranks[r]))
      why = "rank " + std::to_string(r) + ": " + exitText(ranks[r]);
    else if (!ranks[r].find("done"))
      why = "rank " + std::to_string(r) + " did not finish";
  }
  for (int r = 0; r < kRanks && why.empty(); ++r) {
    bool recovered = false;
    for (const Event& e : ranks[r].events)
      recovered |= e.kind == "call" && e.call == 1 && e.rc == 0;
    if (!recovered)
      why = "rank " + std::to_string(r) + " has no checked all-reduce on the new communicator";
  }
  std::printf("abort %s: the aborted call returned %s %.1f ms after sqzCommAbort: %s\n", transport,
              a ? resultName(a->rc) : "?", abortMs, a ? a->text.c_str() : "");
  for (const Event& e : ranks[0].events)
    if (e.kind == "note") std::printf("  rank 0: %s\n", e.text.c_str());
  const bool ok = why.empty();
  if (!ok) printRankLogs(ranks);
  std::printf(
      "SUMMARY abort %s: %s; abort -> return %.1f ms (bound 1000 ms); new communicator of "
      "the same 4 processes %s\n",
      transport, ok ? "ok" : ("FAILED: " + why).c_str(), abortMs,
      ok ? "all-reduced bit-exact" : "see above");
  return ok ? 0 : 1;
}

}  // namespace squeeze::fault
