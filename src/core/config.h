// CommConfig: the resolved, validated settings one communicator runs with: the SQZ_* environment
// (params.h) overlaid with the caller's sqzConfig_t.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/params.h"

namespace squeeze {

struct CommConfig {
  int timeoutMs = 300000;
  std::vector<std::string> transports;  // in preference order
  int tcpNsocks = 2;
  size_t chunkBytes = 512 << 10;
  size_t shmBufferBytes = 4 << 20;
  std::string socketIfname;

  // Validates ranges; throws Error(kInvalidArgument) naming the setting and the allowed range.
  static CommConfig fromParams(const Params& p);
};

}  // namespace squeeze
