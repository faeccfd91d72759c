// Reads a launcher's environment for sqzCommInitFromEnv: which rank this process is, how many
// there are, and the rendezvous id (SQZ_UNIQUE_ID from sqzrun, or an address from SQZ_ROOT /
// MASTER_ADDR:MASTER_PORT with rank 0 hosting the root there).
#pragma once

#include <string>

#include "base/params.h"
#include "bootstrap/unique_id.h"

namespace squeeze {

struct EnvRendezvous {
  UniqueIdData id;
  int rank = -1;
  int nranks = -1;
  std::string source;  // which variables were used, for the log
};

// Throws Error(kInvalidUsage) naming the variables it looked for when none are set, and
// kInvalidArgument for malformed values.
EnvRendezvous resolveEnvRendezvous(const Params& params, int timeoutMs);

}  // namespace squeeze
