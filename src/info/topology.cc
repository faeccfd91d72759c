// hwloc reader for sqz-info and sqzrun --bind. See topology.h.
#include "info/topology.h"

#include "squeeze_config.h"

#if SQZ_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "base/strings.h"

namespace squeeze {

std::string formatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += strCat("-", cpus[j]);
    i = j + 1;
  }
  return out;
}

#if SQZ_HAVE_HWLOC

namespace {

// Owns an hwloc topology for the duration of one loadTopology() call.
class TopologyHandle {
 public:
  TopologyHandle() = default;
  TopologyHandle(const TopologyHandle&) = delete;
  TopologyHandle& operator=(const TopologyHandle&) = delete;
  ~TopologyHandle() {
    if (topo_) hwloc_topology_destroy(topo_);
  }
  // Returns an error message, or an empty string on success.
  std::string load() {
    if (hwloc_topology_init(&topo_) != 0) {
      topo_ = nullptr;
      return "hwloc_topology_init failed";
    }
    if (hwloc_topology_load(topo_) != 0) return "hwloc_topology_load failed";
    return "";
  }
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

std::vector<int> pusOf(hwloc_const_cpuset_t set) {
  std::vector<int> out;
  int id;
  hwloc_bitmap_foreach_begin(id, set) { out.push_back(id); }
  hwloc_bitmap_foreach_end();
  return out;
}

int countOf(hwloc_topology_t topo, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_by_type(topo, type);
  return n < 0 ? 0 : n;  // -1: several depths (does not happen for these types in hwloc 2)
}

}  // namespace

bool topologyAvailable() { return true; }

std::optional<HostTopology> loadTopology(std::string* error) {
  TopologyHandle handle;
  std::string err = handle.load();
  if (!err.empty()) {
    *error = err;
    return std::nullopt;
  }
  hwloc_topology_t topo = handle.get();

  HostTopology out;
#ifdef HWLOC_VERSION  // the release built against ("2.9.0"); not an SQZ_ feature macro
  out.hwlocVersion = HWLOC_VERSION;
#else  // the API version of the library loaded, which lags the release ("2.8.0" for 2.9.0)
  unsigned v = hwloc_get_api_version();
  out.hwlocVersion = strCat("API ", v >> 16, ".", (v >> 8) & 0xff, ".", v & 0xff);
#endif
  out.packages = countOf(topo, HWLOC_OBJ_PACKAGE);
  out.numaNodes = countOf(topo, HWLOC_OBJ_NUMANODE);
  out.pus = countOf(topo, HWLOC_OBJ_PU);

  // Some virtual machines and architectures expose no Core objects: each PU is then a core.
  hwloc_obj_type_t coreType = countOf(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  int ncores = countOf(topo, coreType);
  int nnuma = out.numaNodes;
  for (int i = 0; i < ncores; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, coreType, static_cast<unsigned>(i));
    if (!core || !core->cpuset || hwloc_bitmap_iszero(core->cpuset)) continue;
    CoreInfo info;
    info.logicalIndex = static_cast<int>(out.cores.size());
    info.osIndex = core->os_index == HWLOC_UNKNOWN_INDEX ? -1 : static_cast<int>(core->os_index);
    if (hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, core))
      info.package = static_cast<int>(pkg->logical_index);
    // In hwloc 2 NUMA nodes hang off the tree as memory children, not ancestors: take the
    // first node whose cpuset covers the core.
    for (int n = 0; n < nnuma; ++n) {
      hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(n));
      if (node && node->cpuset && hwloc_bitmap_isincluded(core->cpuset, node->cpuset)) {
        info.numaNode = static_cast<int>(node->logical_index);
        break;
      }
    }
    info.pus = pusOf(core->cpuset);
    out.cores.push_back(std::move(info));
  }
  if (out.cores.empty()) {
    *error = "hwloc found no processing units";
    return std::nullopt;
  }
  return out;
}

#else  // !SQZ_HAVE_HWLOC

bool topologyAvailable() { return false; }

std::optional<HostTopology> loadTopology(std::string* error) {
  *error = "this build has no hwloc (configure with -Dhwloc=enabled and libhwloc-dev installed)";
  return std::nullopt;
}

#endif  // SQZ_HAVE_HWLOC

}  // namespace squeeze
