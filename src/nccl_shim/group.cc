// The shim's group queue (group.h).
#include "nccl_shim/group.h"

#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/strings.h"
#include "nccl_shim/shim_comm.h"
#include "nccl_shim/translate.h"

namespace squeeze::nccl_shim {

namespace {

struct Recorded {
  ncclComm* comm;
  bool p2p;
  GroupCall call;
};

struct GroupState {
  int depth = 0;
  std::vector<GroupCall> inits;
  std::vector<Recorded> calls;
};

thread_local GroupState tlsGroup;
thread_local std::string tlsLastError;

struct Outcome {
  ncclResult_t rc = ncclSuccess;
  std::string message;  // lastError() of the thread that failed
};

Outcome run(const GroupCall& call) {
  const ncclResult_t rc = call();
  return {rc, rc == ncclSuccess ? std::string() : lastError()};
}

// Runs the jobs, on a thread each when there are several (each may wait for peers that another
// one serves); returns the first failure.
Outcome runAll(const std::vector<std::function<Outcome()>>& jobs) {
  std::vector<Outcome> outcomes(jobs.size());
  if (jobs.size() == 1) {
    outcomes[0] = jobs[0]();
  } else {
    std::vector<std::thread> threads;
    threads.reserve(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i)
      threads.emplace_back([&, i] { outcomes[i] = jobs[i](); });
    for (std::thread& t : threads) t.join();
  }
  for (Outcome& o : outcomes)
    if (o.rc != ncclSuccess) return std::move(o);
  return {};
}

// One communicator's recorded calls. NCCL runs a group's operations concurrently, with no order
// among them, so every rank running its sends and receives first, then its collectives in call
// order, matches what every other rank does.
Outcome runComm(const std::vector<const Recorded*>& calls) {
  bool anyP2p = false;
  for (const Recorded* r : calls) anyP2p |= r->p2p;
  if (anyP2p) {
    Outcome queued;
    sqzGroupStart();
    for (const Recorded* r : calls)
      if (r->p2p && queued.rc == ncclSuccess) queued = run(r->call);
    const sqzResult_t end = sqzGroupEnd();
    if (queued.rc != ncclSuccess) return queued;
    if (end != sqzSuccess) return {toNccl(end), sqzGetLastError(nullptr)};
  }
  for (const Recorded* r : calls) {
    if (r->p2p) continue;
    Outcome o = run(r->call);
    if (o.rc != ncclSuccess) return o;
  }
  return {};
}

ncclResult_t report(const Outcome& o) {
  if (o.rc != ncclSuccess) lastError() = o.message;
  return o.rc;
}

// Ends one level of this thread's group for `fn` (ncclInvalidUsage when none is open). When it
// was the outermost, *closed takes the group's recorded work and the thread is out of the group.
ncclResult_t endLevel(const char* fn, std::optional<GroupState>* closed) {
  if (tlsGroup.depth == 0) {
    lastError() =
        strCat("squeeze-nccl: ", fn, " without a matching ncclGroupStart on this thread.");
    return ncclInvalidUsage;
  }
  if (--tlsGroup.depth > 0) return ncclSuccess;
  closed->emplace(std::move(tlsGroup));
  tlsGroup = GroupState{};
  return ncclSuccess;
}

// An outermost group's work: its inits, then its calls.
ncclResult_t runGroup(const GroupState& group) {
  if (ncclResult_t r = runConcurrently(group.inits); r != ncclSuccess) return r;

  std::vector<std::function<Outcome()>> jobs;

  std::vector<std::pair<ncclComm*, std::vector<const Recorded*>>> byComm;  // first-call order
  for (const Recorded& r : group.calls) {
    auto it = byComm.begin();
    while (it != byComm.end() && it->first != r.comm) ++it;
    if (it == byComm.end()) it = byComm.insert(byComm.end(), {r.comm, {}});
    it->second.push_back(&r);
  }
  for (const auto& entry : byComm)
    jobs.push_back([&calls = entry.second] { return runComm(calls); });
  return jobs.empty() ? ncclSuccess : report(runAll(jobs));
}

}  // namespace

std::string& lastError() { return tlsLastError; }

bool inGroup() { return tlsGroup.depth > 0; }

ncclResult_t groupStart() {
  ++tlsGroup.depth;
  return ncclSuccess;
}

ncclResult_t groupEnd() {
  std::optional<GroupState> group;
  if (ncclResult_t r = endLevel("ncclGroupEnd", &group); r != ncclSuccess || !group) return r;
  return runGroup(*group);
}

ncclResult_t groupSimulateEnd(const ncclSimInfo_t* simInfo) {
  std::optional<GroupState> group;
  if (ncclResult_t r = endLevel("ncclGroupSimulateEnd", &group); r != ncclSuccess || !group)
    return r;
  if (!simInfo) return runGroup(*group);  // NCCL: without simInfo, a plain ncclGroupEnd
  const ncclSimInfo_t initialized = NCCL_SIM_INFO_INITIALIZER;
  if (simInfo->magic != initialized.magic) {
    lastError() = strCat(
        "squeeze-nccl: ncclGroupSimulateEnd: simInfo was not initialized with "
        "NCCL_SIM_INFO_INITIALIZER; the group was ended and its recorded calls dropped: ",
        group->inits.size() + group->calls.size(), ".");
    return ncclInvalidArgument;
  }
  if (ncclResult_t r = runConcurrently(group->inits); r != ncclSuccess) return r;
  lastError() = strCat(
      "squeeze-nccl: ncclGroupSimulateEnd is not supported by Squeeze (it has no NCCL "
      "performance model to estimate a group's time with): the group was ended, its calls "
      "dropped unrun (communicator inits in it ran, as in NCCL) and simInfo->estimatedTime left "
      "unset; call ncclGroupEnd to run the calls. Calls dropped: ",
      group->calls.size(), ".");
  return ncclInvalidUsage;
}

ncclResult_t runConcurrently(const std::vector<GroupCall>& calls) {
  std::vector<std::function<Outcome()>> jobs;
  for (const GroupCall& call : calls) jobs.push_back([&call] { return run(call); });
  return jobs.empty() ? ncclSuccess : report(runAll(jobs));
}

ncclResult_t submitInit(GroupCall init) {
  if (!inGroup()) return init();
  tlsGroup.inits.push_back(std::move(init));
  return ncclSuccess;
}

ncclResult_t submitCall(ncclComm* comm, bool p2p, GroupCall call) {
  // Counted while it runs, so that ncclCommAbort on another thread frees comm only after it.
  auto counted = [comm, call = std::move(call)] {
    comm->inflight.fetch_add(1);
    const ncclResult_t rc = call();
    comm->inflight.fetch_sub(1);
    return rc;
  };
  if (!inGroup()) return counted();
  tlsGroup.calls.push_back(Recorded{comm, p2p, std::move(counted)});
  return ncclSuccess;
}

}  // namespace squeeze::nccl_shim
