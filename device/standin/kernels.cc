// The stand-in's cast, reduce and quantizer kernels (the cuda-standin build;
// device/standin/standin.h): each gpu* entry point of device/cast.h and reduce.h, and batch.h's
// gpuQuantEncodeJob, runs its cpu* twin on the stream (kernel_support.h), with its device/cuda/*.cu original's early
// returns, stream synchronizations and scratch; and gpuPrepareThread (launch.cuh), which loads
// the kernels and makes every kernel file's scratch ahead of use.
#include <cuda_runtime_api.h>

#include "device/batch.h"
#include "device/cast.h"
#include "device/quantize.h"
#include "device/reduce.h"
#include "device/standin/kernel_support.h"
#include "device/standin/standin.h"

namespace squeeze::device {

using namespace standin_kernels;

namespace {

// ---- quantizer encode and decode -------------------------------------------------------------

// quantize.cu's runEncode: encode(feedback) runs the cpu* encode; with feedback, the norms are
// added to feedback->deviceNorms on the stream, or come back through the device and pinned pair
// after a synchronize.
template <class Encode>
void runEncode(const char* kernel, const float* x, size_t n, size_t block, void* scales,
               uint8_t* codes, Feedback* feedback, GpuStream stream, Encode encode) {
  if (n == 0) return;
  SQZ_ENFORCE(block > 0, kernel, ": block of 0 values");
  if (!feedback) {
    enqueue(stream, kernel, {{"x", x, n}, {"scales", scales, n}, {"codes", codes, n}},
            [=] { encode(nullptr); });
    return;
  }
  float* residual = feedback->residual;
  const std::vector<Arg> args = {
      {"x", x, n}, {"scales", scales, n}, {"codes", codes, n}, {"residual", residual, n}};
  if (feedback->deviceNorms) {
    enqueueAddingSums(stream, kernel, args, feedback->deviceNorms, [=](double* in, double* sent) {
      Norms norms;
      Feedback fb{residual, &norms};
      encode(&fb);
      *in = norms.inputSq;
      *sent = norms.sentSq;
    });
    return;
  }
  QuantizeNorms& s = scratchOf<QuantizeNorms>();
  auto* norms = static_cast<double*>(s.device.data());
  // quantize.cu zeroes the pair, then the kernel adds to it.
  cuda::check(cudaMemsetAsync(norms, 0, 2 * sizeof(double), stream), "cudaMemsetAsync");
  enqueue(stream, kernel, args, [=] {
    Norms sums;
    Feedback fb{residual, &sums};
    encode(&fb);
    norms[0] = sums.inputSq;
    norms[1] = sums.sentSq;
  });
  if (!feedback->norms) return;
  copyBack(s.host.data(), norms, 2 * sizeof(double), stream);
  syncStream(stream, kernel);
  const double* h = static_cast<const double*>(s.host.data());
  feedback->norms->inputSq += h[0];
  feedback->norms->sentSq += h[1];
}

}  // namespace

// ---- cast.h --------------------------------------------------------------------------------

void gpuNarrow(Narrow kind, const float* in, uint16_t* out, size_t n, GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuNarrow", {{"in", in, n}, {"out", out, n}},
          [=] { cpuNarrow(kind, in, out, n); });
}

void gpuWiden(Narrow kind, const uint16_t* in, float* out, size_t n, GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuWiden", {{"in", in, n}, {"out", out, n}},
          [=] { cpuWiden(kind, in, out, n); });
}

void gpuWidenAdd(Narrow kind, float* out, const float* local, const uint16_t* in, size_t n,
                 GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuWidenAdd", {{"out", out, n}, {"local", local, n}, {"in", in, n}},
          [=] { cpuWidenAdd(kind, out, local, in, n); });
}

// ---- reduce.h ------------------------------------------------------------------------------

void gpuReduce(DataType dtype, RedOp op, void* out, const void* a, const void* b, size_t n,
               GpuStream stream) {
  if (n == 0) return;
  const ReduceFn fn = cpuReduceFn(dtype, op);  // an unknown pair throws here, as on a GPU
  enqueue(stream, "gpuReduce", {{"out", out, n}, {"a", a, n}, {"b", b, n}},
          [=] { fn(out, a, b, n); });
}

void gpuDivide(void* buf, size_t n, DataType dtype, int divisor, GpuStream stream) {
  if (n == 0) return;
  SQZ_ENFORCE(visitElement(dtype, [](auto) { return true; }), "no division for dtype ", int(dtype));
  enqueue(stream, "gpuDivide", {{"buf", buf, n}}, [=] { cpuDivide(buf, n, dtype, divisor); });
}

namespace {

// What the stream collectives' kernels touch, for enqueue's checks: a check's verdict, error
// words and ranks' call words; the words a publish stores; a fused fold's output and inputs.
void addCheckArgs(std::vector<Arg>& args, const CallCheck& c, uint32_t* verdict) {
  args.push_back({"verdict", verdict, size_t(1)});
  args.push_back({"error", const_cast<uint32_t*>(c.error), size_t(kErrorWords)});
  for (int q = 0; q < c.nranks; ++q)
    args.push_back({"call", const_cast<const uint32_t*>(c.call[q]), size_t(kCallWords)});
}
void addWordArgs(std::vector<Arg>& args, const PublishWords& p) {
  for (int i = 0; i < p.count; ++i)
    args.push_back({"word", const_cast<uint32_t*>(p.word[i]), size_t(1)});
}
void addFoldArgs(std::vector<Arg>& args, void* out, const RankInputs& r, size_t n) {
  args.push_back({"out", out, n});
  for (int q = 0; q < r.nranks; ++q) args.push_back({"in", r.in[q], n});
}

}  // namespace

void gpuCheckCalls(const CallCheck& c, uint32_t* verdict, GpuStream stream) {
  SQZ_ENFORCE(c.nranks >= 0 && c.nranks <= kMaxReduceRanks, "checkCalls over ", c.nranks,
              " ranks");
  std::vector<Arg> args;
  addCheckArgs(args, c, verdict);
  enqueue(stream, "gpuCheckCalls", args, [=] { cpuCheckCalls(c, verdict); });
}

void gpuPublishWords(const PublishWords& p, GpuStream stream) {
  SQZ_ENFORCE(p.count >= 1 && p.count <= kMaxPublishWords && p.signals >= 0 &&
                  p.signals <= p.count,
              "publishing ", p.count, " words");
  std::vector<Arg> args = {{"verdict", p.verdict, size_t(1)}};
  addWordArgs(args, p);
  enqueue(stream, "gpuPublishWords", args, [=] { cpuPublishWords(p); });
}

void gpuReduceRanks(DataType dtype, RedOp op, void* out, const RankInputs& r, size_t n,
                    int divisor, GpuStream stream) {
  SQZ_ENFORCE(r.nranks >= 1 && r.nranks <= kMaxReduceRanks, "reduceRanks over ", r.nranks,
              " ranks");
  (void)cpuReduceFn(dtype, op);  // an unknown pair throws here, as on a GPU
  if (n == 0) return;
  std::vector<Arg> args = {{"out", out, n}, {"verdict", r.verdict, size_t(1)}};
  for (int q = 0; q < r.nranks; ++q) args.push_back({"in", r.in[q], n});
  enqueue(stream, "gpuReduceRanks", args, [=] { cpuReduceRanks(dtype, op, out, r, n, divisor); });
}

void gpuGatedCopyPublish(const volatile uint32_t* error, uint32_t* verdict,
                         const RoundCopies& copies, const PublishWords& p, GpuStream stream) {
  checkSmallRound(copies, p, verdict);
  std::vector<Arg> args = {{"verdict", verdict, size_t(1)},
                           {"error", const_cast<const uint32_t*>(error), size_t(1)}};
  for (int c = 0; c < copies.count; ++c) {
    if (copies.bytes[c] == 0) continue;
    args.push_back({"dst", static_cast<uint8_t*>(copies.dst[c]), copies.bytes[c]});
    args.push_back({"src", static_cast<const uint8_t*>(copies.src[c]), copies.bytes[c]});
  }
  addWordArgs(args, p);
  enqueue(stream, "gpuGatedCopyPublish", args,
          [=] { cpuGatedCopyPublish(error, verdict, copies, p); });
}

void gpuCheckReduceRanks(const CallCheck& c, uint32_t* verdict, DataType dtype, RedOp op,
                         void* out, const RankInputs& r, size_t n, int divisor,
                         GpuStream stream) {
  checkRanksFold(c, r, verdict);
  (void)cpuReduceFn(dtype, op);  // an unknown pair throws here, as on a GPU
  std::vector<Arg> args;
  addCheckArgs(args, c, verdict);
  if (n > 0) addFoldArgs(args, out, r, n);
  enqueue(stream, "gpuCheckReduceRanks", args,
          [=] { cpuCheckReduceRanks(c, verdict, dtype, op, out, r, n, divisor); });
}

// ---- batch.h: one quantizer encode ----------------------------------------------------------

void gpuQuantEncodeJob(const QuantSetting& s, const QuantEncodeJob& job, Feedback* feedback,
                       GpuStream stream) {
  SQZ_ENFORCE(s.kind != QuantKind::kQsgd || s.bits == 4 || s.bits == 8, "qsgd: ", s.bits,
              " bits per value");
  runEncode("gpuQuantEncodeJob", job.x, job.n, s.block, job.scales, job.codes, feedback, stream,
            [=](Feedback* fb) { cpuQuantEncodeJob(s, job, fb); });
}

// ---- launch.cuh and kernel_modules.cc --------------------------------------------------------

void loadKernelModules() { standin::loadKernels(); }

void gpuPrepareThread(GpuStream) {
  loadKernelModules();  // first, as on a GPU
  (void)scratchOf<HandleScratch>();
  (void)scratchOf<QuantizeNorms>();
}

}  // namespace squeeze::device
