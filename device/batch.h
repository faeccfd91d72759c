// Batched kernels: one launch of a kernel over several chunks, the pieces of one schedule step
// (the CUDA context gathers them: device/context.h, beginBatch). Each chunk is a job in a table
// that the launch takes by value as its argument; job j's thread blocks are grid row j
// (blockIdx.y), and each job's results are those of the single-chunk entry point on that chunk,
// bit for bit. A table holds at most kBatchJobs jobs, so that it stays within the 4 KiB a kernel
// argument may take on every CUDA version; a longer batch is launched kBatchJobs at a time.
//
// The jobs of one batch must not overlap in what they write: they run at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/cast.h"
#include "device/hd.h"
#include "device/quantize.h"
#include "squeeze_config.h"

namespace squeeze::device {

constexpr size_t kBatchJobs = 32;

// The quantizer a batch runs (device/quantize.h), and its settings, the same for every job.
enum class QuantKind : uint8_t { kInt8, kQsgd, kOnebit, kTerngrad };
struct QuantSetting {
  QuantKind kind;
  size_t block;
  int levels = 0;    // qsgd
  int bits = 0;      // qsgd
  uint64_t key = 0;  // qsgd, terngrad: the draws' counter key
};
// An encode: x[0..n) into scales and codes; with feedback, residual (null: norms only) as the
// single entry point's. index0: the global index of x[0] (qsgd's and terngrad's draws).
struct QuantEncodeJob {
  const float* x;
  size_t n;
  void* scales;
  uint8_t* codes;
  float* residual;
  uint64_t index0;
};
// A decode of n values into out, or (decode-add) out = local + the values.
struct QuantDecodeJob {
  const void* scales;
  const uint8_t* codes;
  size_t n;
  float* out;
  const float* local;
};
// One job on the CPU (device/cpu/quantize.cc): the kernel of s.kind on the job's chunk.
void cpuQuantEncodeJob(const QuantSetting& s, const QuantEncodeJob& job, Feedback* feedback);
void cpuQuantDecodeJob(const QuantSetting& s, const QuantDecodeJob& job, bool add);
// narrow: in (float) -> out (uint16_t); widen: in (uint16_t) -> out (float), plus local when
// adding.
struct CastJob {
  const void* in;
  void* out;
  const float* local;
  size_t n;
};
// gpuCastFeedback's arguments for one chunk.
struct CastFeedbackJob {
  const float* x;
  uint16_t* payload;
  size_t n;
  float* residual;
};

// Sparse (device/sparse.h): a one-block top-k selection (n <= kOneBlockSelectMax, 0 < k <= n),
// a gather, a scatter into dense (densify: dst zeroed first; scatter-add: dst = local + the
// entries, local copied to dst first where they differ), sparse error feedback, and the index
// check of a payload (handle_kernels.h's gpuFindBadIndex: found[0..1] in device memory).
struct SelectJob {
  const float* x;
  size_t n;
  size_t k;
  uint32_t* idx;
};
struct GatherJob {
  const float* x;
  const uint32_t* idx;
  size_t n;  // entries
  float* out;
};
struct ScatterJob {
  const uint32_t* idx;
  const float* vals;
  size_t k;
  float* dst;
  const float* local;  // scatter-add
  size_t n;
};
struct SparseFeedbackJob {
  const float* x;
  size_t n;
  const uint32_t* idx;
  size_t k;
  float* residual;
};
struct IndexCheckJob {
  const uint32_t* idx;
  size_t n;  // entries
  size_t count;
  unsigned long long* found;   // {~0, ~0} on entry; with a report, left so after
  unsigned long long* report;  // null, or where found[0..1] is copied (pinned host memory)
};

// A small copy of a batch's pieces (a payload header written in, a check's words read out into
// pinned memory): n <= kSmallCopyBytes bytes to dst from src, or from `bytes` when src is null.
constexpr size_t kSmallCopyBytes = 16;
struct SmallCopyJob {
  void* dst;
  const void* src;
  size_t n;
  unsigned char bytes[kSmallCopyBytes];
};

#if SQZ_HAVE_CUDA
struct SparseScratch;  // device/sparse.h
// ---- CUDA (device/cuda/quantize.cu, cast.cu, handle_kernels.cu) -------------------------------
// Enqueue only, on `stream`; nothing waits. Jobs with n == 0 are skipped. The sums of a batch
// (feedback norms) go to two doubles in device memory, job after job, each job's as its single
// entry point adds them (deviceNorms, deviceSums; null: no norms).
// The quantizers' kernels give the cpu* functions' scales, codes, decoded values and residual
// bit for bit (the per-block sums run in the CPU's 8 lanes and order); their feedback norms are
// summed in another order than the CPU's (equal to rounding, not bit for bit). Pointers are
// device memory or pinned, mapped host memory; scales may be unaligned. One warp encodes one
// block and the per-block sums are sequential in 8 lanes, so blocks much larger than a few
// thousand values encode slowly. A decode of a batch of one is the single decode.
void gpuQuantEncodeBatch(const QuantSetting& s, const QuantEncodeJob* jobs, size_t count,
                         bool feedback, double* deviceNorms, GpuStream stream);
void gpuQuantDecodeBatch(const QuantSetting& s, const QuantDecodeJob* jobs, size_t count, bool add,
                         GpuStream stream);
// One encode, the twin of cpuQuantEncodeJob (job.residual is ignored: feedback's is used). With
// feedback it adds the norms to feedback->deviceNorms on the device (nothing waits), or, without
// that, synchronizes the stream to add them to *feedback->norms (when not null).
void gpuQuantEncodeJob(const QuantSetting& s, const QuantEncodeJob& job, Feedback* feedback,
                       GpuStream stream);
void gpuNarrowBatch(Narrow kind, const CastJob* jobs, size_t count, GpuStream stream);
void gpuWidenBatch(Narrow kind, const CastJob* jobs, size_t count, bool add, GpuStream stream);
void gpuCastFeedbackBatch(Narrow kind, const CastFeedbackJob* jobs, size_t count,
                          double* deviceSums, GpuStream stream);
void gpuSelectTopkBatch(const SelectJob* jobs, size_t count, GpuStream stream);
void gpuGatherBatch(const GatherJob* jobs, size_t count, GpuStream stream);
void gpuDensifyBatch(const ScatterJob* jobs, size_t count, GpuStream stream);
void gpuScatterAddBatch(const ScatterJob* jobs, size_t count, GpuStream stream);
// scratch: as device/sparse.h's (its sums' partials); null: the thread's for the stream.
void gpuSparseFeedbackBatch(const SparseFeedbackJob* jobs, size_t count, double* deviceSums,
                            GpuStream stream, SparseScratch* scratch = nullptr);
void gpuFindBadIndexBatch(const IndexCheckJob* jobs, size_t count, GpuStream stream);
// dst and src: device memory or pinned, mapped host memory.
void gpuSmallCopyBatch(const SmallCopyJob* jobs, size_t count, GpuStream stream);
#endif

}  // namespace squeeze::device
