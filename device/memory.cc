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

void gatherStrided(float* dst, const float* src, size_t count, size_t stride, GpuStream stream) {
  if (count == 0) return;
#if SQZ_HAVE_CUDA
  if (stream) {
    cuda::check(cudaMemcpy2DAsync(dst, sizeof(float), src, stride * sizeof(float), sizeof(float),
                                  count, cudaMemcpyDefault, stream),
                "cudaMemcpy2DAsync (a strided sample)");
    return;
  }
#endif
  (void)stream;
  for (size_t j = 0; j < count; ++j) dst[j] = src[j * stride];
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
