// The stand-in's error-feedback and DGC kernels (the cuda-standin build;
// device/standin/standin.h): each gpu* entry point of device/handle_kernels.h runs its cpu* twin
// on the stream (kernel_support.h), with handle_kernels.cu's scratch, lanes and host waits.
#include "device/handle_kernels.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "device/cast.h"
#include "device/standin/kernel_support.h"

namespace squeeze::device {

using namespace standin_kernels;

// ---- handle_kernels.h ----------------------------------------------------------------------

void gpuAddResidual(const float* g, float* e, float* x, size_t n, GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuAddResidual", {{"g", g, n}, {"e", e, n}, {"x", x, n}},
          [=] { cpuAddResidual(g, e, x, n); });
}

void gpuDgcPrepare(const float* g, float scale, float m, float* u, float* v, float* x,
                   uint8_t* nonzero, size_t n, GpuStream stream, const float* deviceScale) {
  if (n == 0) return;
  enqueue(stream, "gpuDgcPrepare",
          {{"g", g, n}, {"u", u, n}, {"v", v, n}, {"x", x, n}, {"nonzero", nonzero, n}},
          [=] { cpuDgcPrepare(g, deviceScale ? *deviceScale : scale, m, u, v, x, nonzero, n); });
}

void gpuDgcMask(float* u, const float* v, const uint8_t* nonzero, size_t n, GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuDgcMask", {{"u", u, n}, {"v", v, n}, {"nonzero", nonzero, n}},
          [=] { cpuDgcMask(u, v, nonzero, n); });
}

namespace {

// handle_kernels.cu's feedback passes with norms: pass(in, sent) (the CPU twin) as `kernel`,
// then the real pass's other launches (`rest`), and the sums added to deviceSums on the stream
// (with the lanes' sum kernel), or brought back to *inputSq / *sentSq by a synchronize, through
// the scratch the real lanes use.
void feedbackWithNorms(GpuStream stream, const char* kernel, const std::vector<Arg>& args, size_t n,
                       double* inputSq, double* sentSq, double* deviceSums,
                       const std::vector<const char*>& rest,
                       std::function<void(double*, double*)> pass) {
  HandleScratch& sc = scratchOf<HandleScratch>();
  sc.partials.reserve((n + kNormBlock - 1) / kNormBlock * kNormLanes * 2 * sizeof(float), stream);
  if (deviceSums) {
    enqueueAddingSums(stream, kernel, args, deviceSums, std::move(pass));
    launchRest(stream, rest);
    launchRest(stream, {"normTreeKernel"});
    return;
  }
  // The real pass leaves float partials (two per lane) in that scratch; here the body leaves
  // the two sums there, and they come back the same way.
  auto* sums = static_cast<double*>(sc.partials.data());
  enqueue(stream, kernel, args, [=] {
    sums[0] = sums[1] = 0;
    pass(&sums[0], &sums[1]);
  });
  launchRest(stream, rest);
  copyBack(sc.hostNorms, sums, sizeof sc.hostNorms, stream);
  syncStream(stream, "error feedback on the GPU");
  if (inputSq) *inputSq += sc.hostNorms[0];
  if (sentSq) *sentSq += sc.hostNorms[1];
}

}  // namespace

void gpuFeedbackPass(const float* x, const float* d, size_t n, float* residual, double* inputSq,
                     double* sentSq, double* deviceSums, GpuStream stream) {
  if (n == 0) return;
  const std::vector<Arg> args = {{"x", x, n}, {"d", d, n}, {"residual", residual, n}};
  if (!inputSq && !sentSq && !deviceSums) {
    if (residual)
      enqueue(stream, "gpuFeedbackPass", args,
              [=] { cpuFeedbackPass(x, d, n, residual, nullptr, nullptr); });
    return;
  }
  // [feedbackResidualKernel,] normLanesKernel.
  feedbackWithNorms(
      stream, "gpuFeedbackPass", args, n, inputSq, sentSq, deviceSums,
      residual ? std::vector<const char*>{"normLanesKernel"} : std::vector<const char*>{},
      [=](double* in, double* sent) { cpuFeedbackPass(x, d, n, residual, in, sent); });
}

// handle_kernels.cu's fused dense pass: the CPU's copy feedback (copyFeedbackKernel, then the
// norms' tree).
void gpuCopyFeedback(const float* x, float* payload, size_t n, float* residual, double* inputSq,
                     double* sentSq, double* deviceSums, GpuStream stream) {
  if (n == 0) return;
  const std::vector<Arg> args = {{"x", x, n}, {"payload", payload, n}, {"residual", residual, n}};
  if (!inputSq && !sentSq && !deviceSums) {
    enqueue(stream, "copyFeedbackKernel", args,
            [=] { cpuCopyFeedback(x, payload, n, residual, nullptr, nullptr); });
    return;
  }
  feedbackWithNorms(stream, "copyFeedbackKernel", args, n, inputSq, sentSq, deviceSums, {},
                    [=](double* in, double* sent) {
                      cpuCopyFeedback(x, payload, n, residual, in, sent);
                    });
}

// handle_kernels.cu's fused pass: the CPU's narrow, widen and feedback pass in one body.
void gpuCastFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n, float* residual,
                     double* inputSq, double* sentSq, double* deviceSums, GpuStream stream) {
  if (n == 0) return;
  const std::vector<Arg> args = {{"x", x, n}, {"payload", payload, n}, {"residual", residual, n}};
  auto pass = [=](double* in, double* sent) {
    cpuNarrow(kind, x, payload, n);
    std::vector<float> back(n);
    cpuWiden(kind, payload, back.data(), n);
    cpuFeedbackPass(x, back.data(), n, residual, in, sent);
  };
  if (!inputSq && !sentSq && !deviceSums) {
    enqueue(stream, "gpuCastFeedback", args, [=] { pass(nullptr, nullptr); });
    return;
  }
  feedbackWithNorms(stream, "gpuCastFeedback", args, n, inputSq, sentSq, deviceSums, {}, pass);
}

void gpuFindBadIndex(const uint32_t* idx, size_t m, size_t count, unsigned long long* found,
                     GpuStream stream) {
  // handle_kernels.cu's: a memset, then (m > 0) the search, whose last block fetches the value.
  cuda::check(cudaMemsetAsync(found, 0xff, 2 * sizeof *found, stream),
              "cudaMemsetAsync(index check)");
  if (m == 0) return;
  enqueue(stream, "gpuFindBadIndex", {{"idx", idx, m}, {"found", found, 2}}, [=] {
    const size_t bad = cpuFirstBadIndex(idx, m, count);
    found[0] = bad != SIZE_MAX ? bad : ~0ull;
    found[1] = bad != SIZE_MAX ? idx[bad] : ~0ull;
  });
}

size_t gpuFirstBadIndex(const uint32_t* idx, size_t m, size_t count, GpuStream stream) {
  if (m == 0) return SIZE_MAX;
  HandleScratch& sc = scratchOf<HandleScratch>();
  sc.flag.reserve(2 * sizeof(unsigned long long), stream);
  auto* flag = static_cast<unsigned long long*>(sc.flag.data());
  gpuFindBadIndex(idx, m, count, flag, stream);
  unsigned long long first = 0;
  copyBack(&first, flag, sizeof first, stream);
  syncStream(stream, "checking a sparse payload's indices on the GPU");
  return first == ~0ull ? SIZE_MAX : static_cast<size_t>(first);
}

}  // namespace squeeze::device
