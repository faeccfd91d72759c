// sqz-codec-bench's table (see codec_bench.cc): the CodecBench that times each codec's calls and
// prints a row per codec, the rows of its -J file, and (CUDA builds) the GPU state of -d cuda.
// codec_bench.cc has the host rows, the -J file and the run; codec_bench_cuda.cc the -d cuda
// parts (its device set-up, timing, copy and selection rows).
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codec_bench_flags.h"
#include "compress/codec.h"
#include "compress/spec.h"
#include "json_file.h"
#include "perf_json.h"
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "device/cuda/runtime.h"
#endif

namespace squeeze::perf {

inline constexpr size_t kSelectionCount = size_t{64} << 20;  // values in the -S row
inline constexpr double kSelectionRatio = 0.001;
inline constexpr size_t kCopyBytes = size_t{256} << 20;  // -d cuda's copy-bandwidth buffers

/// Writes rank `rank`'s gradient-like values into v: inputs.h's gradientFromHashes with this
/// bench's own keys (see codec_bench.cc).
void fillBenchGradient(std::vector<float>& v, int rank);

/// The median of v (the mean of the middle two for an even count).
double median(std::vector<double> v);

// One row of the -J file: a codec's figures ("codec"), or one line of the -S comparison
// ("selection"). Negative figures (printed "-") and NaN are written as null.
struct CodecBenchRow {
  const char* kind = "codec";
  std::string name;  // the codec spec, or the selection method
  double payload = NAN;
  double ratio = NAN;
  double encode = -1, encodeFeedback = -1, combine = -1, decode = -1;  // GB/s
  double memcpy = -1;  // host rows: one core's memcpy, timed between the encodeFB runs (GB/s)
  double timeMs = NAN;                                                 // selection rows
  double speedup = NAN;   // selection: std::nth_element's time over top-k's
  double copyGbps = NAN;  // copy: the device's copy bandwidth (bytes read + written)
  size_t k = 0;           // selection: values kept
  std::string note, error;
};

#if SQZ_HAVE_CUDA
// -d cuda: the GPU's name, the stream every kernel runs on, the timing events, and the chunk's
// data in device memory (o.count floats each).
struct GpuState {
  std::string name;
  cuda::Stream stream;
  std::unique_ptr<device::Context> ctx;  // the CUDA execution context on `stream`
  cudaEvent_t start = nullptr, stop = nullptr;
  cuda::DeviceBuffer x, other, out, decoded, residual;
  GpuState() {
    cuda::check(cudaEventCreate(&start), "cudaEventCreate");
    cuda::check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~GpuState() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  GpuState(const GpuState&) = delete;
  GpuState& operator=(const GpuState&) = delete;
};
#endif

class CodecBench {
 public:
  /// json: the -J file, open, or nullptr without -J.
  CodecBench(const CodecBenchOptions& o, JsonFile* json, const JsonRunInfo& runInfo)
      : o_(o), x_(o.count), other_(o.count), json_(json), runInfo_(runInfo) {
    fillBenchGradient(x_, 0);
    fillBenchGradient(other_, 1);
  }

  int run();

 private:
  void row(const std::string& text);
  void failedRow(const std::string& name, const std::string& error);
  int writeJson();
  void chunkRow(const std::string& name, Codec& codec);
  void compositeRow(const std::string& name, const CodecSpec& spec);
  // memcpyRate: the memcpy timed beside the encodeFB runs (host rows), or -1.
  void printFigures(const std::string& name, double payload, double enc, double encFb, double comb,
                    double dec, const char* note, double memcpyRate = -1);
  void selectionRow();
#if SQZ_HAVE_CUDA
  // -d cuda (codec_bench_cuda.cc).
  void setUpGpu();
  double timeGpu(const std::function<void()>& body, const std::function<void()>& reset = nullptr);
  void gpuCopyRow();
  void gpuSelectionRows();
  std::unique_ptr<GpuState> gpu_;
#endif

  const CodecBenchOptions& o_;
  std::vector<float> x_, other_;
  // The reference memcpy's buffers (kMemcpyBytes each, as sqz-machine-limits copies), made at
  // the first host row.
  std::vector<char> memcpySrc_, memcpyDst_;
  int width_ = 10;
  int failures_ = 0;
  JsonFile* json_;
  JsonRunInfo runInfo_;
  std::vector<CodecBenchRow> rows_;
};

}  // namespace squeeze::perf
