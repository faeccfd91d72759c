// --bind: rank i runs on core i mod (number of cores). The cores come from hwloc (through
// src/info/topology); each is a CPU mask for sched_setaffinity, prepared before fork() so the
// child only has to apply it, and a name for sqzrun's messages.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace squeeze::launcher {

// A CPU mask for sched_setaffinity, sized for the largest PU index.
class CpuMask {
 public:
  explicit CpuMask(const std::vector<int>& cpus) {
    int maxCpu = cpus.empty() ? 0 : *std::max_element(cpus.begin(), cpus.end());
    int ncpus = std::max(maxCpu + 1, CPU_SETSIZE);
    set_ = CPU_ALLOC(ncpus);
    size_ = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size_, set_);
    for (int c : cpus) CPU_SET_S(c, size_, set_);
  }
  CpuMask(const CpuMask&) = delete;
  CpuMask& operator=(const CpuMask&) = delete;
  ~CpuMask() { CPU_FREE(set_); }
  const cpu_set_t* get() const { return set_; }
  size_t size() const { return size_; }

 private:
  cpu_set_t* set_;
  size_t size_;
};

struct CoreBinding {
  std::vector<std::unique_ptr<CpuMask>> masks;  // one per core; none: the ranks run unbound
  std::vector<std::string> names;               // "core N (PUs ...)", one per mask

  // Rank i's core is core i mod (number of cores); nullptr: run unbound.
  const CpuMask* maskFor(int rank) const {
    return masks.empty() ? nullptr : masks[rank % masks.size()].get();
  }
  const std::string& nameFor(int rank) const { return names[rank % names.size()]; }
};

// The cores to bind nranks ranks to. Says why and returns none when there is no hwloc or no
// topology; warns when there are more ranks than cores.
CoreBinding planBinding(int nranks);

}  // namespace squeeze::launcher
