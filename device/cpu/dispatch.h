// How the CPU kernels pick their instruction set at run time: a kernel's body, inlined whole
// into a lambda, runs either as baseline x86-64 code or inside an AVX2 function, so GCC
// vectorizes the same plain loops for both targets. Both run the same IEEE operations in the
// same order (fixed lanes; no FMA but the explicit ones of quantize.cc's rows, which round as
// the plain operations do), so the results do not depend on the CPU. Used by
// device/cpu/quantize.cc and handle_kernels.cc; cpuQuantizeAllowIsa (quantize.h) narrows the
// code for all of them, for tests and benchmarks. QSGD's and TernGrad's rows also have AVX-512
// forms (quantize_rows.h), called from the AVX2 code where the CPU has AVX-512 (usesAvx512).
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#define SQZ_CPU_X86 1
#else
#define SQZ_CPU_X86 0
#endif

// A kernel's helpers are inlined whole into its entry point's lambda, which dispatch() runs.
#define SQZ_INLINE inline __attribute__((always_inline))
#define SQZ_LAMBDA_INLINE __attribute__((always_inline))

namespace squeeze::device::cpu {

// Eight float lanes as one value: the fixed lanes of the kernels' sums (one AVX2 register, or
// two SSE2 ones in baseline code; lane by lane the same IEEE operations either way).
typedef float Float8 __attribute__((vector_size(32)));
SQZ_INLINE Float8 loadFloat8(const float* p) {
  Float8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
SQZ_INLINE void storeFloat8(float* p, Float8 v) { __builtin_memcpy(p, &v, sizeof v); }
// The same lanes as bit patterns (a cast between the two reinterprets the bits), and as
// signed words (>> then shifts arithmetically).
typedef uint32_t Bits8 __attribute__((vector_size(32)));
typedef int32_t Ints8 __attribute__((vector_size(32)));
// Four double lanes: eight float lanes' sums in double are two of these (lanes 0-3, 4-7).
typedef double Double4 __attribute__((vector_size(32)));
SQZ_INLINE Double4 lowHalf(Float8 v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), Double4);
}
SQZ_INLINE Double4 highHalf(Float8 v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), Double4);
}
typedef float Float4 __attribute__((vector_size(16)));
// p[0..4) in double (one conversion straight from memory).
SQZ_INLINE Double4 loadDouble4(const float* p) {
  Float4 v;
  __builtin_memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, Double4);
}
// Eight double lanes (lo: 0-3, hi: 4-7); lane j += squareOf(v[j]) or += double(v[j]).
struct Double8 {
  Double4 lo = {}, hi = {};
  // Lane j += squareOf(p[j]).
  SQZ_INLINE void addSquaresOf(const float* p) {
    const Double4 a = loadDouble4(p), b = loadDouble4(p + 4);
    lo = lo + a * a;
    hi = hi + b * b;
  }
  SQZ_INLINE void add(Float8 v) {
    lo = lo + lowHalf(v);
    hi = hi + highHalf(v);
  }
  SQZ_INLINE void addAt(int j, double v) {
    if (j < 4)
      lo[j] += v;
    else
      hi[j - 4] += v;
  }
  SQZ_INLINE double at(int j) const { return j < 4 ? lo[j] : hi[j - 4]; }
};

// Process-wide, the widest instruction set the kernels may use: 0 baseline, 1 AVX2, 2 AVX-512
// (cpuQuantizeAllowIsa).
inline std::atomic<int> allowedIsa{2};

// AVX2 with FMA (every AVX2 CPU has it; quantize.cc's rows use both).
inline bool hasAvx2() {
#if SQZ_CPU_X86
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
#else
  return false;
#endif
}
// AVX-512 F (the QSGD and TernGrad rows' 16 lanes), on top of AVX2.
inline bool hasAvx512() {
#if SQZ_CPU_X86
  static const bool have = hasAvx2() && __builtin_cpu_supports("avx512f");
  return have;
#else
  return false;
#endif
}

inline bool usesAvx2() { return hasAvx2() && allowedIsa.load(std::memory_order_relaxed) >= 1; }
inline bool usesAvx512() {
  return hasAvx512() && allowedIsa.load(std::memory_order_relaxed) >= 2;
}

#if SQZ_CPU_X86
template <class F>
__attribute__((target("avx2"))) void runAvx2(F& f) {
  f();
}
#endif

// Runs f (whose whole body is inlined) as AVX2 code where allowed, else as baseline code.
template <class F>
void dispatch(F&& f) {
#if SQZ_CPU_X86
  if (usesAvx2()) return runAvx2(f);
#endif
  f();
}

}  // namespace squeeze::device::cpu
