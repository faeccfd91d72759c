// Failure notices: why a rank gave up on its communicator, sent to every peer over the pair's
// control socket (idle once the connections are set up) before the rank shuts its connections.
// A peer that then finds a connection closed reads the notice and fails with the real cause (the
// mismatch one rank detected, a timeout, an abort) instead of "the peer closed the connection":
// the rank whose call differed learns why, whichever rank noticed.
//
//   wire: magic "SQZN", the error code (int32), the text's length (uint32, at most
//         kMaxNoticeText), the text. Nothing is allocated from a length above the bound.
#pragma once

#include <optional>
#include <vector>

#include "base/error.h"
#include "transports/tcp/socket.h"

namespace squeeze {

constexpr size_t kMaxNoticeText = 1024;

// Writes the notice without waiting: a peer already gone, or a buffer that cannot take it at
// once, is skipped (the peer then sees only the closed connection, as before).
void sendFailureNotice(Socket& control, const Error& why);

// Reads the notices that arrive on `controls` (by rank; invalid sockets are skipped) until
// `deadline`, or until one that does not report a closed connection (any code but kRemote):
// returns that one, else the first that arrived, else nullopt. The result's code is the
// notice's for sqzInvalidUsage (the ranks' calls disagree: so does this rank's), kRemote
// otherwise; its text names the rank that sent it. Never throws.
std::optional<Error> readFailureNotice(std::vector<Socket>& controls, int myRank,
                                       Deadline deadline);

}  // namespace squeeze
