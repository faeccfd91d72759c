// The UCX transport ("ucx"): tagged UCP messages over whatever transports UCX itself selects
// (UCX_TLS, UCX_NET_DEVICES: tcp, shared memory, verbs...). Built only with the ucx feature
// (SQZ_HAVE_UCX).
//
// Per communicator there is one ucp context and one ucp worker, shared by all of its
// Connections; each Connection is one ucp endpoint to the peer's worker, created from the worker
// addresses the two ranks swap over the PeerLink. A message is two tagged sends, the 72-byte
// WireHeader and then (if any) the payload, each tagged (sender rank, header/payload, the
// connection's message number), so one worker tells all peers apart and order is explicit. The
// receiver takes the header into its own memory, checks it (checkHeader), and only then posts
// the payload receive into the caller's buffer with exactly header.payloadBytes. See
// ucx_transport.cc for liveness (a watch socket per pair) and teardown.
//
// UCX reads its own UCX_* environment when the communicator is created. On a host whose only
// allowed network is loopback, set UCX_NET_DEVICES=lo (and UCX_TLS=tcp, or UCX_TLS=sm for shared
// memory); without it UCX's tcp transport uses every interface that is up.
#pragma once

#include <memory>

#include "transports/transport.h"

namespace squeeze {

/// Creates the UCX transport of one communicator: a ucp context (features TAG and WAKEUP) and
/// one worker. When UCX cannot start (ucp_config_read, ucp_init or ucp_worker_create fails, for
/// instance UCX_TLS names nothing usable), the error names the failed call and its
/// ucs_status_string: with ucx the only transport in TransportSettings::transports this throws
/// Error(kSystem) with it; otherwise the transport logs it as a warning and canConnect() is false
/// for every peer, so "ucx,tcp" falls back to tcp.
/// @param ctx the communicator's rank, size and hash (timeoutMs bounds the teardown flush).
/// @return the transport.
///
/// connect() throws Error(kRemote) for a peer that sends a malformed worker address and
/// Error(kSystem) when UCX cannot create the endpoint.
///
/// Thread safety: connect() may run concurrently for different peers (setup is serialized on a
/// mutex). Because all Connections of one transport share its ucp worker, they must all be
/// driven (isend/irecv/progress/addWaitSources) by one thread at a time, as the executor does,
/// except that shutdown() may come from any thread (an abort) while progress() runs: it only
/// flips an atomic flag and shuts the pair's watch socket, never touching UCX. Connections may
/// outlive the Transport (they share the worker's ownership). Requests complete in posting
/// order; a send is done when UCX released its buffer, a receive once its payload is in the
/// caller's buffer. progress() throws Error(kRemote) when UCX reports the endpoint failed, or
/// once the peer shut down, was destroyed or died while a send or receive is still pending
/// (after a short grace for data already on its way); with nothing posted it just returns false,
/// so an idle connection to a rank that finished first is not an error. After a local
/// shutdown() progress() moves nothing. readsDeviceMemory() is false: the executor stages
/// device memory through host buffers.
std::unique_ptr<Transport> createUcxTransport(const TransportContext& ctx);

}  // namespace squeeze
