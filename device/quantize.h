// What the quantizer codecs' kernels share (compress/block_quant.h's codecs): they encode a
// chunk of float32 values block by block into per-block scales and packed codes, decode them,
// and the fused dequantize-add that is their combine. The codec files own the payload layout
// (header, where the two sections sit); these kernels own what is inside the sections:
//   scales  `perBlock` float32 per block, block after block, at any alignment (memcpy'd);
//   codes   block after block, each block's codes packed `bits` per value, low bits first, and
//           padded to a whole byte, so block b's codes start at b * packedBytes(block, bits).
// Blocks are counted from the chunk's first value; the last block may be shorter.
//
// Randomness (QSGD's stochastic rounding, TernGrad's Bernoulli draws) is counter-based: the
// draw for global element index i is counterHash(counterKey(seed, call, rank), i), so it does
// not depend on how the tensor was cut into chunks, and a saved state resumes bit for bit.
//
// Every decode, decode-add and fused feedback computes a value with the same float operations,
// so decodeAdd(local, p) == local + decode(p) bit for bit (no FMA contraction: none is enabled).
// Decode-add's out must be local itself or not overlap it. The per-value operations are
// device/elementwise.h's, shared by the CPU kernels and their CUDA twins declared at the end.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/hd.h"
#include "squeeze_config.h"

namespace squeeze::device {

// ---- instruction set ----------------------------------------------------------------------

// The kernels run as AVX2 code where the CPU has it (QSGD's and TernGrad's rows as AVX-512
// where it has that too) and as baseline code otherwise, with the same results bit for bit.
enum class CpuIsa { kBaseline, kAvx2, kAvx512 };
// For tests and benchmarks: the kernels use at most `widest` (process-wide; not for use while
// kernels run on other threads). kAvx512, the default, lets them use all the CPU has.
void cpuQuantizeAllowIsa(CpuIsa widest);
// The widest instruction set the kernels use now (what the CPU has, up to the allowed one).
CpuIsa cpuQuantizeIsa();

// ---- counter-based random numbers ------------------------------------------------------------

// Marked SQZ_HD: the CUDA kernels draw the same numbers per element (and sparse.h's hashes).

// splitmix64's finalizer: a bijective 64-bit mix.
SQZ_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A bijective 32-bit mix with low bias ("lowbias32", C. Wellons); vectorizes as plain integer
// multiplies and shifts.
SQZ_HD inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// The stream of one (seed, call, rank).
SQZ_HD inline uint64_t counterKey(uint64_t seed, uint64_t call, int rank) {
  return mix64(seed ^ mix64(call ^ mix64(static_cast<uint64_t>(static_cast<uint32_t>(rank)) +
                                         0x9e3779b97f4a7c15ull)));
}

// 32 random bits for element `index` of stream `key`. Within one 2^32-aligned run of indices
// the high half of the index is folded into a per-run key, so the per-element work is
// mix32(low32(index) * golden ^ runKey): distinct indices give distinct inputs to a bijection.
SQZ_HD inline uint32_t counterRunKey(uint64_t key, uint64_t indexHigh) {
  return static_cast<uint32_t>(mix64(key + indexHigh * 0x9e3779b97f4a7c15ull));
}
SQZ_HD inline uint32_t counterHash(uint64_t key, uint64_t index) {
  return mix32(static_cast<uint32_t>(index) * 0x9e3779b9u ^ counterRunKey(key, index >> 32));
}

// ---- layout ----------------------------------------------------------------------------------

// Number of blocks of a chunk of n values.
SQZ_HD inline size_t blockCount(size_t n, size_t block) { return (n + block - 1) / block; }
// Bytes of one block of `len` values at `bits` per value.
SQZ_HD inline size_t packedBytes(size_t len, int bits) { return (len * bits + 7) / 8; }
// Bytes of the code section of a chunk of n values.
SQZ_HD inline size_t packedChunkBytes(size_t n, size_t block, int bits) {
  if (n == 0) return 0;
  const size_t full = n / block, rest = n % block;
  return full * packedBytes(block, bits) + packedBytes(rest, bits);
}

// ---- error feedback fused into an encode -----------------------------------------------------

// Squared norms an encode saw: |x|^2 of its input and |decode(payload)|^2 (a codec's gain).
struct Norms {
  double inputSq = 0;
  double sentSq = 0;
};

// What Codec::encodeFeedback adds to an encode (compress/feedback.cc does the same in separate
// passes): with `residual` not null, residual[i] += x[i] - decoded[i] for the chunk's values
// (residual indexed like x, and not overlapping it); and the squared norms of x and of the
// decoded values are added to *norms (host memory; null: not kept). decoded[i] is computed
// exactly as decode computes it, so the residual is bit for bit x - decode(payload).
// deviceNorms (GPU twins only): two doubles in device memory the norms are added to instead,
// on the device, with nothing waiting for them; *norms is left to whoever reads them back (the
// CUDA execution context does, when it next waits).
struct Feedback {
  float* residual = nullptr;
  Norms* norms = nullptr;
  double* deviceNorms = nullptr;
};

// The kernels themselves run by QuantSetting, one job or a batch: device/batch.h's
// cpuQuantEncodeJob and cpuQuantDecodeJob (device/cpu/quantize.cc, where each quantizer's codes
// are described), and their CUDA twins gpuQuantEncodeJob, gpuQuantEncodeBatch and
// gpuQuantDecodeBatch (device/cuda/quantize.cu).

}  // namespace squeeze::device
