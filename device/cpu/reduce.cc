// CPU reduction kernels: one simple loop per (type, op) that GCC vectorizes at -O2/-O3, selected
// through a table so the executor calls one function pointer per chunk. Each element is
// device/elementwise.h's reduceElement / divideElement, the math the CUDA kernels run too; half
// types go through float32 (the DESIGN rule: accumulate 16-bit floats in float32), with an F16C
// path for float16 that rounds as the scalar one does.
#include <cpuid.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "device/elementwise.h"
#include "device/reduce.h"

namespace squeeze::device {
namespace {

template <class Elem, class Op>
void reduceLoop(void* out, const void* a, const void* b, size_t n) {
  using T = typename Elem::Storage;
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = reduceElement<Elem, Op>(x[i], y[i]);
}

// float16 with the F16C conversions (8 lanes); same rounding (nearest even) as the scalar path.
struct VecSum {
  __attribute__((target("avx,f16c"))) static __m256 apply(__m256 a, __m256 b) {
    return _mm256_add_ps(a, b);
  }
};
struct VecProd {
  __attribute__((target("avx,f16c"))) static __m256 apply(__m256 a, __m256 b) {
    return _mm256_mul_ps(a, b);
  }
};
struct VecMax {  // a > b ? a : b, like OpMax
  __attribute__((target("avx,f16c"))) static __m256 apply(__m256 a, __m256 b) {
    return _mm256_max_ps(a, b);
  }
};
struct VecMin {  // a < b ? a : b, like OpMin
  __attribute__((target("avx,f16c"))) static __m256 apply(__m256 a, __m256 b) {
    return _mm256_min_ps(a, b);
  }
};

template <class Vec, class Op>
__attribute__((target("avx,f16c"))) void reduceHalfF16c(void* out, const void* a, const void* b,
                                                        size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 fx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    __m256 fy = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i),
                     _mm256_cvtps_ph(Vec::apply(fx, fy), _MM_FROUND_TO_NEAREST_INT));
  }
  reduceLoop<HalfElem, Op>(o + i, x + i, y + i, n - i);
}

template <class Op, class Vec>
ReduceFn halfFn() {
  return cpuHasF16c() ? reduceHalfF16c<Vec, Op> : reduceLoop<HalfElem, Op>;
}

template <class Op>
struct VecOf;
template <> struct VecOf<OpSum> { using type = VecSum; };
template <> struct VecOf<OpProd> { using type = VecProd; };
template <> struct VecOf<OpMax> { using type = VecMax; };
template <> struct VecOf<OpMin> { using type = VecMin; };

template <class Op>
ReduceFn forType(DataType t) {
  if (t == DataType::kFloat16) return halfFn<Op, typename VecOf<Op>::type>();
  return visitElement(t, [](auto elem) -> ReduceFn { return reduceLoop<decltype(elem), Op>; });
}

template <class Elem>
void divideLoop(void* buf, size_t n, int divisor) {
  auto* p = static_cast<typename Elem::Storage*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = divideElement<Elem>(p[i], divisor);
}

}  // namespace

bool cpuHasF16c() {
  // F16C is CPUID.1:ECX bit 29; __builtin_cpu_supports("avx") also checks that the OS saves the
  // AVX registers. (clang < 15 has no __builtin_cpu_supports("f16c").)
  static const bool have = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
           (ecx & bit_F16C) != 0;
  }();
  return have;
}

ReduceFn cpuReduceFn(DataType dtype, RedOp op) {
  ReduceFn fn = visitOp(op, [&](auto o) -> ReduceFn { return forType<decltype(o)>(dtype); });
  SQZ_ENFORCE(fn != nullptr, "no reduction for dtype ", int(dtype), " op ", int(op));
  return fn;
}

void cpuDivide(void* buf, size_t n, DataType dtype, int divisor) {
  visitElement(dtype, [&](auto elem) { divideLoop<decltype(elem)>(buf, n, divisor); });
}

void cpuCheckCalls(const CallCheck& c, uint32_t* verdict) {
  if (c.error[0] == 0) {
    if (const uint32_t q = disagreeingRank(c)) {
      for (int w = 0; w < kCallWords; ++w) {
        c.error[1 + w] = c.call[q - 1][w];
        c.error[1 + kCallWords + w] = c.expect[w];
      }
      __atomic_store_n(const_cast<uint32_t*>(c.error), q, __ATOMIC_RELEASE);
    }
  }
  *verdict = c.error[0];
}

void cpuPublishWords(const PublishWords& p) {
  if (*p.verdict != 0) return;
  for (int i = 0; i < p.count; ++i)
    __atomic_store_n(const_cast<uint32_t*>(p.word[i]), p.value[i], __ATOMIC_RELEASE);
}

void cpuReduceRanks(DataType dtype, RedOp op, void* out, const RankInputs& r, size_t n,
                    int divisor) {
  const ReduceFn fn = cpuReduceFn(dtype, op);
  if (*r.verdict != 0 || n == 0) return;
  if (r.nranks == 1) {
    std::memcpy(out, r.in[0], n * dataTypeSize(dtype));
  } else {
    // Pairwise in rank order: each step rounds as reduceElement does, so the bits are those of
    // one fold per element (the GPU's).
    fn(out, r.in[0], r.in[1], n);
    for (int q = 2; q < r.nranks; ++q) fn(out, out, r.in[q], n);
  }
  if (divisor > 1) cpuDivide(out, n, dtype, divisor);
}

void checkSmallRound(const RoundCopies& copies, const PublishWords& p, const uint32_t* verdict) {
  SQZ_ENFORCE(copies.count >= 0 && copies.count <= kMaxRoundCopies && p.count >= 0 &&
                  p.count <= kMaxPublishWords && p.signals >= 0 && p.signals <= p.count &&
                  p.verdict == verdict,
              "a small round of ", copies.count, " copies and ", p.count, " words");
}

void checkRanksFold(const CallCheck& c, const RankInputs& r, const uint32_t* verdict) {
  SQZ_ENFORCE(c.nranks >= 0 && c.nranks <= kMaxReduceRanks && r.nranks >= 1 &&
                  r.nranks <= kMaxReduceRanks && r.verdict == verdict,
              "checkReduceRanks over ", c.nranks, " and ", r.nranks, " ranks");
}

void cpuGatedCopyPublish(const volatile uint32_t* error, uint32_t* verdict,
                         const RoundCopies& copies, const PublishWords& p) {
  checkSmallRound(copies, p, verdict);
  *verdict = __atomic_load_n(const_cast<const uint32_t*>(error), __ATOMIC_ACQUIRE);
  if (*verdict != 0) return;
  for (int c = 0; c < copies.count; ++c)
    if (copies.bytes[c] != 0) std::memcpy(copies.dst[c], copies.src[c], copies.bytes[c]);
  if (p.count > 0) cpuPublishWords(p);
}

void cpuCheckReduceRanks(const CallCheck& c, uint32_t* verdict, DataType dtype, RedOp op,
                         void* out, const RankInputs& r, size_t n, int divisor) {
  checkRanksFold(c, r, verdict);
  cpuCheckCalls(c, verdict);
  cpuReduceRanks(dtype, op, out, r, n, divisor);
}

}  // namespace squeeze::device
