// --bind: the cores from hwloc as CPU masks (see binding.h).
#include "binding.h"

#include "base/strings.h"
#include "info/topology.h"
#include "say.h"

namespace squeeze::launcher {

CoreBinding planBinding(int nranks) {
  CoreBinding binding;
  if (!topologyAvailable()) {
    say("--bind: this sqzrun was built without hwloc; the ranks run unbound");
    return binding;
  }
  std::string error;
  auto topo = loadTopology(&error);
  if (!topo) {
    say("--bind: cannot read the topology (", error, "); the ranks run unbound");
    return binding;
  }
  for (const CoreInfo& core : topo->cores) {
    binding.masks.push_back(std::make_unique<CpuMask>(core.pus));
    binding.names.push_back(
        strCat("core ", core.logicalIndex, " (PUs ", formatCpuList(core.pus), ")"));
  }
  int ncores = static_cast<int>(binding.masks.size());
  if (nranks > ncores)
    say("--bind: ", plural(nranks, "rank"), " on ", plural(ncores, "core"),
        ": some cores run more than one rank");
  return binding;
}

}  // namespace squeeze::launcher
