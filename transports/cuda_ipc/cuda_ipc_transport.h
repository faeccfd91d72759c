// The CUDA IPC transport, for ranks with a GPU on the same host (equal PeerInfo::hostId and
// TransportSettings::device >= 0 on both sides). Connections take device, pinned and ordinary host
// pointers alike (readsDeviceMemory() is true) and move payloads with cudaMemcpyAsync, GPU to
// GPU where both ends are device memory.
//
// Per pair and direction, the receiver owns a staging ring of TransportSettings::cudaIpcBufferBytes in
// its GPU's memory (cudaMalloc), which the sender maps: with cudaIpcOpenMemHandle when the peer
// is another process, as a plain pointer when both ranks are threads of one process (CUDA IPC
// cannot open a handle of its own process). Headers and the ring's head/tail counters live in a
// small POSIX shm segment per pair, created by the lower rank and unlinked as soon as the higher
// rank mapped it, so nothing stays in /dev/shm once connect() returns. See cuda_ipc_transport.cc
// for the protocol.
#pragma once

#include <memory>

#include "transports/transport.h"

namespace squeeze {

/// Creates the CUDA IPC transport of one communicator. Built only with the cuda feature
/// (SQZ_HAVE_CUDA); registered as "cuda_ipc".
/// @param ctx the communicator's rank, size, hash and settings (device: this rank's GPU, -1 for
///            none, in which case canConnect() is false for every peer; cudaIpcBufferBytes: the
///            receive ring per peer).
/// @return the transport. Creating it allocates nothing on the GPU; connect() does.
///
/// connect() throws Error(kInvalidUsage) when the peer has no GPU, Error(kCuda) when the GPUs
/// cannot share memory (then SQZ_TRANSPORT=shm,tcp is the way out), Error(kRemote) for a peer
/// that sends a malformed setup message.
///
/// Thread safety: connect() may run concurrently for different peers. Each Connection it returns
/// must be driven (isend/irecv/progress/addWaitSources) by one thread at a time, except that
/// shutdown() may come from any thread (an abort) while progress() runs; Connections to
/// different peers are independent, and may outlive the Transport. Requests complete in posting
/// order; a send is done once its payload is in the peer's ring (the buffer may be reused), a
/// receive once its payload is in the caller's buffer. progress() throws Error(kRemote) once the
/// peer shut down, was destroyed or died while a receive waits for data that never came or a
/// send waits for ring space; with nothing posted it just returns false. After a local
/// shutdown() progress() moves nothing.
std::unique_ptr<Transport> createCudaIpcTransport(const TransportContext& ctx);

}  // namespace squeeze
