// copyBytes / syncStream (see memory.h).
#include "device/memory.h"

#include <cstring>

#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include "device/cuda/runtime.h"
#endif

namespace squeeze::device {

void copyBytes(void* dst, const void* src, size_t bytes, GpuStream stream) {
  if (bytes == 0) return;
#if SQZ_HAVE_CUDA
  if (stream) {
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
    return;
  }
#endif
  (void)stream;
  std::memcpy(dst, src, bytes);
}

void syncStream(GpuStream stream, const char* what) {
#if SQZ_HAVE_CUDA
  if (stream) cuda::check(cudaStreamSynchronize(stream), what);
#else
  (void)stream;
  (void)what;
#endif
}

}  // namespace squeeze::device
