// What the cases check and print about a rank: how it exited, whether a timeout's message
// names what it must, and its log (events and the tail of its stderr) when a repetition fails.
#pragma once

#include <string>
#include <vector>

#include "rank_control.h"

namespace squeeze::fault {

// "exit 0", "killed by Killed", "not reaped"
std::string exitText(const RankProc& rp);
bool exitedCleanly(const RankProc& rp);
void printRankLogs(const std::vector<RankProc>& ranks);

// What a timeout's message must say: the operation, its sequence number (the all-reduce's index
// on this communicator, as "#N" or "seq"), and a peer that was waited on.
// Returns "" when it does, else "does not name ..." listing what is missing.
std::string timeoutMessageProblem(const Event& e, int self);

// Whether a message names rank `rank` ("rank N").
bool namesRank(const std::string& text, int rank);

}  // namespace squeeze::fault
