// copyPayload / readPayload (codec.h): device/memory.h's copy, on the host or, for a device
// call, on the call's stream.
#include "compress/codec.h"
#include "device/memory.h"

namespace squeeze {

void copyPayload(void* dst, const void* src, size_t bytes, const ChunkInfo& at) {
  device::copyBytes(dst, src, bytes, at.stream);
}

void readPayload(void* dst, const void* src, size_t bytes, const ChunkInfo& at) {
  device::copyBytes(dst, src, bytes, at.stream);
  if (bytes) device::syncStream(at.stream, "reading payload bytes from the GPU");
}

}  // namespace squeeze
