// copyPayload / readPayload (codec.h): how a codec moves payload bytes on the host or, for a
// device call, on the call's stream.
#include <cstring>

#include "compress/codec.h"
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include "device/cuda/runtime.h"
#endif

namespace squeeze {

void copyPayload(void* dst, const void* src, size_t bytes, const ChunkInfo& at) {
  if (!bytes) return;
#if SQZ_HAVE_CUDA
  if (at.stream) {
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, at.stream),
                "cudaMemcpyAsync of payload bytes");
    return;
  }
#endif
  (void)at;
  std::memcpy(dst, src, bytes);
}

void readPayload(void* dst, const void* src, size_t bytes, const ChunkInfo& at) {
  if (!bytes) return;
#if SQZ_HAVE_CUDA
  if (at.stream) {
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, at.stream),
                "cudaMemcpyAsync reading payload bytes");
    cuda::check(cudaStreamSynchronize(at.stream), "reading payload bytes from the GPU");
    return;
  }
#endif
  (void)at;
  std::memcpy(dst, src, bytes);
}

}  // namespace squeeze
