// CodecComm: what a codec handle needs of the communicator it runs on (its size, the codec
// settings, a plain collective), so compress/ never includes src/core/. The communicator
// implements it; a composite method (PowerSGD) runs its inner all-reduces through it.
#pragma once

#include <cstddef>

#include "base/types.h"

namespace squeeze {

// The SQZ_CODEC_* settings a handle reads per call. CommConfig (src/core/config.h) derives from
// it.
struct CodecSettings {
  size_t codecMinBytes = 16 << 10;  // SQZ_CODEC_MIN_BYTES
  bool codecAutoDense = true;       // SQZ_CODEC_AUTO_DENSE
  double codecDelayUs = 0;          // SQZ_CODEC_DELAY_US (whole microseconds)
};

class CodecComm {
 public:
  virtual int size() const = 0;
  virtual const CodecSettings& codecSettings() const = 0;
  // One collective on this communicator (req.kind says which), run now.
  virtual void collective(const CollRequest& req) = 0;

 protected:
  ~CodecComm() = default;
};

}  // namespace squeeze
