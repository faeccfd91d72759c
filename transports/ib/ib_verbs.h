// libibverbs, loaded with dlopen at run time: the build needs only infiniband/verbs.h, and one
// binary runs on hosts without rdma-core (the ib transport then reports itself unavailable).
//
// IbVerbs is a table of the exported functions the transport calls, resolved by name (the
// default symbol version, which is what linking against this verbs.h would bind). The data-path
// verbs (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are static inline in
// verbs.h, dispatching through the context's provider ops, so they need no symbol. Two exported
// names are macros in recent verbs.h and are handled here: ibv_query_port (an inline that asks
// the provider first, then falls back to the exported compat symbol: queryPort() below does the
// same) and ibv_reg_mr (an inline over ibv_reg_mr_iova2; the exported ibv_reg_mr is resolved,
// which behaves the same without IBV_ACCESS_OPTIONAL flags, and exists in every rdma-core).
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>

namespace squeeze {

struct IbVerbs {
  ibv_device** (*getDeviceList)(int* num);
  void (*freeDeviceList)(ibv_device** list);
  const char* (*getDeviceName)(ibv_device* dev);
  ibv_context* (*openDevice)(ibv_device* dev);
  int (*closeDevice)(ibv_context* ctx);
  int (*queryDevice)(ibv_context* ctx, ibv_device_attr* attr);
  int (*queryPortCompat)(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr);
  int (*queryGid)(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid);
  ibv_pd* (*allocPd)(ibv_context* ctx);
  int (*deallocPd)(ibv_pd* pd);
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, size_t length, int access);
  int (*deregMr)(ibv_mr* mr);
  ibv_comp_channel* (*createCompChannel)(ibv_context* ctx);
  int (*destroyCompChannel)(ibv_comp_channel* channel);
  ibv_cq* (*createCq)(ibv_context* ctx, int cqe, void* cqContext, ibv_comp_channel* channel,
                      int compVector);
  int (*destroyCq)(ibv_cq* cq);
  int (*getCqEvent)(ibv_comp_channel* channel, ibv_cq** cq, void** cqContext);
  void (*ackCqEvents)(ibv_cq* cq, unsigned int nevents);
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask);
  int (*destroyQp)(ibv_qp* qp);
  const char* (*wcStatusStr)(ibv_wc_status status);

  std::string path;  // what was dlopen'ed

  // ibv_query_port as verbs.h's inline wrapper does it: the provider's extended query when it
  // has one (it fills the whole struct), else the exported compat entry point.
  int queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const;
};

/// Loads libibverbs from `path` (a file name for the dynamic loader, or a path) and resolves
/// every function of IbVerbs.
/// @return the table, or nullptr with *whyNot set to a sentence naming the library or the
///         missing symbol and what to install. The library stays loaded for the process's
///         lifetime when it loads (providers do not support being unloaded), and is unloaded
///         again when a symbol is missing.
std::unique_ptr<IbVerbs> loadIbVerbs(const std::string& path, std::string* whyNot);

/// The process's libibverbs.so.1, loaded once (thread-safe).
/// @return the table, or nullptr with *whyNot set (the same reason on every call).
const IbVerbs* ibVerbs(std::string* whyNot);

}  // namespace squeeze
