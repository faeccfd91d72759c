// Inputs the kernel tests share between the CPU side (tests/unit/) and the GPU side (tests/gpu/),
// so the GPU twins are held to exactly the data the CPU kernels are tested on.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace squeeze::kernel_inputs {

// Gradient-like values for the quantizers: magnitudes over six decades, runs of exact zeros (so
// some blocks are all zero), and runs of one sign (so some 1-bit columns have an empty side).
inline std::vector<float> gradientLike(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    float v = normal(gen) * std::pow(10.0f, static_cast<float>(int((i / 97) % 7) - 3));
    if ((i / 300) % 7 == 3) v = 0;
    if ((i / 1000) % 5 == 2) v = std::fabs(v);
    if ((i / 1000) % 5 == 4) v = -std::fabs(v);
    x[i] = v;
  }
  return x;
}

// PowerSGD's matrix view of a tensor of `count` values: m columns, n() rows (the last one
// partial), rank r.
struct Shape {
  size_t count, m, r;
  size_t n() const { return (count + m - 1) / m; }
  std::string name() const {
    return "count=" + std::to_string(count) + " m=" + std::to_string(m) + " r=" + std::to_string(r);
  }
};

inline std::vector<float> randomVec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// M's element (i, k) as the kernels see it: zero past count.
inline double at(const std::vector<float>& M, size_t count, size_t m, size_t i, size_t k) {
  const size_t t = i * m + k;
  return t < count ? double(M[t]) : 0.0;
}

}  // namespace squeeze::kernel_inputs
