// CodecComm: what a codec handle needs of the communicator it runs on (its size, the codec
// settings, a plain collective), so compress/ never includes src/core/. The communicator
// implements it; a composite method (PowerSGD) runs its inner all-reduces through it.
#pragma once

#include <cstddef>

#include "base/error.h"
#include "base/types.h"

namespace squeeze {

namespace device {
class Context;
}

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
  virtual int rank() const = 0;
  virtual const CodecSettings& codecSettings() const = 0;
  // One collective on this communicator (req.kind says which), run now, in the execution
  // context of the call it is part of: on device buffers inside a device call.
  virtual void collective(const CollRequest& req) = 0;
  // The same on host buffers whatever the call's context (the figures an adaptive method or the
  // pay-off guard makes the ranks agree on): a GPU kernel must never be handed host memory.
  virtual void hostCollective(const CollRequest& req) = 0;
  // Device calls whose exchange runs on the caller's stream alone (ranks that share one host,
  // device/stream_collectives.h; one rank, which exchanges nothing): the context their passes
  // run in (prepared, made with the communicator; Context::follow moves it onto each call's
  // stream), or null where there is no such exchange.
  virtual device::Context* streamContext() { return nullptr; }
  // Enqueues req on `stream` (a cudaStream_t of the context's GPU; null: the legacy default
  // stream), returning at once: an all-gather of a compressed call's payloads, or the dense
  // all-reduce of a call the codec sends dense (device memory). Every rank's call words include
  // req.codecMethod and req.specHash, so ranks that differ are told. Only where streamContext()
  // is not null; on one rank, a dense all-reduce alone: a copy (nothing in place).
  virtual void enqueueOnStream(const CollRequest& req, void* stream) {
    (void)req;
    (void)stream;
    raise(ErrorCode::kInternal, "enqueueOnStream on a communicator without stream collectives");
  }

 protected:
  ~CodecComm() = default;
};

}  // namespace squeeze
