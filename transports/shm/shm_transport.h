// The shared-memory transport, for peers on the same host (equal PeerInfo::hostId).
//
// Per communicator, each rank owns one doorbell (transports/shm/doorbell.h) in a one-page POSIX
// shm segment; every local peer maps it and rings it when it wrote a message for the rank or
// freed ring space the rank may wait for, so one futex word covers all of a rank's shm peers.
//
// Per pair, the lower rank creates one segment holding two single-producer/single-consumer byte
// rings (lower -> higher and higher -> lower) of CommConfig::shmBufferBytes each. A ring carries
// a byte stream of messages, each a WireHeader followed by its payload, so a message of any size
// streams through a ring of any size. Head and tail are monotonically increasing byte counters,
// each alone on its cache line; the producer publishes with a release store of the head, the
// consumer with a release store of the tail. Each direction has a `closed` flag set by its
// producer on shutdown() or destruction.
//
// Names in /dev/shm live only as long as needed: the pair segment is unlinked as soon as the
// higher rank mapped it (by both sides; the second unlink is a no-op), and a rank's doorbell name
// once all nranks - 1 peers mapped it, or when the ShmTransport is destroyed. A process killed
// after communicator setup on one host leaves nothing behind; the mappings stay valid.
#pragma once

#include <memory>

#include "transports/transport.h"

namespace squeeze {

/// Creates the shared-memory transport of one communicator, and with it this rank's doorbell
/// segment (`/dev/shm/sqz-<commHash>-<rank>-<pid>-bell`).
/// @param ctx the communicator's rank, size, hash and settings (shmBufferBytes: ring size per
///            direction; timeoutMs bounds nothing here, the PeerLink carries its own deadline).
/// @return the transport. Throws SysError when the doorbell segment cannot be created.
///
/// Thread safety: connect() may run concurrently for different peers. Each Connection it returns
/// must be driven (isend/irecv/progress) by one thread at a time, except that shutdown() may come
/// from any thread (an abort) while progress() runs; Connections to different peers are
/// independent. Connections may outlive the Transport. progress() throws Error(kRemote) once the
/// peer shut down (or destroyed its end) and a posted receive finds the ring drained, or a send
/// is still pending; with nothing posted it just returns false, so an idle connection to a rank
/// that finished first is not an error. After a local shutdown() progress() moves nothing.
std::unique_ptr<Transport> createShmTransport(const TransportContext& ctx);

}  // namespace squeeze
