// The harness's side of its ranks: starting them (fork and exec of this program in rank mode,
// with the event, stderr and go-ahead pipes on fixed fds; in a network lab's namespaces with
// FAULT_LAB), reading their events and stderr with every wait bounded, and reaping them,
// killing whoever does not exit in time.
#pragma once

#include <squeeze/squeeze.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "protocol.h"

namespace squeeze::fault {

// One line a rank wrote to its event pipe.
struct Event {
  std::string kind;  // call, abort, note, fail, stage, done
  int call = -1;
  int rc = 0;
  int64_t t = 0;  // call: when it returned; abort: ns from the abort to the call's return
  std::string text;
};

// One rank as the harness sees it: its pipes, what it reported, and how it exited.
struct RankProc {
  pid_t pid = -1;
  int eventFd = -1;  // read ends
  int errFd = -1;
  int goFd = -1;  // write end
  std::string pending;
  std::string err;
  std::vector<Event> events;
  bool reaped = false;
  int status = 0;

  const Event* firstFailedCall() const {
    for (const Event& e : events)
      if (e.kind == "call" && e.rc != sqzSuccess) return &e;
    return nullptr;
  }
  int okCalls() const {
    int n = 0;
    for (const Event& e : events) n += e.kind == "call" && e.rc == sqzSuccess;
    return n;
  }
  const Event* find(const std::string& kind, const std::string& text = "") const {
    for (const Event& e : events)
      if (e.kind == kind && (text.empty() || e.text == text)) return &e;
    return nullptr;
  }
};

// Starts ranks first .. first + count - 1 (all kRanks by default) as
// `sqz-fault-harness rank MODE R ARGS...` (rankArgs: MODE ARGS...) over `transport`, with
// SQZ_TIMEOUT_MS=timeoutMs and loopback sockets.
std::vector<RankProc> spawnRanks(const std::vector<std::string>& rankArgs, const char* transport,
                                 int timeoutMs, int first = 0, int count = kRanks, int host = -1);

// FAULT_LAB=NAME: the ranks run in the network lab NAME (tests/netlab/netlab.sh up --name NAME,
// at least kRanks hosts), rank r on host r (or on spawnRanks's `host`), over the hosts' lab0
// interface; the harness moves itself into host 0's network namespace, so that its rendezvous is
// on the lab too. Returns "" when there is no FAULT_LAB or the lab is entered, else why not.
std::string enterLab();
// The interface ranks and the harness use: "lab0" in a lab, else "lo".
const char* rankInterface();

// Reads whatever the ranks have written, waiting at most until `deadline`, and returns as soon
// as `done()` holds (checked after every read, and at least every 50 ms).
bool pump(std::vector<RankProc>& ranks, int64_t deadline, const std::function<bool()>& done);

// Waits for every rank to exit on its own until `deadline`, then SIGCONTs and SIGKILLs the rest.
// Returns the ranks that had to be killed.
std::vector<int> reapAll(std::vector<RankProc>& ranks, int64_t deadline);

}  // namespace squeeze::fault
