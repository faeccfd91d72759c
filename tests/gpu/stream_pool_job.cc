// One rank of a job that does what torch does before its first collective: it creates a pool of
// 32 streams (more than the process's hardware work queues, CUDA_DEVICE_MAX_CONNECTIONS, 8
// unless set), then makes its device calls on streams of that pool, plain and compressed. Every
// pool stream shares a queue with others, so any CUDA call the library made while a caller's
// stream is held could stall behind it. Prints "rank R: N calls, 0 wrong" and exits 0 when every
// result is exact (dense) or the same on every rank (compressed: its sum checked by the ranks
// all-reducing a checksum); 77 without a GPU. Started by sqzrun (tests/gpu/meson.build).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "squeeze/squeeze.h"

namespace {

int fail(const char* what, const char* detail) {
  std::fprintf(stderr, "stream_pool_job: %s: %s\n", what, detail);
  return 1;
}

}  // namespace

int main() {
  constexpr int kPool = 32, kCalls = 12;
  constexpr size_t kCount = 1 << 16;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("stream_pool_job: skipped: no usable GPU (%s)\n",
                cudaGetErrorString(cudaGetLastError()));
    return 77;
  }
  std::vector<cudaStream_t> pool(kPool);
  for (auto& s : pool)
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
      return fail("cudaStreamCreateWithFlags", cudaGetErrorString(cudaGetLastError()));
  sqzComm_t comm = nullptr;
  if (sqzCommInitFromEnv(&comm, nullptr) != sqzSuccess)
    return fail("sqzCommInitFromEnv", sqzGetLastError(nullptr));
  int rank = 0, nranks = 0;
  sqzCommUserRank(comm, &rank);
  sqzCommCount(comm, &nranks);
  float *in = nullptr, *out = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&in), kCount * sizeof(float)) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&out), kCount * sizeof(float)) != cudaSuccess)
    return fail("cudaMalloc", "no device memory");
  sqzCodec_t codecs[2] = {nullptr, nullptr};
  const char* specs[2] = {"int8:auto_dense=0", "topk:ratio=0.01,auto_dense=0"};
  for (int c = 0; c < 2; ++c)
    if (sqzCodecCreate(&codecs[c], specs[c], kCount, sqzFloat32, comm) != sqzSuccess)
      return fail("sqzCodecCreate", sqzGetLastError(comm));
  std::vector<float> host(kCount), result(kCount);
  int wrong = 0;
  for (int call = 0; call < kCalls; ++call) {
    cudaStream_t s = pool[(call * 7 + rank) % kPool];
    for (size_t i = 0; i < kCount; ++i) host[i] = float(int((i * 31 + call) % 97) - 48 + rank);
    cudaMemcpyAsync(in, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice, s);
    const int mode = call % 3;  // dense, int8, top-k
    const sqzResult_t rc =
        mode == 0 ? sqzAllReduce(in, out, kCount, sqzFloat32, sqzSum, comm, s)
                  : sqzAllReduceCompressed(in, out, kCount, sqzFloat32, sqzSum, codecs[mode - 1],
                                           comm, s);
    if (rc != sqzSuccess) return fail("all-reduce", sqzGetLastError(comm));
    cudaMemcpyAsync(result.data(), out, kCount * sizeof(float), cudaMemcpyDeviceToHost, s);
    if (cudaStreamSynchronize(s) != cudaSuccess)
      return fail("cudaStreamSynchronize", cudaGetErrorString(cudaGetLastError()));
    sqzResult_t async = sqzSuccess;
    sqzCommGetAsyncError(comm, &async);
    if (async != sqzSuccess) return fail("the call failed", sqzGetLastError(comm));
    if (mode == 0) {
      // Integers well inside float's exact range: the sum is exact in any order.
      for (size_t i = 0; i < kCount; ++i) {
        float want = 0;
        for (int r = 0; r < nranks; ++r) want += float(int((i * 31 + call) % 97) - 48 + r);
        if (result[i] != want) {
          ++wrong;
          break;
        }
      }
    } else {
      // Every rank must hold the same bits: the minimum and the maximum of a checksum agree.
      double sum = 0;
      for (float v : result) sum += std::fabs(double(v)) * 1.0001;
      double lo = -sum, hi = sum;  // min and max of sum, through max of (-sum) and (sum)
      sqzAllReduce(&lo, &lo, 1, sqzFloat64, sqzMax, comm, nullptr);
      sqzAllReduce(&hi, &hi, 1, sqzFloat64, sqzMax, comm, nullptr);
      if (-lo != hi) ++wrong;
    }
  }
  for (auto* c : codecs) sqzCodecDestroy(c);
  sqzCommDestroy(comm);
  cudaFree(in);
  cudaFree(out);
  for (auto s : pool) cudaStreamDestroy(s);
  std::printf("rank %d: %d calls on a pool of %d streams, %d wrong\n", rank, kCalls, kPool, wrong);
  return wrong ? 1 : 0;
}
