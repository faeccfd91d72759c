// Non-temporal stores for a kernel's output that is larger than the caches: the payload goes to
// memory without the store first reading the destination's cache lines (the read-for-ownership
// a plain store pays), a fifth to a third of an encode's memory traffic when its input and
// residual are streamed too. glibc's memcpy makes the same choice above its non-temporal
// threshold, and sqz-machine-limits's memcpy figure (the one the codec speeds are held against)
// is taken there. Below kStreamMinBytes the payload is written as usual: it is sent right
// after, and should still be in cache then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "device/cpu/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define SQZ_CPU_STREAM_STORES 1
#else
#define SQZ_CPU_STREAM_STORES 0
#endif

namespace squeeze::device::cpu {

// Outputs (whole kernel calls, not blocks) at least this large are streamed: four times the L2
// of the cores this was measured on, so a payload this size would be evicted before it is sent.
constexpr size_t kStreamMinBytes = size_t{8} << 20;

inline bool streamOutput(size_t bytes) { return bytes >= kStreamMinBytes; }

// p[0..8) = v, non-temporal; p is 16-byte aligned (streamAligned). SSE2, so baseline x86-64
// code may call it too; the kernel calls streamFence() once before it returns.
SQZ_INLINE void streamFloat8(float* p, Float8 v) {
#if SQZ_CPU_STREAM_STORES
  _mm_stream_ps(p, __builtin_shufflevector(v, v, 0, 1, 2, 3));
  _mm_stream_ps(p + 4, __builtin_shufflevector(v, v, 4, 5, 6, 7));
#else
  storeFloat8(p, v);
#endif
}

// p[0..16) = the 16 bytes at v, non-temporal; p is 16-byte aligned.
SQZ_INLINE void streamBytes16(void* p, const void* v) {
#if SQZ_CPU_STREAM_STORES
  _mm_stream_si128(static_cast<__m128i*>(p), _mm_loadu_si128(static_cast<const __m128i*>(v)));
#else
  std::memcpy(p, v, 16);
#endif
}

inline bool streamAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Orders the streamed stores before whatever the kernel's caller does next: the payload may be
// read by another thread or process once the kernel returns, and non-temporal stores are not
// ordered by a later release.
inline void streamFence() {
#if SQZ_CPU_STREAM_STORES
  _mm_sfence();
#endif
}

}  // namespace squeeze::device::cpu
