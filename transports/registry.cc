// The static, ordered transport table. A transport registers with one line here; per peer the
// communicator takes the first one, in SQZ_TRANSPORT order, whose canConnect() is true.
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include "transports/cuda_ipc/cuda_ipc_transport.h"
#endif
#if SQZ_HAVE_IBVERBS
#include "transports/ib/ib_transport.h"
#endif
#if SQZ_HAVE_UCX
#include "transports/ucx/ucx_transport.h"
#endif
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport.h"

namespace squeeze {
namespace {

struct TransportEntry {
  const char* name;
  std::unique_ptr<Transport> (*create)(const TransportContext&);
};

const TransportEntry kTransports[] = {
    {"shm", createShmTransport},
    {"tcp", createTcpTransport},
#if SQZ_HAVE_UCX
    {"ucx", createUcxTransport},
#endif
#if SQZ_HAVE_IBVERBS
    {"ib", createIbTransport},
#endif
#if SQZ_HAVE_CUDA
    {"cuda_ipc", createCudaIpcTransport},  // last here: SQZ_TRANSPORT, not this table, orders
#endif
};

}  // namespace

const std::vector<std::string>& availableTransports() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& t : kTransports) out.push_back(t.name);
    return out;
  }();
  return names;
}

std::unique_ptr<Transport> createTransport(const std::string& name, const TransportContext& ctx) {
  for (const auto& t : kTransports)
    if (name == t.name) return t.create(ctx);
  return nullptr;
}

}  // namespace squeeze
