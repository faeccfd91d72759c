// CPU kernels of device/handle_kernels.h: the codec handles' per-element passes and the index
// check of sparse payloads. Each element goes through the header's SQZ_HD math, as in the CUDA
// kernels, so host and device calls give the same bits; the loops are plain so GCC vectorizes
// them (x may alias g, so no __restrict there).
#include "device/handle_kernels.h"

#include <cstdint>

namespace squeeze::device {

void cpuAddResidual(const float* g, float* e, float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float xi = withResidual(g[i], e[i]);
    e[i] = 0.0f;
    x[i] = xi;
  }
}

void cpuDgcPrepare(const float* g, float scale, float m, float* u, float* v, float* x,
                   uint8_t* nonzero, size_t n) {
  // x may alias g: each element is read before it is written.
  for (size_t i = 0; i < n; ++i) {
    const float xi = dgcAccumulate(g[i], scale, m, u[i], v[i]);
    v[i] = 0.0f;
    x[i] = xi;
    nonzero[i] = xi != 0.0f;
  }
}

void cpuDgcMask(float* u, const float* v, const uint8_t* nonzero, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (dgcSentInFull(nonzero[i], v[i])) u[i] = 0.0f;
}

void cpuFeedbackPass(const float* xIn, const float* dIn, size_t n, float* residual, double* inputSq,
                     double* sentSq) {
  const float* __restrict x = xIn;
  const float* __restrict d = dIn;
  if (residual)
    for (size_t i = 0; i < n; ++i) residual[i] = residualAfter(residual[i], x[i], d[i]);
  if (!inputSq && !sentSq) return;
  // 8 float lanes per block (the compiler keeps them in one vector register), then the lanes
  // into double; gpuFeedbackPass's lanes add up in this order too.
  static_assert(kNormLanes == 8);
  double in = 0, sent = 0;
  for (size_t b = 0; b < n; b += kNormBlock) {
    const size_t end = n - b < kNormBlock ? n : b + kNormBlock;
    float in8[8] = {}, sent8[8] = {};
    size_t i = b;
    for (; i + 8 <= end; i += 8)
      for (int l = 0; l < 8; ++l) {
        in8[l] = addSquare(in8[l], x[i + l]);
        sent8[l] = addSquare(sent8[l], d[i + l]);
      }
    for (; i < end; ++i) {
      in8[0] = addSquare(in8[0], x[i]);
      sent8[0] = addSquare(sent8[0], d[i]);
    }
    for (int l = 0; l < 8; ++l) {
      in += in8[l];
      sent += sent8[l];
    }
  }
  if (inputSq) *inputSq += in;
  if (sentSq) *sentSq += sent;
}

size_t cpuFirstBadIndex(const uint32_t* idx, size_t m, size_t count) {
  for (size_t j = 0; j < m; ++j)
    if (idx[j] >= count || (j > 0 && idx[j] <= idx[j - 1])) return j;
  return SIZE_MAX;
}

}  // namespace squeeze::device
