// CommConfig: the resolved, validated settings one communicator runs with: the SQZ_* environment
// (params.h) overlaid with the caller's sqzConfig_t.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "common/params.h"

namespace squeeze {

// The largest SQZ_SHM_BUFFER_BYTES: also the most a peer's shm segment header may claim, checked
// before any size arithmetic on it.
constexpr size_t kMaxShmBufferBytes = size_t{1} << 30;

struct CommConfig {
  int timeoutMs = 300000;
  std::vector<std::string> transports;  // in preference order
  int tcpNsocks = 2;
  std::string tcpCongestion = "cubic";  // SQZ_TCP_CONGESTION ("system": the kernel's default)
  size_t chunkBytes = 512 << 10;
  size_t shmBufferBytes = 4 << 20;
  std::string socketIfname;
  std::string algoSpec;  // SQZ_ALGO
  bool fullCheck = false;  // SQZ_CHECK_MODE=full
  size_t codecMinBytes = 16 << 10;
  bool codecAutoDense = true;  // SQZ_CODEC_AUTO_DENSE
  double codecDelayUs = 0;     // SQZ_CODEC_DELAY_US (whole microseconds)
  // The GPU this communicator's device calls run on (-1: none; host memory only). Set at init
  // from sqzConfig_t.device or the caller's current device when a GPU is usable.
  int device = -1;
  size_t cudaIpcBufferBytes = 8 << 20;  // SQZ_CUDA_IPC_BUFFER_BYTES
  size_t shmSingleCopyBytes = 0;        // SQZ_SHM_SINGLE_COPY_BYTES (0: never)
  std::string ibHca;                    // SQZ_IB_HCA ("" or device[:port])
  int ibGidIndex = 0;                   // SQZ_IB_GID_INDEX
  bool tunerCalibrate = true;           // SQZ_TUNER_CALIBRATE
  std::string tunerFile;                // SQZ_TUNER_FILE
  CostModel tcpModel = calibratedModel("tcp", 40e-6, 1 / 1.2e9, 1 / 4e9);
  CostModel shmModel = calibratedModel("shm", 8e-6, 1 / 2.5e9, 1 / 4e9);
  CostModel netModel = calibratedModel("net", 40e-6, 1 / 1.2e9, 1 / 4e9);  // ranks on >1 host

  // Validates ranges; throws Error(kInvalidArgument) naming the setting and the allowed range.
  static CommConfig fromParams(const Params& p);
};

}  // namespace squeeze
