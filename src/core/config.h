// CommConfig: the resolved, validated settings one communicator runs with: the SQZ_* environment
// (params.h) overlaid with the caller's sqzConfig_t. The transports' and the codecs' settings are
// its bases (transports/settings.h, compress/codec_comm.h), what those layers are handed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "base/params.h"
#include "compress/codec_comm.h"
#include "transports/settings.h"

namespace squeeze {

struct CommConfig : TransportSettings, CodecSettings {
  size_t chunkBytes = 512 << 10;
  int encodeThreads = 1;  // SQZ_ENCODE_THREADS: the executor's encode pool (encode_pool.h)
  int spinUs = 100;  // SQZ_SPIN_US: the executor's polling before it sleeps
  std::string socketIfname;
  std::string algoSpec;        // SQZ_ALGO
  bool fullCheck = false;      // SQZ_CHECK_MODE=full
  bool tunerCalibrate = true;  // SQZ_TUNER_CALIBRATE
  std::string tunerFile;       // SQZ_TUNER_FILE
  CostModel tcpModel = calibratedModel("tcp", 40e-6, 1 / 1.2e9, 1 / 4e9);
  CostModel shmModel = calibratedModel("shm", 8e-6, 1 / 2.5e9, 1 / 4e9);
  CostModel netModel = calibratedModel("net", 40e-6, 1 / 1.2e9, 1 / 4e9);  // ranks on >1 host

  // Validates ranges; throws Error(kInvalidArgument) naming the setting and the allowed range.
  static CommConfig fromParams(const Params& p);
};

}  // namespace squeeze
