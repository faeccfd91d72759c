// tcp: the transport that reaches any peer. Each Connection owns SQZ_TCP_NSOCKS non-blocking
// sockets; a message's header always travels on socket 0 and a payload of 128 KiB or more is
// striped over all sockets (stripe i = bytes [i*n/k, (i+1)*n/k)), so one big message uses every
// socket while small ones keep to one.
#pragma once

#include <memory>

#include "transports/transport.h"

namespace squeeze {

std::unique_ptr<Transport> createTcpTransport(const TransportContext& ctx);

}  // namespace squeeze
