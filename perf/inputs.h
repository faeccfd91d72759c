// The inputs and expected outputs of the sqz-*-perf binaries' checked calls (PerfColl::initData
// writes them with these), the gradient-like floats of their -z runs (and of sqz-codec-bench),
// and the counter-based hashes they come from (sqz-train-sim's data too).
//
// Inputs are small integers chosen so that every reduction over any number of ranks is exact in
// every datatype (int8 and bfloat16 included): for sum and avg at most 8 ranks contribute a
// non-zero value to each element (values in [-5, 5], or [0, 10] for unsigned types); prod uses
// values in {1, 2} (and -1 for signed types) with at most 3 factors of 2 per element; max and
// min use values in [-20, 20] (or [0, 40]). Avg is the exact sum divided by the rank count:
// truncated for integer types, rounded to nearest even for floating types.
#pragma once

#include <squeeze/squeeze.h>

#include <cstddef>
#include <cstdint>

namespace squeeze::perf {

/// splitmix64's finalizer: a bijection of 64-bit words that scatters every input bit over the
/// output (constexpr so that a key can be checked against the value it must mix to).
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The hash of element j under (key, seed) that every value below is drawn from; key is a rank,
/// or a constant for what the ranks share.
constexpr uint64_t elementHash(uint64_t j, uint64_t key, uint64_t seed) {
  return mix64(j * 0x100000001b3ull ^ mix64(key + 0x51ed27ull * seed));
}

/// Writes rank `rank`'s input for elements first .. first+count-1 into buf[0 .. count-1].
void fillInput(void* buf, size_t count, size_t first, sqzDataType_t type, sqzRedOp_t op, int rank,
               int nranks, uint64_t seed);

/// Writes the reduction with `op` over all nranks ranks' fillInput values into buf.
void fillReduced(void* buf, size_t count, size_t first, sqzDataType_t type, sqzRedOp_t op,
                 int nranks, uint64_t seed);

/// For collectives that move data without reducing it (broadcast, all-gather, all-to-all,
/// send/receive): writes rank `rank`'s values for elements first .. first+count-1, all of them
/// non-trivial (41 values in every datatype) and different per rank, element and seed, so a
/// block that lands at the wrong place or comes from the wrong rank is caught.
void fillPattern(void* buf, size_t count, size_t first, sqzDataType_t type, int rank,
                 uint64_t seed);

/// Gradient-like float32 input for the compressed runs (-z), where small integers would make
/// every codec look exact (fp16 carries them without error): element j of rank `rank` is
/// s_j * (m_j / 2 + n_{j,rank}), with a per-element scale s_j log-uniform in [2^-8, 1] and a
/// component m_j shared by the ranks (both the same on every rank), and per-rank noise n; m and
/// n are roughly standard normal. Deterministic from (j, rank, seed), so any rank can compute
/// every rank's input and hence the exact sum.
float gradientValue(size_t j, int rank, uint64_t seed);

/// gradientValue's construction from its two hashes: `shared` (the same on every rank) gives s_j
/// and m_j, `noise` the rank's n. For a program whose data has its own keys (sqz-codec-bench).
float gradientFromHashes(uint64_t shared, uint64_t noise);

/// Writes gradientValue(first + i, rank, seed) into buf[i] for i < count.
void fillGradient(float* buf, size_t count, size_t first, int rank, uint64_t seed);

}  // namespace squeeze::perf
