// The agreement behind sqzCommShrink: the survivors of a communicator settle who stays, and get
// the unique id of the communicator they form, without a launcher and without the old
// communicator's connections (a rank that failed shut them).
//
// The leader is the lowest rank nobody excludes. Every other survivor dials the leader's
// listening socket (open since init), proves the job's secret, and sends its rank and exclude
// list. The leader waits, at most the timeout, for every survivor its own list expects; then it
// either starts a rendezvous for the new communicator and sends everyone its id, or sends
// everyone why not (a list that differs, a survivor that never came) and fails too. The new
// communicator is then made from that id, which needs every member: a rank lost after the
// verdict makes every member's init fail. So the survivors end with one member list, or all fail;
// a lost leader fails everyone (its followers find it gone, or wait out the timeout).
//
//   wire, follower -> leader: "SQZK", version (u32), rank (i32), nranks (i32), the exclude
//                             list's length (u32, at most nranks), then its ranks (i32 each)
//   wire, leader -> follower: "SQZV", 0 or the error code all fail with (u32), the text's length
//                             (u32, at most 1024), the text; after a 0, the new id
//                             (UniqueIdData::kBytes)
#pragma once

#include <vector>

#include "bootstrap/unique_id.h"
#include "transports/tcp/socket.h"

namespace squeeze {

struct ShrinkParty {
  int rank = -1;                    // in the communicator being shrunk
  int nranks = 0;
  uint64_t commHash = 0;            // of the communicator being shrunk
  Secret secret{};                  // of its unique id
  std::vector<SockAddr> listenAddrs;  // every rank's listening socket, by rank
  Socket* listener = nullptr;       // this rank's (accepts on the leader)
  int timeoutMs = 0;
};

// The sorted survivors of `exclude` (ranks in [0, nranks), distinct, not party.rank, not all:
// the caller has checked). Collective over the survivors; returns the new communicator's id.
// Throws Error(kInvalidUsage) when the survivors' lists differ, Error(kRemote) or
// Error(kTimeout) when a survivor (or the leader) is lost on the way; every survivor throws then.
UniqueIdData agreeOnShrink(const ShrinkParty& party, const std::vector<int>& survivors);

}  // namespace squeeze
