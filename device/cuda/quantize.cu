// CUDA kernels behind device/quantize.h: the gpu* twins of the quantizer kernels, giving the
// CPU's scales, codes, decoded values and residual bit for bit.
//
// Bit-exactness rests on two things. Every per-value operation is device/elementwise.h's
// (int8Code, qsgdCode, ..., which use the round-to-nearest intrinsics, so nvcc fuses no
// multiply-add), the functions cpu/quantize.cc calls. And every per-block sum runs the CPU's
// additions in the CPU's order: cpu/quantize.cc keeps them in 8 fixed lanes (lane j sums values
// j, j + 8, ... of the whole octets, in index order), then combines the lanes in order with the
// tail of fewer than 8 values (QSGD's sum of squares: tail first, then the lanes; 1-bit's side
// sums: the lanes, then the tail). Here lanes 0-7 of the warp that owns the block are those 8
// lanes, and lane 0 combines them. Max |v| is a max of bit patterns, exact in any order.
//
// Encode: one warp per block (grid-stride over blocks): the block's scale, written by lane 0
// (bytewise: the scale section may be unaligned), then the warp's lanes take the block's code
// bytes in turn, each packing its 1, 2, 4 or 8 values and, for encodeFeedback, decoding them
// back from the packed byte to update the residual and the norms. The random draws are the
// counter hash of each value's global index, as the CPU's. The per-block sums are sequential
// chains of block/8 additions, so very large blocks (tens of thousands of values) encode
// slowly; the codecs' blocks are hundreds.
//
// Decode and decode-add: one thread per group of 4 values (float4 loads and stores where out
// and local are 16-byte aligned, else one thread per value), each value decoded from its block's
// scale and its code as the CPU decodes it.
//
// Feedback norms: each thread sums its values' squares in double (the sent ones as the CPU counts
// them, elementwise.h's sentSquare), the block's threads combine them and one double atomicAdd
// per thread block adds them to a two-double device buffer that the host reads after
// synchronizing: the same sums to rounding, not the CPU's bits.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "device/batch.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/elementwise.h"
#include "device/quantize.h"

namespace squeeze::device {
namespace {

constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

// ---- scales (little-endian float32 at any alignment, as the CPU's memcpy) --------------------

__device__ __forceinline__ float loadScale(const unsigned char* s, size_t i) {
  const unsigned char* p = s + 4 * i;
  return floatFromBits(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                       uint32_t(p[3]) << 24);
}
__device__ __forceinline__ void storeScale(unsigned char* s, size_t i, float f) {
  const uint32_t b = floatBits(f);
  unsigned char* p = s + 4 * i;
  p[0] = static_cast<unsigned char>(b);
  p[1] = static_cast<unsigned char>(b >> 8);
  p[2] = static_cast<unsigned char>(b >> 16);
  p[3] = static_cast<unsigned char>(b >> 24);
}

// ---- random draws ----------------------------------------------------------------------------

// counterHash(key, index0 + i), with the run key of index0's 2^32-run computed once on the host
// (every index of a chunk but those past a 2^32 boundary shares it).
struct Draws {
  uint64_t key;
  uint64_t index0;
  uint64_t high0;
  uint32_t runKey0;
  __device__ __forceinline__ uint32_t at(size_t i) const {
    const uint64_t index = index0 + i;
    const uint64_t high = index >> 32;
    const uint32_t k = high == high0 ? runKey0 : counterRunKey(key, high);
    return mix32(static_cast<uint32_t>(index) * 0x9e3779b9u ^ k);
  }
};

Draws drawsFor(uint64_t key, uint64_t index0) {
  return {key, index0, index0 >> 32, counterRunKey(key, index0 >> 32)};
}

// ---- per-block sums, in the CPU's lanes and order ---------------------------------------------

// max |v| over the block as the largest magnitude bit pattern (NaN wins over inf).
__device__ float warpMaxAbs(const float* x, size_t len, int lane) {
  uint32_t m = 0;
  for (size_t i = lane; i < len; i += 32) m = max(m, floatBits(x[i]) & 0x7fffffffu);
  return floatFromBits(__reduce_max_sync(kFullMask, m));
}

// cpu/quantize.cc's l2Norm sum: lanes, then s = tail, then s += lane[0..7].
__device__ double warpSumSquares(const float* x, size_t len, int lane) {
  const size_t whole = len & ~size_t{7};
  double part = 0;
  if (lane < 8)
    for (size_t i = lane; i < whole; i += 8) part = addRn(part, squareOf(x[i]));
  double s = 0;
  if (lane == 0)
    for (size_t i = whole; i < len; ++i) s = addRn(s, squareOf(x[i]));
  for (int j = 0; j < 8; ++j) s = addRn(s, __shfl_sync(kFullMask, part, j));  // lane 0's counts
  return __shfl_sync(kFullMask, s, 0);
}

struct SignSums {
  double pos, neg;
  unsigned long long nneg;
};

// cpu/quantize.cc's signSums: lanes, then p = lane[0..7], then p += tail.
__device__ SignSums warpSignSums(const float* x, size_t len, int lane) {
  const size_t whole = len & ~size_t{7};
  double sp = 0, sn = 0;
  uint32_t cn = 0;
  if (lane < 8)
    for (size_t i = lane; i < whole; i += 8) {
      const float v = x[i];
      sp = addRn(sp, double(clearSidePart(v)));
      sn = addRn(sn, double(setSidePart(v)));
      cn += signBit(v);
    }
  double p = 0, q = 0;
  unsigned long long c = 0;
  for (int j = 0; j < 8; ++j) {
    p = addRn(p, __shfl_sync(kFullMask, sp, j));
    q = addRn(q, __shfl_sync(kFullMask, sn, j));
    c += __shfl_sync(kFullMask, cn, j);
  }
  if (lane == 0)
    for (size_t i = whole; i < len; ++i) {
      const float v = x[i];
      p = addRn(p, double(clearSidePart(v)));
      q = addRn(q, double(setSidePart(v)));
      c += signBit(v);
    }
  return {__shfl_sync(kFullMask, p, 0), __shfl_sync(kFullMask, q, 0), __shfl_sync(kFullMask, c, 0)};
}

// ---- error feedback --------------------------------------------------------------------------

struct EncodeArgs {
  const float* x;
  size_t n;
  size_t block;
  unsigned char* scales;
  uint8_t* codes;
  float* residual;  // encodeFeedback: the residual, or null for norms only
  double* norms;    // encodeFeedback: {inputSq, sentSq} in device memory
  Draws draws;      // qsgd, terngrad
};
using EncodeTable = JobTable<EncodeArgs>;

// One thread's part of the feedback: the residual of its values and their squares.
struct FeedbackAcc {
  double in = 0, sent = 0;

  // A value x sent as decoded, whose square the norms count as sentSq (device/elementwise.h's
  // sentSquare for int8 and QSGD, as the CPU counts them; 1-bit's and TernGrad's decoded values
  // are their units exactly).
  __device__ __forceinline__ void add(float* residual, size_t i, float x, float decoded,
                                      double sentSq) {
    if (residual) residual[i] = residualAfter(residual[i], x, decoded);
    in += squareOf(x);
    sent += sentSq;
  }
  __device__ __forceinline__ void add(float* residual, size_t i, float x, float decoded) {
    add(residual, i, x, decoded, squareOf(decoded));
  }

  // Every thread of the thread block calls it once, at the end.
  __device__ void flush(double* norms) {
    __shared__ double partial[kWarps][2];
    for (int o = 16; o > 0; o >>= 1) {
      in += __shfl_down_sync(kFullMask, in, o);
      sent += __shfl_down_sync(kFullMask, sent, o);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
      partial[warp][0] = in;
      partial[warp][1] = sent;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double a = 0, b = 0;
      for (int w = 0; w < kWarps; ++w) {
        a += partial[w][0];
        b += partial[w][1];
      }
      atomicAdd(norms, a);
      atomicAdd(norms + 1, b);
    }
  }
};

// The warp's blocks: b = warp, warp + warps, ... (warp-uniform, so the warp's collectives see
// every lane).
struct WarpBlocks {
  size_t first, step, count;
  int lane;
};
__device__ WarpBlocks warpBlocks(const EncodeArgs& a) {
  const size_t thread = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  return {thread >> 5, (size_t(gridDim.x) * blockDim.x) >> 5, blockCount(a.n, a.block),
          static_cast<int>(threadIdx.x & 31)};
}

// ---- encode kernels --------------------------------------------------------------------------

template <bool kFeedback>
__global__ void __launch_bounds__(kThreads) int8EncodeKernel(EncodeTable t) {
  const EncodeArgs& a = t.job[blockIdx.y];
  const WarpBlocks w = warpBlocks(a);
  FeedbackAcc acc;
  for (size_t b = w.first; b < w.count; b += w.step) {
    const size_t at = b * a.block, len = min(a.block, a.n - at);
    const float* x = a.x + at;
    const float scale = int8Scale(warpMaxAbs(x, len, w.lane));
    if (w.lane == 0) storeScale(a.scales, b, scale);
    const float divisor = int8Divisor(scale);
    uint8_t* c = a.codes + at;
    for (size_t t = w.lane; t < len; t += 32) {
      const float v = x[t];
      const uint8_t code = int8Code(v, divisor);
      c[t] = code;
      if constexpr (kFeedback)
        acc.add(a.residual, at + t, v, int8Value(code, scale),
                sentSquare(static_cast<int8_t>(code), scale));
    }
  }
  if constexpr (kFeedback) acc.flush(a.norms);
}

template <bool kFeedback>
__global__ void __launch_bounds__(kThreads) qsgdEncodeKernel(EncodeTable t, int levels, int bits) {
  const EncodeArgs& a = t.job[blockIdx.y];
  const Draws& draws = a.draws;
  const WarpBlocks w = warpBlocks(a);
  const size_t stride = packedBytes(a.block, bits);
  const float s = static_cast<float>(levels);
  FeedbackAcc acc;
  for (size_t b = w.first; b < w.count; b += w.step) {
    const size_t at = b * a.block, len = min(a.block, a.n - at);
    const float* x = a.x + at;
    const float norm = qsgdNorm(warpSumSquares(x, len, w.lane));
    if (w.lane == 0) storeScale(a.scales, b, norm);
    const float divisor = qsgdDivisor(norm), step = qsgdStep(norm, levels);
    uint8_t* c = a.codes + b * stride;
    if (bits == 8) {
      for (size_t t = w.lane; t < len; t += 32) {
        const float v = x[t];
        const int8_t code = qsgdCode(v, draws.at(at + t), divisor, s);
        c[t] = static_cast<uint8_t>(code);
        if constexpr (kFeedback)
          acc.add(a.residual, at + t, v, qsgdValue(code, step), sentSquare(code, step));
      }
    } else {
      const size_t bytes = packedBytes(len, 4);
      for (size_t k = w.lane; k < bytes; k += 32) {
        const size_t t = 2 * k;
        const bool second = t + 1 < len;
        const float v0 = x[t], v1 = second ? x[t + 1] : 0.0f;
        const int8_t c0 = qsgdCode(v0, draws.at(at + t), divisor, s);
        const int8_t c1 = second ? qsgdCode(v1, draws.at(at + t + 1), divisor, s) : int8_t{0};
        const uint8_t byte = packNibblePair(c0, c1);
        c[k] = byte;
        if constexpr (kFeedback) {
          const int32_t lo = lowNibbleCode(byte), hi = highNibbleCode(byte);
          acc.add(a.residual, at + t, v0, qsgdValue(lo, step), sentSquare(lo, step));
          if (second)
            acc.add(a.residual, at + t + 1, v1, qsgdValue(hi, step), sentSquare(hi, step));
        }
      }
    }
  }
  if constexpr (kFeedback) acc.flush(a.norms);
}

template <bool kFeedback>
__global__ void __launch_bounds__(kThreads) onebitEncodeKernel(EncodeTable t) {
  const EncodeArgs& a = t.job[blockIdx.y];
  const WarpBlocks w = warpBlocks(a);
  const size_t stride = packedBytes(a.block, 1);
  FeedbackAcc acc;
  for (size_t b = w.first; b < w.count; b += w.step) {
    const size_t at = b * a.block, len = min(a.block, a.n - at);
    const float* x = a.x + at;
    const SignSums sums = warpSignSums(x, len, w.lane);
    const float pos = onebitMean(sums.pos, len - sums.nneg);
    const float neg = onebitMean(sums.neg, sums.nneg);
    if (w.lane == 0) {
      storeScale(a.scales, 2 * b, pos);
      storeScale(a.scales, 2 * b + 1, neg);
    }
    uint8_t* c = a.codes + b * stride;
    const size_t bytes = packedBytes(len, 1);
    for (size_t k = w.lane; k < bytes; k += 32) {
      const size_t t0 = 8 * k;
      const int count = static_cast<int>(min(size_t{8}, len - t0));
      uint32_t byte = 0;
      for (int j = 0; j < count; ++j) byte |= signBit(x[t0 + j]) << j;
      c[k] = static_cast<uint8_t>(byte);
      if constexpr (kFeedback)
        for (int j = 0; j < count; ++j)
          acc.add(a.residual, at + t0 + j, x[t0 + j], onebitValue((byte >> j) & 1, pos, neg));
    }
  }
  if constexpr (kFeedback) acc.flush(a.norms);
}

template <bool kFeedback>
__global__ void __launch_bounds__(kThreads) terngradEncodeKernel(EncodeTable t) {
  const EncodeArgs& a = t.job[blockIdx.y];
  const Draws& draws = a.draws;
  const WarpBlocks w = warpBlocks(a);
  const size_t stride = packedBytes(a.block, 2);
  FeedbackAcc acc;
  for (size_t b = w.first; b < w.count; b += w.step) {
    const size_t at = b * a.block, len = min(a.block, a.n - at);
    const float* x = a.x + at;
    const float s = warpMaxAbs(x, len, w.lane);
    if (w.lane == 0) storeScale(a.scales, b, s);
    const float divisor = terngradDivisor(s);
    uint8_t* c = a.codes + b * stride;
    const size_t bytes = packedBytes(len, 2);
    for (size_t k = w.lane; k < bytes; k += 32) {
      const size_t t0 = 4 * k;
      const int count = static_cast<int>(min(size_t{4}, len - t0));
      uint32_t byte = 0;
      for (int j = 0; j < count; ++j)
        byte |= terngradCode(x[t0 + j], draws.at(at + t0 + j), divisor) << (2 * j);
      c[k] = static_cast<uint8_t>(byte);
      if constexpr (kFeedback)
        for (int j = 0; j < count; ++j)
          acc.add(a.residual, at + t0 + j, x[t0 + j], terngradValue((byte >> (2 * j)) & 3, s));
    }
  }
  if constexpr (kFeedback) acc.flush(a.norms);
}

// ---- decode kernels --------------------------------------------------------------------------
// Each codec's view of a payload: at(b) reads block b's scales, value(block, t) decodes value t
// of that block as the CPU's decode does.

struct Int8Codes {
  const unsigned char* scales;
  const uint8_t* codes;
  size_t stride;
  struct Block {
    float scale;
    const uint8_t* codes;
  };
  __device__ Block at(size_t b) const { return {loadScale(scales, b), codes + b * stride}; }
  __device__ float value(const Block& k, size_t t) const { return int8Value(k.codes[t], k.scale); }
};

struct QsgdCodes {
  const unsigned char* scales;
  const uint8_t* codes;
  size_t stride;
  int levels;
  int bits;
  struct Block {
    float step;
    const uint8_t* codes;
  };
  __device__ Block at(size_t b) const {
    return {qsgdStep(loadScale(scales, b), levels), codes + b * stride};
  }
  __device__ float value(const Block& k, size_t t) const {
    if (bits == 8) return qsgdValue(static_cast<int8_t>(k.codes[t]), k.step);
    const uint8_t byte = k.codes[t >> 1];
    return qsgdValue(t & 1 ? highNibbleCode(byte) : lowNibbleCode(byte), k.step);
  }
};

struct OnebitCodes {
  const unsigned char* scales;
  const uint8_t* codes;
  size_t stride;
  struct Block {
    float pos, neg;
    const uint8_t* codes;
  };
  __device__ Block at(size_t b) const {
    return {loadScale(scales, 2 * b), loadScale(scales, 2 * b + 1), codes + b * stride};
  }
  __device__ float value(const Block& k, size_t t) const {
    return onebitValue((k.codes[t >> 3] >> (t & 7)) & 1, k.pos, k.neg);
  }
};

struct TerngradCodes {
  const unsigned char* scales;
  const uint8_t* codes;
  size_t stride;
  struct Block {
    float s;
    const uint8_t* codes;
  };
  __device__ Block at(size_t b) const { return {loadScale(scales, b), codes + b * stride}; }
  __device__ float value(const Block& k, size_t t) const {
    return terngradValue((k.codes[t >> 2] >> (2 * (t & 3))) & 3u, k.s);
  }
};

template <class Codes>
struct DecodeArgs {
  Codes codes;
  size_t n;
  float* out;
  const float* local;
};

// out[i] = value(i), or local[i] + value(i) with kAdd (out may be local), for the job of grid
// row blockIdx.y. kGroup values per thread: 4 (out and local 16-byte aligned: one float4 each)
// or 1.
template <class Codes, bool kAdd, int kGroup>
__global__ void __launch_bounds__(kThreads)
    decodeKernel(JobTable<DecodeArgs<Codes>> t, size_t block) {
  const DecodeArgs<Codes>& job = t.job[blockIdx.y];
  const Codes& codes = job.codes;
  const size_t n = job.n;
  float* const out = job.out;
  const float* const local = job.local;
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t groups = (n + kGroup - 1) / kGroup;
  const bool narrow = ((n | block) >> 32) == 0;  // 32-bit division is several times cheaper
  for (size_t g = first; g < groups; g += stride) {
    const size_t i0 = g * kGroup;
    const int count = static_cast<int>(min(size_t{kGroup}, n - i0));
    size_t b = narrow ? static_cast<uint32_t>(i0) / static_cast<uint32_t>(block) : i0 / block;
    size_t t = i0 - b * block;
    typename Codes::Block k = codes.at(b);
    float v[kGroup];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      if (j >= count) break;
      v[j] = codes.value(k, t);
      if (++t == block && j + 1 < count) {
        t = 0;
        k = codes.at(++b);
      }
    }
    if constexpr (kGroup == 4) {
      if (count == 4) {
        float4 r = {v[0], v[1], v[2], v[3]};
        if constexpr (kAdd) {
          const float4 l = reinterpret_cast<const float4*>(local)[g];
          r = {addDecoded(l.x, r.x), addDecoded(l.y, r.y), addDecoded(l.z, r.z),
               addDecoded(l.w, r.w)};
        }
        reinterpret_cast<float4*>(out)[g] = r;
        continue;
      }
    }
    for (int j = 0; j < count; ++j) {
      if constexpr (kAdd)
        out[i0 + j] = addDecoded(local[i0 + j], v[j]);
      else
        out[i0 + j] = v[j];
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Launches decodeKernel over `jobs` (each n > 0), kBatchJobs to a launch: float4 groups when
// every job's out and local are 16-byte aligned.
template <class Codes>
void launchDecodes(const std::vector<DecodeArgs<Codes>>& jobs, size_t block, bool add,
                   GpuStream stream, const char* name) {
  if (jobs.empty()) return;
  SQZ_ENFORCE(block > 0, name, ": block of 0 values");
  bool vec = true;
  for (const auto& j : jobs) vec = vec && aligned16(j.out) && (!add || aligned16(j.local));
  launchJobs(
      jobs, [&](const DecodeArgs<Codes>& j) { return gridFor(vec ? (j.n + 3) / 4 : j.n); },
      [&](dim3 grid, const JobTable<DecodeArgs<Codes>>& t) {
        if (add) {
          if (vec)
            decodeKernel<Codes, true, 4><<<grid, kThreads, 0, stream>>>(t, block);
          else
            decodeKernel<Codes, true, 1><<<grid, kThreads, 0, stream>>>(t, block);
        } else {
          if (vec)
            decodeKernel<Codes, false, 4><<<grid, kThreads, 0, stream>>>(t, block);
          else
            decodeKernel<Codes, false, 1><<<grid, kThreads, 0, stream>>>(t, block);
        }
        cuda::checkLaunch(name);
      });
}

// ---- encode launch and the feedback round trip ------------------------------------------------

// The two doubles the feedback kernels add to, and the pinned pair the host reads them into;
// per thread and device, so concurrent callers never share them (each call syncs before
// returning, so a later call finds them free).
struct NormScratch {
  cuda::DeviceBuffer device;
  cuda::PinnedBuffer host;
};

NormScratch& normScratch() {
  return perThreadDevice<NormScratch>([](int) {
    auto fresh = std::make_unique<NormScratch>();
    fresh->device = cuda::DeviceBuffer(2 * sizeof(double));
    fresh->host = cuda::PinnedBuffer(2 * sizeof(double));
    return fresh;
  });
}

// The encode kernel of s.kind over `jobs` (each n > 0), with or without feedback,
// kBatchJobs to a launch; one warp per block.
void launchEncodes(const QuantSetting& s, const std::vector<EncodeArgs>& jobs, bool feedback,
                   GpuStream stream) {
  if (jobs.empty()) return;
  SQZ_ENFORCE(s.block > 0, "quantizer encode: block of 0 values");
  static constexpr const char* kNames[] = {"int8EncodeKernel", "qsgdEncodeKernel",
                                           "onebitEncodeKernel", "terngradEncodeKernel"};
  if (s.kind == QuantKind::kQsgd)
    SQZ_ENFORCE(s.bits == 4 || s.bits == 8, "qsgd: ", s.bits, " bits per value");
  auto run = [&](auto fb) {
    constexpr bool kFb = decltype(fb)::value;
    launchJobs(
        jobs, [&](const EncodeArgs& a) { return gridFor(blockCount(a.n, a.block), kWarps); },
        [&](dim3 grid, const EncodeTable& t) {
          switch (s.kind) {
            case QuantKind::kInt8:
              int8EncodeKernel<kFb><<<grid, kThreads, 0, stream>>>(t);
              break;
            case QuantKind::kQsgd:
              qsgdEncodeKernel<kFb><<<grid, kThreads, 0, stream>>>(t, s.levels, s.bits);
              break;
            case QuantKind::kOnebit:
              onebitEncodeKernel<kFb><<<grid, kThreads, 0, stream>>>(t);
              break;
            case QuantKind::kTerngrad:
              terngradEncodeKernel<kFb><<<grid, kThreads, 0, stream>>>(t);
              break;
          }
          cuda::checkLaunch(kNames[static_cast<int>(s.kind)]);
        });
  };
  if (feedback)
    run(std::true_type{});
  else
    run(std::false_type{});
}

EncodeArgs encodeArgs(const QuantSetting& s, const QuantEncodeJob& j, double* norms) {
  return EncodeArgs{j.x,     j.n,        s.block, static_cast<unsigned char*>(j.scales),
                    j.codes, j.residual, norms,   drawsFor(s.key, j.index0)};
}

// One chunk's encode. With feedback, the kernel adds the norms to feedback->deviceNorms, or
// (without it) to the thread's zeroed scratch, which is added to *feedback->norms after
// synchronizing the stream.
void runEncode(const QuantSetting& s, const float* x, size_t n, uint64_t index0, void* scales,
               uint8_t* codes, Feedback* feedback, GpuStream stream) {
  if (n == 0) return;
  const QuantEncodeJob job{x, n, scales, codes, feedback ? feedback->residual : nullptr, index0};
  if (!feedback) {
    launchEncodes(s, {encodeArgs(s, job, nullptr)}, false, stream);
    return;
  }
  if (feedback->deviceNorms) {  // the caller reads them back later: nothing waits here
    launchEncodes(s, {encodeArgs(s, job, feedback->deviceNorms)}, true, stream);
    return;
  }
  NormScratch& sc = normScratch();
  auto* norms = static_cast<double*>(sc.device.data());
  cuda::check(cudaMemsetAsync(norms, 0, 2 * sizeof(double), stream), "cudaMemsetAsync");
  launchEncodes(s, {encodeArgs(s, job, norms)}, true, stream);
  if (!feedback->norms) return;
  cuda::check(
      cudaMemcpyAsync(sc.host.data(), norms, 2 * sizeof(double), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync(feedback norms)");
  syncStream(stream, "quantizer encode with feedback");
  const double* h = static_cast<const double*>(sc.host.data());
  feedback->norms->inputSq += h[0];
  feedback->norms->sentSq += h[1];
}

// A payload's view for decoding, as s.kind reads it.
template <class F>
void withCodes(const QuantSetting& s, const void* scales, const uint8_t* codes, F&& f) {
  const auto* sc = static_cast<const unsigned char*>(scales);
  switch (s.kind) {
    case QuantKind::kInt8:
      return f(Int8Codes{sc, codes, packedBytes(s.block, 8)});
    case QuantKind::kQsgd:
      SQZ_ENFORCE(s.bits == 4 || s.bits == 8, "qsgd: ", s.bits, " bits per value");
      return f(QsgdCodes{sc, codes, packedBytes(s.block, s.bits), s.levels, s.bits});
    case QuantKind::kOnebit:
      return f(OnebitCodes{sc, codes, packedBytes(s.block, 1)});
    case QuantKind::kTerngrad:
      return f(TerngradCodes{sc, codes, packedBytes(s.block, 2)});
  }
}

const char* decodeName(QuantKind kind, bool add) {
  static constexpr const char* kNames[2][4] = {
      {"int8DecodeKernel", "qsgdDecodeKernel", "onebitDecodeKernel", "terngradDecodeKernel"},
      {"int8DecodeAddKernel", "qsgdDecodeAddKernel", "onebitDecodeAddKernel",
       "terngradDecodeAddKernel"}};
  return kNames[add][static_cast<int>(kind)];
}

}  // namespace

// ---- entry points ------------------------------------------------------------------------------

void gpuQuantEncodeBatch(const QuantSetting& s, const QuantEncodeJob* jobs, size_t count,
                         bool feedback, double* deviceNorms, GpuStream stream) {
  SQZ_ENFORCE(!feedback || deviceNorms, "a batched encode with feedback needs device norms");
  std::vector<EncodeArgs> args;
  for (size_t j = 0; j < count; ++j)
    if (jobs[j].n > 0) args.push_back(encodeArgs(s, jobs[j], feedback ? deviceNorms : nullptr));
  launchEncodes(s, args, feedback, stream);
}

void gpuQuantDecodeBatch(const QuantSetting& s, const QuantDecodeJob* jobs, size_t count, bool add,
                         GpuStream stream) {
  if (count == 0) return;
  withCodes(s, jobs[0].scales, jobs[0].codes, [&](auto first) {
    using Codes = decltype(first);
    std::vector<DecodeArgs<Codes>> args;
    for (size_t j = 0; j < count; ++j)
      if (jobs[j].n > 0)
        withCodes(s, jobs[j].scales, jobs[j].codes, [&](auto codes) {
          if constexpr (std::is_same_v<decltype(codes), Codes>)
            args.push_back({codes, jobs[j].n, jobs[j].out, add ? jobs[j].local : nullptr});
        });
    launchDecodes(args, s.block, add, stream, decodeName(s.kind, add));
  });
}

void gpuQuantEncodeJob(const QuantSetting& s, const QuantEncodeJob& job, Feedback* feedback,
                       GpuStream stream) {
  SQZ_ENFORCE(s.kind != QuantKind::kQsgd || s.bits == 4 || s.bits == 8, "qsgd: ", s.bits,
              " bits per value");
  runEncode(s, job.x, job.n, job.index0, job.scales, job.codes, feedback, stream);
}

// Made at a progress thread's start (gpuPrepareThread), before any stream waits for it.
void prepareQuantizeThread() { (void)normScratch(); }

}  // namespace squeeze::device
