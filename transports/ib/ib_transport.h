// The InfiniBand verbs transport (SQZ_TRANSPORT=ib): one RC queue pair per peer, messages as
// RDMA writes with immediate data into a per-peer receive ring with credit-based flow control
// (ib_connection.h, ib_credits.h), over InfiniBand (addressed by LID) or RoCE (by GID,
// SQZ_IB_GID_INDEX). SQZ_IB_HCA picks the device and port; by default the first device with an
// ACTIVE port.
//
// libibverbs is loaded at run time (ib_verbs.h). Where it, a device or an active port is
// missing, canConnect() is false for every peer, so the next transport in SQZ_TRANSPORT carries
// the traffic; with SQZ_TRANSPORT=ib alone, creating the transport fails with Error(kSystem)
// saying what is missing and what to do.
//
// Pair setup over the PeerLink (both sides alike): create the queue pair (INIT) and post its
// receives; exchange connection records (ib_record.h); map the staging mirror of the peer's
// ring; RTR, RTS; exchange a status word, so that a failure on one side fails both at once;
// open the pair's liveness socket (data socket 0, carries no bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transports/transport.h"

namespace squeeze {

struct IbTransportOptions {
  std::string libraryPath;  // "": the process's libibverbs.so.1 (loaded once)
  // This rank's receive ring per peer, announced in its connection record: each sender writes
  // into the size its receiver announced.
  uint64_t ringBytes = 4 << 20;
};

/// Creates the ib transport of one communicator and picks its port.
/// @param ctx the communicator's rank, size, hash and settings (ibHca, ibGidIndex, transports)
/// @return the transport. Throws Error(kInvalidArgument) for a malformed SQZ_IB_HCA, and
///         Error(kSystem) when ib cannot run here and SQZ_TRANSPORT names nothing else.
///
/// Thread safety: as shm (shm_transport.h): connect() may run concurrently for different
/// peers; each Connection is driven by one thread at a time, except that shutdown() may come
/// from any thread while progress() runs; Connections may outlive the Transport. progress()
/// throws Error(kRemote) naming the peer once the peer's process closed the pair's liveness
/// socket while a send is pending or a posted receive finds nothing more to read, or once the
/// queue pair reports an error completion (the peer's HCA stopped answering); with nothing
/// posted it just returns false. After a local shutdown() progress() moves nothing.
std::unique_ptr<Transport> createIbTransport(const TransportContext& ctx);
std::unique_ptr<Transport> createIbTransport(const TransportContext& ctx,
                                             const IbTransportOptions& options);

/// Why the ib transport cannot run on this host with these settings ("" when it can).
/// @param hca SQZ_IB_HCA; @param gidIndex SQZ_IB_GID_INDEX. Throws for a malformed hca.
std::string ibUnavailableReason(const std::string& hca, int gidIndex);

}  // namespace squeeze
