// Dense linear algebra for low-rank compression (PowerSGD, compress/powersgd.cc): the products
// of a tall matrix with thin factors, and Gram-Schmidt.
//
// Layouts. M is row-major n x m, given as its first `count` elements ((n-1)*m < count <= n*m):
// the missing tail of the last row is zero. A thin factor with r columns is stored column by
// column ("panels"): P (n x r) as p[j*n + i], Q (m x r) as q[j*m + k], so each column is
// contiguous (Gram-Schmidt works on columns, the products stream M once).
//
// Precision: products and dot products accumulate in double and round to float once, so a long
// row or column does not lose the small terms. Results depend only on the inputs (no runtime
// CPU dispatch, fixed summation order): every rank that runs cpuOrthonormalize and
// cpuLowRankApply on the same all-reduced factors gets the same bits.
#pragma once

#include <cstddef>

namespace squeeze::device {

// p = M q: p[j*n + i] = sum_k M[i*m + k] q[j*m + k]. Streams M once, row by row.
void cpuMatMulPanels(const float* M, size_t count, size_t n, size_t m, const float* q, size_t r,
                     float* p);

// q = M^T p: q[j*m + k] = sum_i M[i*m + k] p[j*n + i]. Streams M once, row by row.
void cpuMatTMulPanels(const float* M, size_t count, size_t n, size_t m, const float* p, size_t r,
                      float* q);

// For t < count, with a = (p q^T)[t] = sum_j p[j*n + t/m] q[j*m + t%m] rounded to float:
//   residual[t] += x[t] - a   (when residual is not null)
//   out[t] = a * scale
// out may alias x.
void cpuLowRankApply(const float* p, const float* q, size_t n, size_t m, size_t r, size_t count,
                     const float* x, float scale, float* out, float* residual);

// Makes the r columns of p (n x r, panels; r <= n) orthonormal by Gram-Schmidt, each column
// projected against the earlier ones twice ("twice is enough"). A column that is zero, not
// finite, or within 1e-4 of its original norm of the earlier columns' span is replaced by the
// unit vector e_t whose index t has the smallest weight in the earlier columns (the first such
// t), orthogonalized the same way: the output always has r orthonormal finite columns.
void cpuOrthonormalize(float* p, size_t n, size_t r);

// sum_i x[i]^2, in double.
double cpuSquaredNorm(const float* x, size_t n);

}  // namespace squeeze::device
