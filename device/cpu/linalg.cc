// CPU kernels of device/linalg.h. M is streamed once per product, row by row: a row (m floats)
// stays in L1 while it meets the r columns of the thin factor, which stay in L1/L2 (r*m floats).
// Sums accumulate in double in fixed lanes that GCC vectorizes; no runtime dispatch, so every
// CPU computes the same bits.
#include "device/linalg.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace squeeze::device {
namespace {

// sum a[k] b[k] in double, four lanes then a fixed pairwise finish.
inline double dot(const float* a, const float* b, size_t len) {
  double acc[4] = {0, 0, 0, 0};
  size_t k = 0;
  for (; k + 4 <= len; k += 4)
    for (size_t l = 0; l < 4; ++l) acc[l] += double(a[k + l]) * double(b[k + l]);
  for (; k < len; ++k) acc[k & 3] += double(a[k]) * double(b[k]);
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

inline double dotSelf(const float* a, size_t len) { return dot(a, a, len); }

// a -= c b, computed in double and rounded once per element.
inline void subtractScaled(float* a, const float* b, double c, size_t len) {
  for (size_t k = 0; k < len; ++k) a[k] = float(double(a[k]) - c * double(b[k]));
}

// Projects column v (length n) against the first j columns of p, twice.
void projectOut(const float* p, size_t n, size_t j, float* v) {
  for (int pass = 0; pass < 2; ++pass)
    for (size_t k = 0; k < j; ++k) subtractScaled(v, p + k * n, dot(p + k * n, v, n), n);
}

}  // namespace

void cpuMatMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                     float* p) {
  for (size_t i = 0; i < n; ++i) {
    const float* row = M + i * m;
    const size_t len = rowLength(i, count, m);
    for (size_t j = 0; j < r; ++j) p[j * n + i] = float(dot(row, q + j * m, len));
  }
}

void cpuMatTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                      float* q) {
  thread_local std::vector<double> acc;
  acc.assign(r * m, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const float* row = M + i * m;
    const size_t len = rowLength(i, count, m);
    for (size_t j = 0; j < r; ++j) {
      const double c = p[j * n + i];
      double* a = acc.data() + j * m;
      for (size_t k = 0; k < len; ++k) a[k] += c * double(row[k]);
    }
  }
  for (size_t t = 0; t < r * m; ++t) q[t] = float(acc[t]);
}

void cpuLowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r, size_t count,
                     const float* x, float scale, float* out, float* residual) {
  thread_local std::vector<double> row;
  if (row.size() < m) row.resize(m);
  double* b = row.data();
  for (size_t i = 0; i < n; ++i) {
    const size_t len = rowLength(i, count, m);
    if (len == 0) break;
    std::fill(b, b + len, 0.0);
    for (size_t j = 0; j < r; ++j) {
      const double c = p[j * n + i];
      const float* qj = q + j * m;
      for (size_t k = 0; k < len; ++k) b[k] += c * double(qj[k]);
    }
    const size_t base = i * m;
    if (residual) {
      for (size_t k = 0; k < len; ++k) {
        const float a = float(b[k]);
        residual[base + k] += x[base + k] - a;
        out[base + k] = a * scale;
      }
    } else {
      for (size_t k = 0; k < len; ++k) out[base + k] = float(b[k]) * scale;
    }
  }
}

void cpuOrthonormalize(float* p, size_t n, size_t r) {
  for (size_t j = 0; j < r && j < n; ++j) {
    float* v = p + j * n;
    const double original = std::sqrt(dotSelf(v, n));
    projectOut(p, n, j, v);
    double norm = std::sqrt(dotSelf(v, n));
    if (degenerateColumn(original, norm)) {
      // Degenerate: the unit vector least represented in the earlier columns. Its weight there
      // is at most j/n < 1 for some t, so what is left after projection is not zero.
      size_t best = 0;
      double bestWeight = 0;
      for (size_t t = 0; t < n; ++t) {
        double w = 0;
        for (size_t k = 0; k < j; ++k) w += double(p[k * n + t]) * p[k * n + t];
        if (t == 0 || w < bestWeight) {
          best = t;
          bestWeight = w;
        }
      }
      std::fill(v, v + n, 0.0f);
      v[best] = 1.0f;
      projectOut(p, n, j, v);
      norm = std::sqrt(dotSelf(v, n));
    }
    const double inv = 1.0 / norm;
    for (size_t i = 0; i < n; ++i) v[i] = float(double(v[i]) * inv);
  }
}

double cpuSquaredNorm(const float* x, size_t n) { return dotSelf(x, n); }

float cpuClipScale(const float* x, size_t n, double limit) {
  return clipScale(cpuSquaredNorm(x, n), limit);
}

}  // namespace squeeze::device
