// This host's processor topology, read with hwloc, for the two tools: sqz-info prints it and
// sqzrun --bind places rank i on core i mod cores. Only the allowed PUs are listed (those in
// this process's cgroup/cpuset), so binding never names a CPU the ranks may not run on.
// Without hwloc (SQZ_HAVE_HWLOC 0) loadTopology() says so and returns nullopt.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace squeeze {

struct CoreInfo {
  int logicalIndex = 0;  // hwloc L#: 0..cores-1 in topology order
  int osIndex = -1;      // hwloc P#, -1 when the OS gives none
  int package = -1;      // logical index of the enclosing package, -1 if unknown
  int numaNode = -1;     // logical index of the NUMA node holding the core, -1 if unknown
  std::vector<int> pus;  // OS indexes of its PUs (what sched_setaffinity takes), ascending
};

struct HostTopology {
  std::string hwlocVersion;  // hwloc release built against, "2.9.0"
  int packages = 0;
  int numaNodes = 0;
  int pus = 0;
  std::vector<CoreInfo> cores;  // never empty on success: PUs stand in if hwloc finds no cores
};

// Whether this build has hwloc.
bool topologyAvailable();

// Reads the topology now (tens of milliseconds). Returns nullopt and sets *error when hwloc is
// not built in or fails.
std::optional<HostTopology> loadTopology(std::string* error);

// The kernel's cpulist format (Cpus_allowed_list, taskset -c): "0-3,8,10-11" for
// {0,1,2,3,8,10,11}. The input must be ascending.
std::string formatCpuList(const std::vector<int>& cpus);

}  // namespace squeeze
