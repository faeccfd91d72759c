// Unit tests for device/linalg.h (PowerSGD's kernels): the three products against naive
// double-precision references over shapes with and without a partial last row, the residual
// accumulation and aliasing of cpuLowRankApply, and cpuOrthonormalize: orthonormal columns that
// span the same nested subspaces as the input (P = P^ R with R upper triangular), and the
// degenerate inputs (zero, repeated, NaN or infinite columns, r = n) turned into orthonormal
// finite columns, the same bits every time.
#include "device/linalg.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/common/kernel_inputs.h"

namespace squeeze::device {
namespace {

using kernel_inputs::at;
using kernel_inputs::randomVec;
using kernel_inputs::Shape;

// Full rows, a partial last row, single rows and columns, long rows.
const Shape kShapes[] = {{1, 1, 1},     {12, 4, 2},  {13, 4, 2},    {1031, 33, 2},  {1031, 33, 5},
                         {4096, 64, 4}, {999, 1, 3}, {999, 999, 2}, {5000, 700, 3}, {37, 5, 4}};


// |a - b| <= tol * (sum of |terms|): the natural bound for a rounded sum.
void expectClose(double got, double want, double absTerms, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), 1e-6 * absTerms + 1e-30)
      << what << ": " << got << " vs " << want;
}

TEST(Linalg, MatMulPanelsMatchesNaive) {
  for (const Shape& s : kShapes) {
    const size_t n = s.n();
    auto M = randomVec(s.count, 1);
    auto q = randomVec(s.m * s.r, 2);
    std::vector<float> p(n * s.r, -7.0f);
    cpuMatMulPanels(M.data(), s.count, n, s.m, q.data(), s.r, p.data());
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < s.r; ++j) {
        double want = 0, terms = 0;
        for (size_t k = 0; k < s.m; ++k) {
          want += at(M, s.count, s.m, i, k) * q[j * s.m + k];
          terms += std::fabs(at(M, s.count, s.m, i, k) * q[j * s.m + k]);
        }
        expectClose(p[j * n + i], want, terms,
                    s.name() + " P(" + std::to_string(i) + "," + std::to_string(j) + ")");
      }
  }
}

TEST(Linalg, MatTMulPanelsMatchesNaive) {
  for (const Shape& s : kShapes) {
    const size_t n = s.n();
    auto M = randomVec(s.count, 3);
    auto p = randomVec(n * s.r, 4);
    std::vector<float> q(s.m * s.r, -7.0f);
    cpuMatTMulPanels(M.data(), s.count, n, s.m, p.data(), s.r, q.data());
    for (size_t k = 0; k < s.m; ++k)
      for (size_t j = 0; j < s.r; ++j) {
        double want = 0, terms = 0;
        for (size_t i = 0; i < n; ++i) {
          want += at(M, s.count, s.m, i, k) * p[j * n + i];
          terms += std::fabs(at(M, s.count, s.m, i, k) * p[j * n + i]);
        }
        expectClose(q[j * s.m + k], want, terms,
                    s.name() + " Q(" + std::to_string(k) + "," + std::to_string(j) + ")");
      }
  }
}

TEST(Linalg, LowRankApplyMatchesNaive) {
  for (const Shape& s : kShapes) {
    const size_t n = s.n();
    auto p = randomVec(n * s.r, 5);
    auto q = randomVec(s.m * s.r, 6);
    auto x = randomVec(s.count, 7);
    auto res0 = randomVec(s.count, 8);
    for (float scale : {1.0f, 4.0f}) {
      // Separate output, residual accumulated.
      std::vector<float> out(s.count + 1, -7.0f), res = res0;
      cpuLowRankApply(p.data(), q.data(), n, s.m, s.r, s.count, x.data(), scale, out.data(),
                      res.data());
      EXPECT_EQ(out[s.count], -7.0f) << s.name() << ": wrote past count";
      // In place (out aliases x), no residual: the same values.
      std::vector<float> inPlace = x;
      cpuLowRankApply(p.data(), q.data(), n, s.m, s.r, s.count, inPlace.data(), scale,
                      inPlace.data(), nullptr);
      for (size_t t = 0; t < s.count; ++t) {
        const size_t i = t / s.m, k = t % s.m;
        double a = 0, terms = 0;
        for (size_t j = 0; j < s.r; ++j) {
          a += double(p[j * n + i]) * q[j * s.m + k];
          terms += std::fabs(double(p[j * n + i]) * q[j * s.m + k]);
        }
        expectClose(out[t] / scale, a, terms, s.name() + " out[" + std::to_string(t) + "]");
        EXPECT_EQ(inPlace[t], out[t]) << s.name() << " in place differs at " << t;
        // residual += x - a, with a the rounded approximation: exactly out/scale for scale 1.
        const double wantRes = double(res0[t]) + (double(x[t]) - a);
        EXPECT_NEAR(res[t], wantRes, 1e-5 * (std::fabs(res0[t]) + std::fabs(x[t]) + terms))
            << s.name() << " residual[" << t << "]";
      }
    }
  }
}

// Columns of p (n x r panels) orthonormal to 1e-5, and every value finite.
void expectOrthonormal(const std::vector<float>& p, size_t n, size_t r, const std::string& what) {
  for (float v : p) ASSERT_TRUE(std::isfinite(v)) << what << ": a value is not finite";
  for (size_t a = 0; a < r; ++a)
    for (size_t b = 0; b <= a; ++b) {
      double d = 0;
      for (size_t i = 0; i < n; ++i) d += double(p[a * n + i]) * p[b * n + i];
      EXPECT_NEAR(d, a == b ? 1.0 : 0.0, 1e-5)
          << what << ": <col " << a << ", col " << b << "> = " << d;
    }
}

TEST(Linalg, OrthonormalizeKeepsNestedSpans) {
  for (size_t n : {2, 3, 17, 200, 4096})
    for (size_t r : {1, 2, 4}) {
      if (r > n) continue;
      const std::string what = "n=" + std::to_string(n) + " r=" + std::to_string(r);
      auto orig = randomVec(n * r, uint32_t(n * 10 + r), 3.0f);
      auto p = orig;
      cpuOrthonormalize(p.data(), n, r);
      expectOrthonormal(p, n, r, what);
      // Gram-Schmidt: orig column j = sum_{k<=j} R(k,j) p_k, R(k,j) = <p_k, orig_j>, R(j,j) > 0.
      for (size_t j = 0; j < r; ++j) {
        std::vector<double> rebuilt(n, 0.0);
        for (size_t k = 0; k <= j; ++k) {
          double c = 0;
          for (size_t i = 0; i < n; ++i) c += double(p[k * n + i]) * orig[j * n + i];
          if (k == j) {
            EXPECT_GT(c, 0) << what << ": R(" << j << "," << j << ") <= 0";
          }
          for (size_t i = 0; i < n; ++i) rebuilt[i] += c * p[k * n + i];
        }
        double err = 0, norm = 0;
        for (size_t i = 0; i < n; ++i) {
          err += (rebuilt[i] - orig[j * n + i]) * (rebuilt[i] - orig[j * n + i]);
          norm += double(orig[j * n + i]) * orig[j * n + i];
        }
        EXPECT_LE(std::sqrt(err), 1e-5 * std::sqrt(norm))
            << what << ": column " << j << " is not in the span of the first " << j + 1;
      }
    }
}

TEST(Linalg, OrthonormalizeMatchesNormalizedColumnForRankOne) {
  auto p = randomVec(300, 11);
  double norm = 0;
  for (float v : p) norm += double(v) * v;
  norm = std::sqrt(norm);
  auto orig = p;
  cpuOrthonormalize(p.data(), 300, 1);
  for (size_t i = 0; i < 300; ++i) EXPECT_NEAR(p[i], orig[i] / norm, 1e-7);
}

TEST(Linalg, OrthonormalizeDegenerateColumns) {
  const size_t n = 50;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* name;
    size_t r;
    std::vector<float> p;
  };
  auto base = randomVec(n * 3, 21);
  std::vector<Case> cases;
  cases.push_back({"all zero", 3, std::vector<float>(n * 3, 0.0f)});
  {
    auto p = base;
    std::fill(p.begin() + n, p.begin() + 2 * n, 0.0f);
    cases.push_back({"zero middle column", 3, p});
  }
  {
    auto p = base;
    std::copy(p.begin(), p.begin() + n, p.begin() + 2 * n);
    cases.push_back({"repeated column", 3, p});
  }
  {
    auto p = base;
    for (size_t i = 0; i < n; ++i) p[n + i] = 1e-3f * p[i];
    cases.push_back({"scaled copy", 3, p});
  }
  {
    auto p = base;
    p[n + 7] = nan;
    cases.push_back({"NaN in a column", 3, p});
  }
  {
    auto p = base;
    p[5] = inf;
    cases.push_back({"inf in the first column", 3, p});
  }
  {
    auto p = randomVec(4 * 4, 22);
    std::fill(p.begin() + 8, p.end(), 0.0f);
    cases.push_back({"r = n with zero columns", 4, p});
  }
  {
    auto p = base;
    for (float& v : p) v *= 1e-38f;  // subnormal scale: still a direction, not degenerate
    cases.push_back({"tiny values", 3, p});
  }
  for (const Case& c : cases) {
    const size_t rows = c.r == 4 ? 4 : n;
    auto p = c.p;
    cpuOrthonormalize(p.data(), rows, c.r);
    expectOrthonormal(p, rows, c.r, c.name);
    auto again = c.p;
    cpuOrthonormalize(again.data(), rows, c.r);
    EXPECT_EQ(std::memcmp(p.data(), again.data(), p.size() * sizeof(float)), 0)
        << c.name << ": not deterministic";
  }
  // All zero: the replacements are e_0, e_1, e_2 in that order.
  std::vector<float> z(n * 3, 0.0f);
  cpuOrthonormalize(z.data(), n, 3);
  for (size_t j = 0; j < 3; ++j)
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(z[j * n + i], i == j ? 1.0f : 0.0f);
}

TEST(Linalg, SquaredNorm) {
  EXPECT_EQ(cpuSquaredNorm(nullptr, 0), 0.0);
  auto x = randomVec(1001, 31);
  double want = 0;
  for (float v : x) want += double(v) * v;
  EXPECT_NEAR(cpuSquaredNorm(x.data(), x.size()), want, 1e-12 * want);
}

}  // namespace
}  // namespace squeeze::device
