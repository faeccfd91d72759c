// sqz-codec-bench -d cuda (see codec_bench.cc): GPU 0's set-up, the cudaEvent timing of every
// -d cuda figure, and the two rows only the GPU has: the device's copy bandwidth and top-k of 64M
// values, sampled and exact. The codec rows run the same code as the host's (codec_bench.cc) on
// device buffers. Compiled only in CUDA builds.
#include "codec_bench.h"

#if SQZ_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "compress/topk.h"
#include "device/cuda/runtime.h"
#include "device/sparse.h"

namespace squeeze::perf {

void CodecBench::setUpGpu() {
  cuda::check(cudaSetDevice(0), "cudaSetDevice(0)");
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  gpu_ = std::make_unique<GpuState>();
  gpu_->name = prop.name;
  gpu_->ctx = device::makeCudaContext(0, gpu_->stream.get());
  gpu_->ctx->prepareThread();
  const size_t bytes = o_.count * sizeof(float);
  for (cuda::DeviceBuffer* b :
       {&gpu_->x, &gpu_->other, &gpu_->out, &gpu_->decoded, &gpu_->residual})
    *b = cuda::DeviceBuffer(bytes);
  cuda::check(cudaMemcpy(gpu_->x.data(), x_.data(), bytes, cudaMemcpyHostToDevice),
              "cudaMemcpy of the chunk");
  cuda::check(cudaMemcpy(gpu_->other.data(), other_.data(), bytes, cudaMemcpyHostToDevice),
              "cudaMemcpy of the chunk");
}

// Median seconds of -r runs of body, each between two events on the stream, after one untimed
// run; reset (enqueued work, or nothing) runs before each, outside the events. The context is
// waited for after each run, as a call ends, so its pinned slots (a header's check, a norm's
// sum) are recycled as in real calls: without it they run out, and later runs time the
// synchronous fallbacks.
double CodecBench::timeGpu(const std::function<void()>& body, const std::function<void()>& reset) {
  cudaStream_t s = gpu_->stream.get();
  if (reset) reset();
  body();
  gpu_->ctx->wait("the bench's untimed run");
  std::vector<double> t;
  for (int i = 0; i < o_.reps; ++i) {
    if (reset) reset();
    cuda::check(cudaEventRecord(gpu_->start, s), "cudaEventRecord");
    body();
    cuda::check(cudaEventRecord(gpu_->stop, s), "cudaEventRecord");
    cuda::check(cudaEventSynchronize(gpu_->stop), "cudaEventSynchronize");
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, gpu_->start, gpu_->stop), "cudaEventElapsedTime");
    t.push_back(ms * 1e-3);
    gpu_->ctx->wait("the bench's run");
  }
  return median(t);
}

void CodecBench::gpuCopyRow() {
  CodecBenchRow row;
  row.kind = "copy";
  row.name = "cudaMemcpyAsync device to device, 256 MiB";
  try {
    cuda::DeviceBuffer src(kCopyBytes), dst(kCopyBytes);
    cudaStream_t s = gpu_->stream.get();
    cuda::check(cudaMemsetAsync(src.data(), 1, kCopyBytes, s), "cudaMemsetAsync");
    cuda::check(cudaMemsetAsync(dst.data(), 0, kCopyBytes, s), "cudaMemsetAsync");
    double sec = timeGpu([&] {
      cuda::check(cudaMemcpyAsync(dst.data(), src.data(), kCopyBytes, cudaMemcpyDefault, s),
                  "cudaMemcpyAsync (device copy)");
    });
    row.copyGbps = sec > 0 ? 2.0 * static_cast<double>(kCopyBytes) / 1e9 / sec : 0.0;
    std::printf(
        "# device copy bandwidth: %.1f GB/s (cudaMemcpyAsync device to device of 256 MiB, bytes "
        "read + written over the time)\n",
        row.copyGbps);
  } catch (const Error& e) {
    std::printf("# device copy bandwidth: not measured: %s\n", e.what());
    row.error = e.what();
    ++failures_;
  }
  rows_.push_back(row);
}

// Top-k of 64M values on the GPU at ratios 0.001 and 0.01 (issue 47 holds both to torch.topk on
// the same GPU: tests/gpu/torch/topk_ref.py), encode = select + gather: sampled (DGC's mode) and
// exact (topk's default route).
void CodecBench::gpuSelectionRows() {
  const size_t n = kSelectionCount;
  const double ratios[] = {kSelectionRatio, 0.01};
  const size_t kMax = keepCount(ratios[1], n);
  std::printf("#\n# selection on the GPU: top-k of %zu float32 values, one chunk, median of %d "
              "runs\n", n, o_.reps);
  try {
    std::vector<float> hx(n);
    fillBenchGradient(hx, 0);
    cuda::DeviceBuffer x(n * sizeof(float)), idx(kMax * sizeof(uint32_t)),
        vals(kMax * sizeof(float));
    cuda::check(cudaMemcpy(x.data(), hx.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                "cudaMemcpy of the selection input");
    cudaStream_t s = gpu_->stream.get();
    const float* dx = static_cast<const float*>(x.data());
    uint32_t* di = static_cast<uint32_t*>(idx.data());
    float* dv = static_cast<float*>(vals.data());
    for (double ratio : ratios) {
      const size_t k = keepCount(ratio, n);
      for (bool sampled : {true, false}) {
        CodecBenchRow& row = rows_.emplace_back();
        row.kind = "selection";
        char name[96];
        std::snprintf(name, sizeof name, "topk:ratio=%g,sample=%d encode (select + gather)",
                      ratio, sampled ? 1 : 0);
        row.name = name;
        row.k = k;
        size_t m = 0;
        double sec = timeGpu([&] {
          m = device::gpuSelectTopk(dx, n, k, sampled, di, s);
          device::gpuGather(dx, di, m, dv, s);
        });
        const size_t bytes = 8 + 8 * m;
        row.timeMs = sec * 1e3;
        row.payload = static_cast<double>(bytes);
        row.ratio = static_cast<double>(n) * sizeof(float) / static_cast<double>(bytes);
        std::printf("#   %-48s %10.2f ms  (k = %zu, payload %zu B%s)\n", row.name.c_str(),
                    row.timeMs, k, bytes, sampled ? ", DGC's mode" : "");
      }
    }
  } catch (const Error& e) {
    std::printf("#   not timed: %s\n", e.what());
    ++failures_;
    CodecBenchRow& row = rows_.emplace_back();
    row.kind = "selection";
    row.name = "topk on the GPU";
    row.error = e.what();
  }
}

}  // namespace squeeze::perf

#endif  // SQZ_HAVE_CUDA
