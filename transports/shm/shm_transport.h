// The shared-memory transport, for peers on the same host (equal PeerInfo::hostId).
//
// Per communicator, each rank owns one doorbell (transports/shm/doorbell.h) in the first page of
// a POSIX shm segment; every local peer maps it and rings it when it wrote a message for the rank
// or freed ring space the rank may wait for, so one futex word covers all of a rank's shm peers.
// The rest of the segment is the rank's window (transports/shm/window.h, SQZ_SHM_DIRECT_BYTES;
// none when 0): once every peer of the communicator is connected over shm, the transport
// assembles the window from every rank's segment (shmWindow()).
//
// Per pair, the lower rank creates one segment holding two single-producer/single-consumer byte
// rings (lower -> higher and higher -> lower) of TransportSettings::shmBufferBytes each. A ring
// carries a byte stream of messages, each a WireHeader followed by its payload, so a message of any
// size streams through a ring of any size. Head and tail are monotonically increasing byte
// counters, each alone on its cache line; the producer publishes with a release store of the head,
// the consumer with a release store of the tail. Each direction has a `closed` flag set by its
// producer on shutdown() or destruction.
//
// Names in /dev/shm live only as long as needed: the pair segment is unlinked as soon as the
// higher rank mapped it (by both sides; the second unlink is a no-op), and a rank's doorbell name
// once all nranks - 1 peers mapped it, or when the ShmTransport is destroyed. A process killed
// after communicator setup on one host leaves nothing behind; the mappings stay valid.
//
// Single copy (TransportSettings::shmSingleCopyBytes, SQZ_SHM_SINGLE_COPY_BYTES): a message of at
// least that many payload bytes puts only its header and a 32-byte descriptor (its address in the
// sender's process, its length) in the ring; the receiver checks the header, copies the payload
// straight from the sender's memory into its own buffer with process_vm_readv, and then counts
// it done in the pair segment and rings the sender, whose send completes only then. Whether the
// kernel allows each direction (yama ptrace_scope, containers, users, pid namespaces) is probed
// at connect time and agreed by both sides; a direction where it is not carries everything
// through the ring. See transports/shm/cma.h. Off by default (0): where it was measured (a
// 2-vCPU VM) process_vm_readv copied at 4-14 GB/s against the pipelined ring's 6-12 GB/s per
// direction, so the ring was faster at every size; it pays where the kernel's per-page cost is
// small next to memory bandwidth (many ranks per socket, large messages). Measure first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "transports/transport.h"

namespace squeeze {

/// Creates the shared-memory transport of one communicator, and with it this rank's doorbell
/// segment (`/dev/shm/sqz-<commHash>-<rank>-<pid>-bell`).
/// @param ctx the communicator's rank, size, hash and settings (shmBufferBytes: ring size per
///            direction; shmSingleCopyBytes: the single-copy threshold, 0 for never; timeoutMs
///            bounds nothing here, the PeerLink carries its own deadline).
/// @return the transport. Throws SysError when the doorbell segment cannot be created.
///
/// Thread safety: connect() may run concurrently for different peers. Each Connection it returns
/// must be driven (isend/irecv/progress) by one thread at a time, except that shutdown() may come
/// from any thread (an abort) while progress() runs; Connections to different peers are
/// independent. Connections may outlive the Transport. progress() throws Error(kRemote) once the
/// peer shut down (or destroyed its end) and a posted receive finds the ring drained, or a send
/// is still pending (including a single-copy send the peer has not finished reading), or while
/// a single-copy payload was being read; with nothing posted it just returns false, so an idle
/// connection to a rank that finished first is not an error. After a local shutdown()
/// progress() moves nothing. A send's payload must stay unchanged until its request is done:
/// with single copy the peer reads it in place.
std::unique_ptr<Transport> createShmTransport(const TransportContext& ctx);

class ShmWindow;

/// The shared-memory window of transport `t` (transports/shm/window.h): set once setup is done
/// when `t` is the shm transport, every peer of the communicator is connected over it and
/// SQZ_SHM_DIRECT_BYTES is not 0; null otherwise. The window outlives the transport.
std::shared_ptr<ShmWindow> shmWindow(const Transport& t);

/// What one shm connection agreed at connect time and has done since.
struct ShmConnectionStats {
  size_t singleCopyOutBytes;    ///< single-copy threshold this rank -> peer (0: ring only)
  size_t singleCopyInBytes;     ///< single-copy threshold peer -> this rank (0: ring only)
  uint64_t singleCopySends;     ///< sends the peer finished reading from this rank's memory
  uint64_t singleCopyReceives;  ///< receives this rank read from the peer's memory
  uint64_t ringFallbackSends;   ///< sends over the threshold whose buffer another process
                                ///< cannot read, so they went through the ring
};

/// The statistics of connection `c`, which must be an shm connection (else Error
/// kInvalidArgument). Call it from the thread that drives `c`, or once no thread does.
ShmConnectionStats shmConnectionStats(const Connection& c);

/// Test hooks, process-wide: the connect-time probe read made by rank `failProbeOfRank` fails as
/// if the kernel forbade process_vm_readv (-1: none), and while `failCrossReadable` is set every
/// sender treats its buffers as memory another process cannot read. Affects connections set up
/// (probe) or sends queued (buffers) after the call. Not for production use.
void setShmTestHooks(int failProbeOfRank, bool failCrossReadable);

}  // namespace squeeze
