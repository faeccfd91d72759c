// NCCL_* environment variables that NCCL users already set, and the SQZ_* ones they mean. The
// table is in env_map.cc (and docs/porting.md); applyNcclEnv() runs once, on the shim's first
// call, before Squeeze reads its environment.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace squeeze::nccl_shim {

using GetEnv = std::function<std::optional<std::string>(const char*)>;

struct EnvMapping {
  const char* sqz;     // the SQZ_* variable set
  const char* from;    // the NCCL_* variables read, for the docs
  // The SQZ_* value from the NCCL_* ones (read with get), or nullopt: nothing to set.
  std::optional<std::string> (*translate)(const GetEnv& get);
};

const std::vector<EnvMapping>& envMappings();

// Each SQZ_* value the mappings give, for variables not already set (SQZ_* set by the user win).
std::vector<std::pair<std::string, std::string>> mappedEnv(const GetEnv& get);

// mappedEnv over the process environment, applied with setenv; once per process.
void applyNcclEnv();

}  // namespace squeeze::nccl_shim
