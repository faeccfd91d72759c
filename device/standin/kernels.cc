// The CUDA stand-in's kernels (the cuda-standin build; device/standin/standin.h): every gpu*
// entry point of device/*.h runs its cpu* twin on the stream through standin::launch, so a device
// call returns the host call's bits. The host side of each entry point follows its
// device/cuda/*.cu original: the same early returns, the same stream synchronizations, results
// in the same kind of memory, and the same per-thread scratch allocated at the same points and
// in the same way (cudaMalloc / cudaHostAlloc, which wait for the whole device, where it is made
// once; cudaMallocAsync on the stream where it grows), so the device path's waits, and its hangs,
// happen here as they do on a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/strings.h"
#include "device/batch.h"
#include "device/cast.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/handle_kernels.h"
#include "device/linalg.h"
#include "device/quantize.h"
#include "device/reduce.h"
#include "device/sparse.h"
#include "device/standin/standin.h"

namespace squeeze::device {
namespace {

// ---- launching -------------------------------------------------------------------------------

// A pointer a kernel dereferences, and how many elements (or bytes) of it: checked only when
// both are non-zero, since a kernel given nothing to do reads nothing.
struct Arg {
  template <class T>
  Arg(const char* name, T* ptr, size_t count)
      : name(name), ptr(ptr), count(count), writes(!std::is_const_v<T>) {}
  const char* name;
  const void* ptr;
  size_t count;
  bool writes;
};

// Enqueues `body` as kernel `kernel` on `stream`. An argument a GPU could not reach is found
// here, at launch, as the real launch would be, but reported where a GPU reports it: the body
// becomes one that throws, so the stream fails (sticky) when it gets there.
void enqueue(GpuStream stream, const char* kernel, const std::vector<Arg>& args,
             std::function<void()> body) {
  for (const Arg& a : args) {
    if (!a.ptr || a.count == 0 || standin::isDeviceAccessible(a.ptr)) continue;
    body = [message = strCat(kernel, ": argument `", a.name, "` (", a.ptr,
                             ") is pageable host memory: a GPU kernel cannot ",
                             a.writes ? "write" : "read", " it")] {
      raise(ErrorCode::kCuda, message);
    };
    break;
  }
  cuda::check(standin::launch(stream, kernel, std::move(body)),
              strCat("launching ", kernel).c_str());
}

// The rest of a .cu entry point's launches, where the twin does the work in one: enqueued to
// do nothing, so the stand-in's counts are the GPU's (a CUB algorithm counts as one launch).
void launchRest(GpuStream stream, const std::vector<const char*>& kernels) {
  for (const char* kernel : kernels) enqueue(stream, kernel, {}, [] {});
}

// The deferred-sums form of quantize.cu's, sparse.cu's and handle_kernels.cu's norms: enqueues
// sum(&in, &sent) (each from 0) as `kernel`, then adds in and sent to deviceSums[0..1] on the
// stream; nothing waits.
void enqueueAddingSums(GpuStream stream, const char* kernel, std::vector<Arg> args,
                       double* deviceSums, std::function<void(double*, double*)> sum) {
  args.push_back({"deviceSums", deviceSums, 2});
  enqueue(stream, kernel, args, [=] {
    double in = 0, sent = 0;
    sum(&in, &sent);
    deviceSums[0] += in;
    deviceSums[1] += sent;
  });
}

// Copies a result the body left in device memory back to the host, on the stream.
void copyBack(void* host, const void* device, size_t bytes, GpuStream stream) {
  cuda::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync (a kernel's result)");
}

// ---- scratch: each struct is its device/cuda/*.cu original's, made on first use (or by
// gpuPrepareThread) with the same cudaMalloc / cudaHostAlloc, and grown stream-ordered ----------

template <class T>
T& scratchOf() {
  return perThreadDevice<T>([](int dev) { return std::make_unique<T>(dev); });
}

// handle_kernels.cu: gpuFirstBadIndex's flag, gpuFeedbackPass's partials (device memory, grown
// on demand) and the pageable host memory its norms are copied into.
struct HandleScratch {
  explicit HandleScratch(int) {}
  cuda::DeviceBuffer flag, partials;
  double hostNorms[2] = {};
};

// quantize.cu: the norms of an encode with feedback, on the device and pinned for the host.
struct QuantizeNorms {
  explicit QuantizeNorms(int) : device(2 * sizeof(double)), host(2 * sizeof(double)) {}
  cuda::DeviceBuffer device;
  cuda::PinnedBuffer host;
};

// linalg.cu: cuBLAS's workspace, one per stream the thread has multiplied on (cuBLAS's own
// default size for the device), allocated on that stream when it is first seen. The stand-in
// has no cuBLAS; the workspace is kept so the allocation happens where the real one's does.
struct BlasScratch {
  explicit BlasScratch(int dev) {
    int major = 0;
    cuda::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
                "cudaDeviceGetAttribute(compute capability)");
    workspaceBytes = size_t(major >= 9 ? 32 : 4) << 20;
  }
  size_t workspaceBytes = 0;
  std::vector<std::pair<GpuStream, cuda::DeviceBuffer>> workspaces;
};

void blasWorkspace(GpuStream stream) {
  BlasScratch& b = scratchOf<BlasScratch>();
  for (const auto& w : b.workspaces)
    if (w.first == stream) return;
  b.workspaces.emplace_back(stream, cuda::DeviceBuffer());
  b.workspaces.back().second.reserve(b.workspaceBytes, stream);
}

// linalg.cu's SGEMM launch: its dimensions must fit cuBLAS's ints, then the stream's workspace.
void blasGemm(GpuStream stream, std::initializer_list<std::pair<size_t, const char*>> dims) {
  for (const auto& [v, what] : dims)
    if (v > size_t(INT_MAX))
      raise(ErrorCode::kInvalidArgument, "low-rank product: ", what, " = ", v,
            " exceeds cuBLAS's int dimensions");
  blasWorkspace(stream);
}

// linalg.cu: gpuSquaredNorm's partial sums (device) and its result (pinned).
struct LinalgNorm {
  static constexpr size_t kSumBlocks = 1024;
  explicit LinalgNorm(int) : partial(kSumBlocks * sizeof(double)), result(sizeof(double)) {}
  cuda::DeviceBuffer partial;
  cuda::PinnedBuffer result;
};

// sparse.cu: the selection state (device) and the pinned slots the host reads counts and sums
// from; cand and candAlt are the passes' index buffers, sums the feedback's partials. One per
// stream (sparseScratch), as sparse.cu's.
struct SparseScratch {
  static constexpr size_t kStateBytes = 8 * sizeof(uint32_t) + 2048 * sizeof(uint32_t);
  struct Slots {
    uint32_t count;
    double sums[2];
  };
  explicit SparseScratch(int) : state(kStateBytes), slots(sizeof(Slots)) {}
  Slots* slotsData() const { return static_cast<Slots*>(slots.data()); }
  cuda::DeviceBuffer state, cand, candAlt, sums;
  cuda::PinnedBuffer slots;
};

SparseScratch& sparseScratch(GpuStream stream) {
  return perThreadDeviceStream<SparseScratch>(
      stream, [](int dev) { return std::make_unique<SparseScratch>(dev); });
}

uint32_t* u32(cuda::DeviceBuffer& b, size_t count, GpuStream stream) {
  b.reserve(std::max<size_t>(count, 1) * sizeof(uint32_t), stream);
  return static_cast<uint32_t*>(b.data());
}

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

// quantize.cu's launchDecode; local is null for a plain decode.
template <class Decode>
void runDecode(const char* kernel, const void* scales, const uint8_t* codes, size_t n, size_t block,
               float* out, const float* local, GpuStream stream, Decode decode) {
  if (n == 0) return;
  SQZ_ENFORCE(block > 0, kernel, ": block of 0 values");
  enqueue(stream, kernel,
          {{"scales", scales, n}, {"codes", codes, n}, {"out", out, n}, {"local", local, n}},
          std::move(decode));
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

// ---- quantize.h ----------------------------------------------------------------------------

void gpuInt8Encode(const float* x, size_t n, size_t block, void* scales, uint8_t* codes,
                   Feedback* feedback, GpuStream stream) {
  runEncode("gpuInt8Encode", x, n, block, scales, codes, feedback, stream,
            [=](Feedback* fb) { cpuInt8Encode(x, n, block, scales, codes, fb); });
}
void gpuInt8Decode(const void* scales, const uint8_t* codes, size_t n, size_t block, float* out,
                   GpuStream stream) {
  runDecode("gpuInt8Decode", scales, codes, n, block, out, nullptr, stream,
            [=] { cpuInt8Decode(scales, codes, n, block, out); });
}
void gpuInt8DecodeAdd(float* out, const float* local, const void* scales, const uint8_t* codes,
                      size_t n, size_t block, GpuStream stream) {
  runDecode("gpuInt8DecodeAdd", scales, codes, n, block, out, local, stream,
            [=] { cpuInt8DecodeAdd(out, local, scales, codes, n, block); });
}

void gpuQsgdEncode(const float* x, size_t n, size_t block, int levels, int bits, uint64_t key,
                   uint64_t index0, void* scales, uint8_t* codes, Feedback* feedback,
                   GpuStream stream) {
  SQZ_ENFORCE(bits == 4 || bits == 8, "qsgd: ", bits, " bits per value");
  runEncode("gpuQsgdEncode", x, n, block, scales, codes, feedback, stream, [=](Feedback* fb) {
    cpuQsgdEncode(x, n, block, levels, bits, key, index0, scales, codes, fb);
  });
}
void gpuQsgdDecode(const void* scales, const uint8_t* codes, size_t n, size_t block, int levels,
                   int bits, float* out, GpuStream stream) {
  runDecode("gpuQsgdDecode", scales, codes, n, block, out, nullptr, stream,
            [=] { cpuQsgdDecode(scales, codes, n, block, levels, bits, out); });
}
void gpuQsgdDecodeAdd(float* out, const float* local, const void* scales, const uint8_t* codes,
                      size_t n, size_t block, int levels, int bits, GpuStream stream) {
  runDecode("gpuQsgdDecodeAdd", scales, codes, n, block, out, local, stream,
            [=] { cpuQsgdDecodeAdd(out, local, scales, codes, n, block, levels, bits); });
}

void gpuOnebitEncode(const float* x, size_t n, size_t block, void* scales, uint8_t* codes,
                     Feedback* feedback, GpuStream stream) {
  runEncode("gpuOnebitEncode", x, n, block, scales, codes, feedback, stream,
            [=](Feedback* fb) { cpuOnebitEncode(x, n, block, scales, codes, fb); });
}
void gpuOnebitDecode(const void* scales, const uint8_t* codes, size_t n, size_t block, float* out,
                     GpuStream stream) {
  runDecode("gpuOnebitDecode", scales, codes, n, block, out, nullptr, stream,
            [=] { cpuOnebitDecode(scales, codes, n, block, out); });
}
void gpuOnebitDecodeAdd(float* out, const float* local, const void* scales, const uint8_t* codes,
                        size_t n, size_t block, GpuStream stream) {
  runDecode("gpuOnebitDecodeAdd", scales, codes, n, block, out, local, stream,
            [=] { cpuOnebitDecodeAdd(out, local, scales, codes, n, block); });
}

void gpuTerngradEncode(const float* x, size_t n, size_t block, uint64_t key, uint64_t index0,
                       void* scales, uint8_t* codes, Feedback* feedback, GpuStream stream) {
  runEncode("gpuTerngradEncode", x, n, block, scales, codes, feedback, stream,
            [=](Feedback* fb) { cpuTerngradEncode(x, n, block, key, index0, scales, codes, fb); });
}
void gpuTerngradDecode(const void* scales, const uint8_t* codes, size_t n, size_t block, float* out,
                       GpuStream stream) {
  runDecode("gpuTerngradDecode", scales, codes, n, block, out, nullptr, stream,
            [=] { cpuTerngradDecode(scales, codes, n, block, out); });
}
void gpuTerngradDecodeAdd(float* out, const float* local, const void* scales, const uint8_t* codes,
                          size_t n, size_t block, GpuStream stream) {
  runDecode("gpuTerngradDecodeAdd", scales, codes, n, block, out, local, stream,
            [=] { cpuTerngradDecodeAdd(out, local, scales, codes, n, block); });
}

// ---- sparse.h ------------------------------------------------------------------------------

size_t gpuSelectTopk(const float* x, size_t n, size_t k, bool sampled, uint32_t* idx,
                     GpuStream stream) {
  k = std::min(k, n);
  if (k == 0) return 0;
  // sparse.cu steers its route on the device and never waits: the selection padded with zeros
  // to min(k, n).
  if (sampled && n > kOneBlockSelectMax && k < n)
    u32(sparseScratch(stream).cand,
        topkPassCap(n, k, topkFirstRank(n, k, topkSampleSize(n)), topkSampleSize(n)), stream);
  enqueue(stream, "gpuSelectTopk", {{"x", x, n}, {"idx", idx, k}},
          [=] { cpuPadSelection(x, n, idx, cpuSelectTopk(x, n, k, sampled, idx), k); });
  // sparse.cu's launches besides (the work above stands for its first): none for a chunk that
  // one block selects (selectBlockKernel).
  if (n <= kOneBlockSelectMax) return k;
  const std::vector<const char*> compact = {"tileCountKernel", "cub::DeviceScan::ExclusiveSum",
                                            "tileWriteKernel"};
  const std::vector<const char*> radix = {"histogramKernel", "pickKernel",      "histogramKernel",
                                          "pickKernel",      "histogramKernel", "pickKernel"};
  if (!sampled || k == n) {  // selectDirect, from selectInitKernel
    if (n > k) launchRest(stream, radix);
    launchRest(stream, compact);
  } else {  // from sampleKernel
    launchRest(stream, {"cub::DeviceRadixSort::SortKeysDescending", "selectInitKernel",
                        "passThresholdKernel"});
    launchRest(stream, compact);
    launchRest(stream, {"steerKernel"});
    launchRest(stream, radix);
    launchRest(stream, compact);
  }
  return k;
}

size_t gpuSelectAtLeast(const float* x, size_t n, uint32_t minKey, uint32_t* idx, size_t cap,
                        GpuStream stream) {
  // sparse.cu's atLeast: the indices go to scratch, then to idx by a copy.
  SparseScratch& sc = sparseScratch(stream);
  cap = std::min(cap, n);
  // The CPU's vector stores need the slack.
  uint32_t* cand = u32(sc.cand, cap + kSelectSlack, stream);
  if (minKey == 0) minKey = 1;
  if (minKey > 0x7fffffffu || n == 0) return 0;
  u32(sc.candAlt, cap, stream);  // the real sort's second buffer
  SparseScratch::Slots* slots = sc.slotsData();
  // As sparse.cu: the hit counter is zeroed, the pass counts into it (past cap: cap + 1 here),
  // and the count comes back to the pinned slot.
  auto* counter = static_cast<uint32_t*>(sc.state.data());
  cuda::check(cudaMemsetAsync(counter, 0, sizeof(uint32_t), stream), "cudaMemsetAsync");
  enqueue(stream, "gpuSelectAtLeast", {{"x", x, n}}, [=] {
    const size_t hits = cpuSelectAtLeast(x, n, minKey, cand, cap);
    *counter = static_cast<uint32_t>(hits == SIZE_MAX ? cap + 1 : hits);
  });
  cuda::check(
      cudaMemcpyAsync(&slots->count, counter, sizeof(uint32_t), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync");
  syncStream(stream, "select pass");
  const size_t kept = slots->count > cap ? SIZE_MAX : slots->count;
  if (kept == SIZE_MAX || kept == 0) return kept;
  if (kept > 1) launchRest(stream, {"cub::DeviceRadixSort::SortKeys"});
  cuda::check(cudaMemcpyAsync(idx, cand, kept * sizeof(uint32_t), cudaMemcpyDefault, stream),
              "cudaMemcpyAsync");
  syncStream(stream, "select copy");
  return kept;
}

void gpuGather(const float* x, const uint32_t* idx, size_t k, float* out, GpuStream stream) {
  if (k == 0) return;
  enqueue(stream, "gpuGather", {{"x", x, k}, {"idx", idx, k}, {"out", out, k}},
          [=] { cpuGather(x, idx, k, out); });
}

// sparse.cu's scatterKernel skips an index at or past n (its list may be checked only after the
// stream ran): the CPU twin where every index is in range, else the kernel's loop.
static bool indicesBelow(const uint32_t* idx, size_t k, size_t n) {
  for (size_t j = 0; j < k; ++j)
    if (idx[j] >= n) return false;
  return true;
}

void gpuDensify(const uint32_t* idx, const float* vals, size_t k, float* dst, size_t n,
                GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuDensify", {{"idx", idx, k}, {"vals", vals, k}, {"dst", dst, n}}, [=] {
    if (indicesBelow(idx, k, n)) return cpuDensify(idx, vals, k, dst, n);
    std::fill(dst, dst + n, 0.0f);
    for (size_t j = 0; j < k; ++j)
      if (idx[j] < n && vals[j] != 0.0f) dst[idx[j]] = vals[j];
  });
  if (k > 0) launchRest(stream, {"scatterKernel"});  // after zeroKernel
}

void gpuScatterAdd(float* out, const float* local, size_t n, const uint32_t* idx, const float* vals,
                   size_t k, GpuStream stream) {
  if (n == 0) return;
  if (out != local)
    cuda::check(cudaMemcpyAsync(out, local, n * sizeof(float), cudaMemcpyDefault, stream),
                "cudaMemcpyAsync");
  if (k == 0) return;
  enqueue(stream, "gpuScatterAdd", {{"out", out, n}, {"idx", idx, k}, {"vals", vals, k}}, [=] {
    if (indicesBelow(idx, k, n)) return cpuScatterAdd(out, out, n, idx, vals, k);
    for (size_t j = 0; j < k; ++j)
      if (idx[j] < n && vals[j] != 0.0f) out[idx[j]] += vals[j];
  });
}

void gpuSparseFeedback(const float* x, size_t n, const uint32_t* idx, size_t k, float* residual,
                       double* inputSq, double* sentSq, double* deviceSums, GpuStream stream) {
  const bool sums = inputSq || sentSq || deviceSums;
  if (n == 0 || (!residual && !sums)) return;
  const std::initializer_list<Arg> args = {{"x", x, n}, {"idx", idx, k}, {"residual", residual, n}};
  if (!sums) {  // enqueue only, no scratch: as sparse.cu
    enqueue(stream, "gpuSparseFeedback", args,
            [=] { cpuSparseFeedback(x, n, idx, k, residual, nullptr, nullptr); });
    return;
  }
  SparseScratch& sc = sparseScratch(stream);
  constexpr size_t kTile = 4096, kSumBlocks = 1024;  // sparse.cu's partial sums, one per block
  sc.sums.reserve(std::clamp<size_t>((n + kTile - 1) / kTile, 1, kSumBlocks) * 2 * sizeof(double),
                  stream);
  SparseScratch::Slots* slots = sc.slotsData();
  if (deviceSums) {
    enqueueAddingSums(stream, "gpuSparseFeedback", args, deviceSums, [=](double* in, double* sent) {
      cpuSparseFeedback(x, n, idx, k, residual, in, sent);
    });
    launchRest(stream, {"feedbackSumKernel"});
    return;
  }
  const bool wantIn = inputSq != nullptr, wantSent = sentSq != nullptr;
  enqueue(stream, "gpuSparseFeedback", args, [=] {
    double in = 0, sent = 0;
    cpuSparseFeedback(x, n, idx, k, residual, wantIn ? &in : nullptr, wantSent ? &sent : nullptr);
    slots->sums[0] = in;
    slots->sums[1] = sent;
  });
  launchRest(stream, {"feedbackSumKernel"});
  syncStream(stream, "sparse feedback");
  if (inputSq) *inputSq += slots->sums[0];
  if (sentSq) *sentSq += slots->sums[1];
}

void gpuRandomStrata(uint64_t seed, uint64_t call, uint64_t offset, size_t n, size_t k,
                     uint32_t* idx, GpuStream stream) {
  if (k == 0) return;
  enqueue(stream, "gpuRandomStrata", {{"idx", idx, k}},
          [=] { cpuRandomStrata(seed, call, offset, n, k, idx); });
}

// ---- linalg.h ------------------------------------------------------------------------------

void gpuMatMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                     float* p, GpuStream stream) {
  if (n == 0 || r == 0) return;
  const size_t full = m == 0 ? 0 : std::min(n, count / m);
  if (full > 0) blasGemm(stream, {{full, "rows"}, {r, "rank"}, {m, "columns"}, {n, "n"}});
  enqueue(stream, "gpuMatMulPanels", {{"M", M, count}, {"q", q, m * r}, {"p", p, n * r}},
          [=] { cpuMatMulPanels(M, count, n, m, q, r, p); });
}

void gpuMatTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                      float* q, GpuStream stream) {
  if (m == 0 || r == 0) return;
  const size_t full = std::min(n, count / m);
  if (full > 0) blasGemm(stream, {{m, "columns"}, {r, "rank"}, {full, "rows"}, {n, "n"}});
  enqueue(stream, "gpuMatTMulPanels", {{"M", M, count}, {"p", p, n * r}, {"q", q, m * r}},
          [=] { cpuMatTMulPanels(M, count, n, m, p, r, q); });
}

void gpuLowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r, size_t count,
                     const float* x, float scale, float* out, float* residual, GpuStream stream) {
  if (count == 0 || m == 0) return;
  enqueue(stream, "gpuLowRankApply",
          {{"p", p, n * r},
           {"q", q, m * r},
           {"x", x, count},
           {"out", out, count},
           {"residual", residual, count}},
          [=] { cpuLowRankApply(p, q, n, m, r, count, x, scale, out, residual); });
}

void gpuOrthonormalize(float* p, size_t n, size_t r, GpuStream stream) {
  if (n == 0 || r == 0) return;
  enqueue(stream, "gpuOrthonormalize", {{"p", p, n * r}}, [=] { cpuOrthonormalize(p, n, r); });
}

double gpuSquaredNorm(const float* x, size_t n, GpuStream stream) {
  if (n == 0) return 0.0;
  LinalgNorm& sc = scratchOf<LinalgNorm>();
  auto* result = static_cast<double*>(sc.result.data());
  enqueue(stream, "gpuSquaredNorm", {{"x", x, n}}, [=] { *result = cpuSquaredNorm(x, n); });
  launchRest(stream, {"finalSumKernel"});
  syncStream(stream, "squared norm");
  return *result;
}

void gpuAddSquaredNorm(const float* x, size_t n, double* deviceSum, GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuAddSquaredNorm", {{"x", x, n}, {"deviceSum", deviceSum, 1}},
          [=] { *deviceSum += cpuSquaredNorm(x, n); });
  launchRest(stream, {"finalSumKernel"});
}

// ---- handle_kernels.h ----------------------------------------------------------------------

void gpuAddResidual(const float* g, float* e, float* x, size_t n, GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuAddResidual", {{"g", g, n}, {"e", e, n}, {"x", x, n}},
          [=] { cpuAddResidual(g, e, x, n); });
}

void gpuDgcPrepare(const float* g, float scale, float m, float* u, float* v, float* x,
                   uint8_t* nonzero, size_t n, GpuStream stream) {
  if (n == 0) return;
  enqueue(stream, "gpuDgcPrepare",
          {{"g", g, n}, {"u", u, n}, {"v", v, n}, {"x", x, n}, {"nonzero", nonzero, n}},
          [=] { cpuDgcPrepare(g, scale, m, u, v, x, nonzero, n); });
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
    launchRest(stream, {"laneSumKernel"});
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
  // handle_kernels.cu's: a memset, then (m > 0) the search and the value's fetch.
  cuda::check(cudaMemsetAsync(found, 0xff, 2 * sizeof *found, stream),
              "cudaMemsetAsync(index check)");
  if (m == 0) return;
  enqueue(stream, "gpuFindBadIndex", {{"idx", idx, m}, {"found", found, 2}},
          [=] { found[0] = cpuFirstBadIndex(idx, m, count); });
  enqueue(stream, "badIndexValueKernel", {{"found", found, 2}}, [=] {
    if (found[0] != ~0ull) found[1] = idx[found[0]];
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

// ---- launch.cuh ------------------------------------------------------------------------------

void gpuPrepareThread(GpuStream stream) {
  standin::loadKernels();  // first, as on a GPU (kernel_modules.cc)
  (void)scratchOf<HandleScratch>();
  (void)sparseScratch(stream);
  (void)scratchOf<QuantizeNorms>();
  (void)scratchOf<LinalgNorm>();
  blasWorkspace(stream);
}

// ---- batch.h: one enqueue per kBatchJobs jobs, as the .cu launches them ------------------------

namespace {

// Runs launch(its jobs) for each launch of `jobs` (those with n > 0) as the .cu files split them
// (launchJobs): kBatchJobs to a launch.
template <class Job, class Launch>
void forEachLaunch(const Job* jobs, size_t count, Launch&& launch) {
  const std::vector<Job> live = liveJobs(jobs, count);
  for (size_t first = 0; first < live.size(); first += kBatchJobs)
    launch(std::vector<Job>(live.begin() + first,
                            live.begin() + std::min(live.size(), first + kBatchJobs)));
}

}  // namespace

void gpuQuantEncodeBatch(const QuantSetting& s, const QuantEncodeJob* jobs, size_t count,
                         bool feedback, double* deviceNorms, GpuStream stream) {
  SQZ_ENFORCE(!feedback || deviceNorms, "a batched encode with feedback needs device norms");
  SQZ_ENFORCE(s.block > 0, "quantizer encode: block of 0 values");
  forEachLaunch(jobs, count, [&](std::vector<QuantEncodeJob> batch) {
    std::vector<Arg> args;
    for (const QuantEncodeJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"scales", j.scales, j.n});
      args.push_back({"codes", j.codes, j.n});
      if (feedback) args.push_back({"residual", j.residual, j.n});
    }
    if (!feedback) {
      enqueue(stream, "gpuQuantEncodeBatch", args, [=] {
        for (const QuantEncodeJob& j : batch) cpuQuantEncodeJob(s, j, nullptr);
      });
      return;
    }
    enqueueAddingSums(stream, "gpuQuantEncodeBatch", args, deviceNorms,
                      [=](double* in, double* sent) {
                        for (const QuantEncodeJob& j : batch) {
                          Norms norms;
                          Feedback fb{j.residual, &norms};
                          cpuQuantEncodeJob(s, j, &fb);
                          *in += norms.inputSq;
                          *sent += norms.sentSq;
                        }
                      });
  });
}

void gpuQuantDecodeBatch(const QuantSetting& s, const QuantDecodeJob* jobs, size_t count, bool add,
                         GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<QuantDecodeJob> batch) {
    SQZ_ENFORCE(s.block > 0, "quantizer decode: block of 0 values");
    std::vector<Arg> args;
    for (const QuantDecodeJob& j : batch) {
      args.push_back({"scales", j.scales, j.n});
      args.push_back({"codes", j.codes, j.n});
      args.push_back({"out", j.out, j.n});
      if (add) args.push_back({"local", j.local, j.n});
    }
    enqueue(stream, "gpuQuantDecodeBatch", args, [=] {
      for (const QuantDecodeJob& j : batch) cpuQuantDecodeJob(s, j, add);
    });
  });
}

void gpuNarrowBatch(Narrow kind, const CastJob* jobs, size_t count, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<CastJob> batch) {
    std::vector<Arg> args;
    for (const CastJob& j : batch) {
      args.push_back({"in", static_cast<const float*>(j.in), j.n});
      args.push_back({"out", static_cast<uint16_t*>(j.out), j.n});
    }
    enqueue(stream, "gpuNarrowBatch", args, [=] {
      for (const CastJob& j : batch)
        cpuNarrow(kind, static_cast<const float*>(j.in), static_cast<uint16_t*>(j.out), j.n);
    });
  });
}

void gpuWidenBatch(Narrow kind, const CastJob* jobs, size_t count, bool add, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<CastJob> batch) {
    std::vector<Arg> args;
    for (const CastJob& j : batch) {
      args.push_back({"in", static_cast<const uint16_t*>(j.in), j.n});
      args.push_back({"out", static_cast<float*>(j.out), j.n});
      if (add) args.push_back({"local", j.local, j.n});
    }
    enqueue(stream, "gpuWidenBatch", args, [=] {
      for (const CastJob& j : batch) {
        const auto* in = static_cast<const uint16_t*>(j.in);
        auto* out = static_cast<float*>(j.out);
        if (add)
          cpuWidenAdd(kind, out, j.local, in, j.n);
        else
          cpuWiden(kind, in, out, j.n);
      }
    });
  });
}

void gpuCastFeedbackBatch(Narrow kind, const CastFeedbackJob* jobs, size_t count,
                          double* deviceSums, GpuStream stream) {
  size_t allLanes = 0;
  for (size_t j = 0; j < count; ++j) allLanes += (jobs[j].n + kNormBlock - 1) / kNormBlock;
  if (allLanes == 0) return;
  // handle_kernels.cu's lanes of every chunk, in its scratch.
  if (deviceSums)
    scratchOf<HandleScratch>().partials.reserve(allLanes * kNormLanes * 2 * sizeof(float), stream);
  forEachLaunch(jobs, count, [&](std::vector<CastFeedbackJob> batch) {
    std::vector<Arg> args;
    for (const CastFeedbackJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"payload", j.payload, j.n});
      args.push_back({"residual", j.residual, j.n});
    }
    if (deviceSums) args.push_back({"deviceSums", deviceSums, 2});
    // castFeedbackKernel, then laneSumsKernel adding each chunk's two sums in turn.
    enqueue(stream, "gpuCastFeedbackBatch", args, [=] {
      for (const CastFeedbackJob& j : batch) {
        cpuNarrow(kind, j.x, j.payload, j.n);
        std::vector<float> back(j.n);
        cpuWiden(kind, j.payload, back.data(), j.n);
        double in = 0, sent = 0;
        cpuFeedbackPass(j.x, back.data(), j.n, j.residual, deviceSums ? &in : nullptr,
                        deviceSums ? &sent : nullptr);
        if (deviceSums) {
          deviceSums[0] += in;
          deviceSums[1] += sent;
        }
      }
    });
    if (deviceSums) launchRest(stream, {"laneSumKernel"});
  });
}

void gpuSelectTopkBatch(const SelectJob* jobs, size_t count, GpuStream stream) {
  for (size_t j = 0; j < count; ++j)
    SQZ_ENFORCE(jobs[j].n <= kOneBlockSelectMax && jobs[j].k <= jobs[j].n,
                "a batched top-k selection of ", jobs[j].k, " of ", jobs[j].n, " values");
  forEachLaunch(jobs, count, [&](std::vector<SelectJob> batch) {
    std::vector<Arg> args;
    for (const SelectJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"idx", j.idx, j.k});
    }
    // selectBlockKernel, one block per chunk: sparse.cu's one-block route.
    enqueue(stream, "gpuSelectTopkBatch", args, [=] {
      for (const SelectJob& j : batch)
        if (j.k > 0)
          cpuPadSelection(j.x, j.n, j.idx, cpuSelectTopk(j.x, j.n, j.k, false, j.idx), j.k);
    });
  });
}

void gpuGatherBatch(const GatherJob* jobs, size_t count, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<GatherJob> batch) {
    std::vector<Arg> args;
    for (const GatherJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"idx", j.idx, j.n});
      args.push_back({"out", j.out, j.n});
    }
    enqueue(stream, "gpuGatherBatch", args, [=] {
      for (const GatherJob& j : batch) cpuGather(j.x, j.idx, j.n, j.out);
    });
  });
}

namespace {

// dst = its entries (densify: over zeros; scatter-add: added), skipping indices at or past n and
// zero entries, as scatterKernel does.
void scatterOne(const ScatterJob& j, bool add) {
  if (!add && indicesBelow(j.idx, j.k, j.n)) return cpuDensify(j.idx, j.vals, j.k, j.dst, j.n);
  if (add && indicesBelow(j.idx, j.k, j.n))
    return cpuScatterAdd(j.dst, j.dst, j.n, j.idx, j.vals, j.k);
  if (!add) std::fill(j.dst, j.dst + j.n, 0.0f);
  for (size_t e = 0; e < j.k; ++e)
    if (j.idx[e] < j.n && j.vals[e] != 0.0f) {
      if (add)
        j.dst[j.idx[e]] += j.vals[e];
      else
        j.dst[j.idx[e]] = j.vals[e];
    }
}

std::vector<Arg> scatterArgs(const std::vector<ScatterJob>& batch) {
  std::vector<Arg> args;
  for (const ScatterJob& j : batch) {
    args.push_back({"idx", j.idx, j.k});
    args.push_back({"vals", j.vals, j.k});
    args.push_back({"dst", j.dst, j.n});
  }
  return args;
}

}  // namespace

void gpuDensifyBatch(const ScatterJob* jobs, size_t count, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<ScatterJob> batch) {
    bool entries = false;
    for (const ScatterJob& j : batch) entries = entries || j.k > 0;
    // zeroKernel, then (any entries) scatterKernel.
    enqueue(stream, "gpuDensifyBatch", scatterArgs(batch), [=] {
      for (const ScatterJob& j : batch) scatterOne(j, false);
    });
    if (entries) launchRest(stream, {"scatterKernel"});
  });
}

void gpuScatterAddBatch(const ScatterJob* jobs, size_t count, GpuStream stream) {
  const std::vector<ScatterJob> entries = copyScatterAddLocals(jobs, count, stream);
  forEachLaunch(entries.data(), entries.size(), [&](std::vector<ScatterJob> batch) {
    enqueue(stream, "gpuScatterAddBatch", scatterArgs(batch), [=] {
      for (const ScatterJob& j : batch) scatterOne(j, true);
    });
  });
}

void gpuSparseFeedbackBatch(const SparseFeedbackJob* jobs, size_t count, double* deviceSums,
                            GpuStream stream) {
  std::vector<SparseFeedbackJob> live;
  size_t allBlocks = 0;
  constexpr size_t kTile = 4096, kSumBlocks = 1024;  // sparse.cu's partial sums, one per block
  for (size_t j = 0; j < count; ++j) {
    if (jobs[j].n == 0 || (!jobs[j].residual && !deviceSums)) continue;
    live.push_back(jobs[j]);
    allBlocks += std::clamp<size_t>((jobs[j].n + kTile - 1) / kTile, 1, kSumBlocks);
  }
  if (live.empty()) return;
  if (deviceSums) sparseScratch(stream).sums.reserve(allBlocks * 2 * sizeof(double), stream);
  forEachLaunch(live.data(), live.size(), [&](std::vector<SparseFeedbackJob> batch) {
    std::vector<Arg> args;
    for (const SparseFeedbackJob& j : batch) {
      args.push_back({"x", j.x, j.n});
      args.push_back({"idx", j.idx, j.k});
      args.push_back({"residual", j.residual, j.n});
    }
    if (deviceSums) args.push_back({"deviceSums", deviceSums, 2});
    // feedbackKernel, then feedbackSumsKernel adding each chunk's sums in turn.
    enqueue(stream, "gpuSparseFeedbackBatch", args, [=] {
      for (const SparseFeedbackJob& j : batch) {
        double in = 0, sent = 0;
        cpuSparseFeedback(j.x, j.n, j.idx, j.k, j.residual, deviceSums ? &in : nullptr,
                          deviceSums ? &sent : nullptr);
        if (deviceSums) {
          deviceSums[0] += in;
          deviceSums[1] += sent;
        }
      }
    });
    if (deviceSums) launchRest(stream, {"feedbackSumKernel"});
  });
}

void gpuFindBadIndexBatch(const IndexCheckJob* jobs, size_t count, GpuStream stream) {
  forEachLaunch(jobs, count, [&](std::vector<IndexCheckJob> batch) {
    std::vector<Arg> args;
    for (const IndexCheckJob& j : batch) {
      args.push_back({"idx", j.idx, j.n});
      args.push_back({"found", j.found, 2});
      args.push_back({"report", j.report, 2});
    }
    // resetFoundKernel, firstBadIndexKernel, badIndexValueKernel.
    enqueue(stream, "gpuFindBadIndexBatch", args, [=] {
      for (const IndexCheckJob& j : batch) {
        j.found[0] = j.found[1] = ~0ull;
        const size_t bad = cpuFirstBadIndex(j.idx, j.n, j.count);
        if (bad != SIZE_MAX) {
          j.found[0] = bad;
          j.found[1] = j.idx[bad];
        }
        if (j.report) std::memcpy(j.report, j.found, 2 * sizeof *j.found);
      }
    });
    launchRest(stream, {"firstBadIndexKernel", "badIndexValueKernel"});
  });
}

void gpuSmallCopyBatch(const SmallCopyJob* jobs, size_t count, GpuStream stream) {
  for (size_t j = 0; j < count; ++j)
    SQZ_ENFORCE(jobs[j].n <= kSmallCopyBytes, "a small copy of ", jobs[j].n, " bytes");
  forEachLaunch(jobs, count, [&](std::vector<SmallCopyJob> batch) {
    std::vector<Arg> args;
    for (const SmallCopyJob& j : batch) {
      args.push_back({"dst", static_cast<unsigned char*>(j.dst), j.n});
      if (j.src) args.push_back({"src", static_cast<const unsigned char*>(j.src), j.n});
    }
    enqueue(stream, "gpuSmallCopyBatch", args, [=] {
      for (const SmallCopyJob& j : batch) std::memcpy(j.dst, j.src ? j.src : j.bytes, j.n);
    });
  });
}

}  // namespace squeeze::device
