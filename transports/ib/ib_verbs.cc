// The dlopen loader for libibverbs (see ib_verbs.h).
#include "transports/ib/ib_verbs.h"

#include <dlfcn.h>

#include <cstring>

#include "base/strings.h"

namespace squeeze {

int IbVerbs::queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const {
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof(*attr));
  std::memset(attr, 0, sizeof(*attr));
  return queryPortCompat(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

std::unique_ptr<IbVerbs> loadIbVerbs(const std::string& path, std::string* whyNot) {
  dlerror();
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    *whyNot = strCat("libibverbs could not be loaded (dlopen(\"", path,
                     "\"): ", err ? err : "unknown error",
                     "); install rdma-core's libibverbs1 and the provider for the HCA (Debian/"
                     "Ubuntu: apt-get install libibverbs1 ibverbs-providers)");
    return nullptr;
  }
  auto v = std::make_unique<IbVerbs>();
  v->path = path;
  struct Slot {
    const char* name;
    void** fn;
  };
  const Slot slots[] = {
      {"ibv_get_device_list", reinterpret_cast<void**>(&v->getDeviceList)},
      {"ibv_free_device_list", reinterpret_cast<void**>(&v->freeDeviceList)},
      {"ibv_get_device_name", reinterpret_cast<void**>(&v->getDeviceName)},
      {"ibv_open_device", reinterpret_cast<void**>(&v->openDevice)},
      {"ibv_close_device", reinterpret_cast<void**>(&v->closeDevice)},
      {"ibv_query_device", reinterpret_cast<void**>(&v->queryDevice)},
      {"ibv_query_port", reinterpret_cast<void**>(&v->queryPortCompat)},
      {"ibv_query_gid", reinterpret_cast<void**>(&v->queryGid)},
      {"ibv_alloc_pd", reinterpret_cast<void**>(&v->allocPd)},
      {"ibv_dealloc_pd", reinterpret_cast<void**>(&v->deallocPd)},
      {"ibv_reg_mr", reinterpret_cast<void**>(&v->regMr)},
      {"ibv_dereg_mr", reinterpret_cast<void**>(&v->deregMr)},
      {"ibv_create_comp_channel", reinterpret_cast<void**>(&v->createCompChannel)},
      {"ibv_destroy_comp_channel", reinterpret_cast<void**>(&v->destroyCompChannel)},
      {"ibv_create_cq", reinterpret_cast<void**>(&v->createCq)},
      {"ibv_destroy_cq", reinterpret_cast<void**>(&v->destroyCq)},
      {"ibv_get_cq_event", reinterpret_cast<void**>(&v->getCqEvent)},
      {"ibv_ack_cq_events", reinterpret_cast<void**>(&v->ackCqEvents)},
      {"ibv_create_qp", reinterpret_cast<void**>(&v->createQp)},
      {"ibv_modify_qp", reinterpret_cast<void**>(&v->modifyQp)},
      {"ibv_destroy_qp", reinterpret_cast<void**>(&v->destroyQp)},
      {"ibv_wc_status_str", reinterpret_cast<void**>(&v->wcStatusStr)},
  };
  for (const Slot& s : slots) {
    dlerror();
    *s.fn = ::dlsym(lib, s.name);
    if (!*s.fn) {
      *whyNot = strCat("the library loaded as \"", path, "\" has no symbol ", s.name,
                       ": it is not libibverbs, or an rdma-core too old for Squeeze (v17 or "
                       "newer is needed); install a current libibverbs1");
      ::dlclose(lib);
      return nullptr;
    }
  }
  return v;
}

const IbVerbs* ibVerbs(std::string* whyNot) {
  // Never destroyed: connections and device contexts that outlive static destruction (a
  // communicator leaked until exit) still call through the table.
  static std::string* reason = new std::string;
  static const IbVerbs* verbs = loadIbVerbs("libibverbs.so.1", reason).release();
  if (!verbs) *whyNot = *reason;
  return verbs;
}

}  // namespace squeeze
