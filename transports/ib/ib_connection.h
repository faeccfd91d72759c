// The ib transport's Connection: the message protocol over one RC queue pair (IbQp), as logic
// that needs no verbs.h, so unit tests run it over an in-memory fake queue pair.
//
// Per direction the sender copies each message (WireHeader, then payload) into its staging
// mirror of the peer's receive ring and RDMA-writes it, with the byte count as immediate data,
// to the same ring offset; a message larger than the ring streams through it in pieces of at
// most a quarter of the ring (1 MiB at most), like shm. The receiver copies out of its ring into
// the posted buffer, checking the header with checkHeader() before any payload byte is copied,
// and returns ring space with credits (zero-byte sends with immediate). ib_credits.h has the
// accounting and why the receive queue can never run dry.
//
// A send completes when its last write has completed locally (the data is in the peer's ring);
// a receive when its last byte is copied out. Completions are polled; with nothing to do the
// executor sleeps in poll() on the completion channel's fd (armed with ibv_req_notify_cq, then
// polled once more so nothing slips between the last poll and the arm) and on the liveness
// socket, never spinning.
//
// A peer that goes away: its process closing the liveness socket (a data socket of the pair
// that carries no bytes), or error completions on the queue pair (the HCA gives up after its
// retries, about half a second), turns into Error(kRemote) naming the peer, on the first
// progress() that has a send or receive the peer would have had to serve.
#pragma once

#include <cstdint>
#include <memory>

#include "transports/ib/ib_qp.h"
#include "transports/transport.h"

namespace squeeze {

// Writes one side may have in flight into the other's ring, and the queue depths that follow
// from it (ib_credits.h): receives 2 * writes for the data writes and credits the peer may
// have unpolled, plus a margin of as many again for the moments between a poll and the repost;
// sends the writes plus room for credits.
constexpr uint32_t kIbMaxWrites = 64;
constexpr uint32_t kIbRecvQueueDepth = 3 * kIbMaxWrites;
constexpr uint32_t kIbSendQueueDepth = kIbMaxWrites + 16;

struct IbConnectionParams {
  int myRank = -1;
  int peerRank = -1;
  uint32_t maxWrites = kIbMaxWrites;            // into the peer's ring: min of both records
  uint32_t sendQueueDepth = kIbSendQueueDepth;  // the queue pair's max_send_wr
};

/// Wraps a connected queue pair into a Connection.
/// @param qp the queue pair, connected (RTS) on both sides, with its receives already posted
/// @param watch the pair's liveness socket: carries no bytes, closes when the peer's process
///              ends or the peer shuts the connection down
/// Thread safety: as shm (shm_transport.h): one thread drives a connection, except shutdown(),
/// which may come from any thread while progress() runs.
std::unique_ptr<Connection> makeIbConnection(std::unique_ptr<IbQp> qp,
                                             const IbConnectionParams& params, Socket watch);

}  // namespace squeeze
