// The inputs and expected outputs of the sqz-*-perf binaries' checked calls (PerfColl::initData
// writes them with these), and the gradient-like floats of their -z runs.
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

/// Writes gradientValue(first + i, rank, seed) into buf[i] for i < count.
void fillGradient(float* buf, size_t count, size_t first, int rank, uint64_t seed);

}  // namespace squeeze::perf
