// The codec hook: what a chunk looks like on the wire and what "combine" means. The executor
// calls it at each step of a schedule; algorithms never see it. This issue ships the dense codec
// (the values themselves); compressed codecs (cast, quantized, sparse) implement the same calls
// and keep their state (error feedback, momentum) in the codec object, which belongs to one
// tensor.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace squeeze {

class Codec {
 public:
  virtual ~Codec() = default;
  // Carried in every message header: ranks that use different codecs are told so.
  virtual uint8_t id() const = 0;
  virtual const char* name() const = 0;
  // True when a chunk's payload is exactly its values: the executor then sends straight from
  // and receives straight into the caller's buffers, with no encode or decode pass.
  virtual bool rawWire() const = 0;
  virtual size_t maxEncodedBytes(size_t count, DataType dtype) const = 0;
  // Writes the payload for count values at src; returns its size.
  virtual size_t encode(const void* src, size_t count, DataType dtype, void* payload) = 0;
  // dst[0..count) = the values the payload carries.
  virtual void decode(const void* payload, size_t bytes, size_t count, DataType dtype,
                      void* dst) = 0;
  // out[i] = local[i] (op) value carried by the payload, fused (out may alias local).
  virtual void combine(void* out, const void* local, const void* payload, size_t bytes,
                       size_t count, DataType dtype, RedOp op) = 0;
};

// The process-wide stateless dense codec, used when the caller gives none.
Codec& denseCodec();

}  // namespace squeeze
