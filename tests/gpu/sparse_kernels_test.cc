// The CUDA kernels of device/sparse.h and device/linalg.h against their CPU twins:
//   - top-k (both modes; the CPU's set padded with zeros to k, cpuPadSelection) and
//     select-at-least give the CPU's index sets and counts exactly, on
//     gradient-like data, data with many ties (the exact fallback), all zeros, NaN and inf, at
//     misaligned starts (the vector pass's head and tail) and from pinned mapped host memory;
//   - gather, densify, scatter-add, sparse feedback's residual and randk's strata: the CPU's bits;
//     the feedback's norms within 1e-10 of the CPU's and the same bits on two runs;
//   - the low-rank products within fp32 tolerance of a double reference, and deterministic;
//     low-rank apply the CPU's bits; Gram-Schmidt orthonormal, close to the CPU's, the same
//     replacements for degenerate columns, deterministic; the squared norm.
// main() is gpu_main.cc: without a GPU the binary exits 77 (skipped).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device/cuda/runtime.h"
#include "device/linalg.h"
#include "device/sparse.h"
#include "tests/common/kernel_inputs.h"

namespace squeeze::device {
namespace {

// Device memory holding a host vector (plus `pad` spare elements for misaligned views).
template <class T>
class Dev {
 public:
  explicit Dev(size_t n, size_t pad = 0) {
    const size_t bytes = std::max<size_t>(n + pad, 1) * sizeof(T);
    void* raw = nullptr;
    EXPECT_EQ(cudaMalloc(&raw, bytes), cudaSuccess);
    ptr_ = static_cast<T*>(raw);
    EXPECT_EQ(cudaMemset(ptr_, 0xab, bytes), cudaSuccess);
    // cudaMemset of device memory returns before it has run, on the legacy default stream, which
    // the kernels' non-blocking stream does not wait for: on the H100 it overwrote densify's
    // zeros (n = 100003, k = 0) after the kernel had written them.
    EXPECT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  }
  explicit Dev(const std::vector<T>& h, size_t offset = 0) : Dev(h.size(), offset) {
    put(h, offset);
  }
  ~Dev() { cudaFree(ptr_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* ptr(size_t offset = 0) const { return ptr_ + offset; }
  void put(const std::vector<T>& h, size_t offset = 0) {
    EXPECT_EQ(cudaMemcpy(ptr_ + offset, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    // Like the memset above: from pageable memory cudaMemcpy returns once the bytes are staged,
    // maybe before they land; on the H100 gpuSquaredNorm read a partly written x (n = 1001).
    EXPECT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  }
  std::vector<T> get(size_t count, size_t offset = 0) const {
    std::vector<T> h(count);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr_ + offset, count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return h;
  }

 private:
  T* ptr_ = nullptr;
};

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The data kinds top-k must agree on.
enum class Kind { kGradient, kTies, kFewValues, kZeros, kSpecials };
const Kind kKinds[] = {Kind::kGradient, Kind::kTies, Kind::kFewValues, Kind::kZeros,
                       Kind::kSpecials};

std::string kindName(Kind k) {
  const char* names[] = {"gradient", "ties", "few values", "zeros", "NaN/inf"};
  return names[static_cast<int>(k)];
}

std::vector<float> makeData(Kind kind, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<float> x(n, 0.0f);
  if (kind == Kind::kZeros) return x;
  for (float& v : x) {
    const int p = pick(gen);
    v = normal(gen);
    if (p == 0) v = 0.0f;
    if (p == 1) v *= 100.0f;
    if (kind == Kind::kTies) v = std::round(v * 4.0f) / 4.0f;  // many equal magnitudes
    if (kind == Kind::kFewValues) v = float(p % 3) * (p % 2 ? -1.0f : 1.0f);  // masses of ties
  }
  if (kind == Kind::kSpecials && n > 0) {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float tiny = std::numeric_limits<float>::denorm_min();
    const float big = std::numeric_limits<float>::max();
    const float specials[] = {inf, -inf, nan, -nan, tiny, -0.0f, big};
    for (size_t s = 0; s < 3 * std::size(specials); ++s)
      x[(s * 7919 + 13) % n] = specials[s % std::size(specials)];
  }
  return x;
}

// Up to kOneBlockSelectMax (1 << 17) one block selects; past it, the multi-kernel routes.
const size_t kTopkCounts[] = {1, 7, 1000, 32767, 32768, 100003, 1u << 17, (1u << 17) + 1,
                              (1u << 20) + 3};
const double kRatios[] = {0.0001, 0.001, 0.01, 0.1, 0.5, 1.0};

// ---- sparse -------------------------------------------------------------------------------------

TEST(GpuSparse, SelectTopkMatchesTheCpu) {
  cuda::Stream stream;
  for (size_t n : kTopkCounts)
    for (Kind kind : kKinds) {
      const std::vector<float> x = makeData(kind, n, static_cast<uint32_t>(n + int(kind)));
      const size_t offset = n % 4;  // misaligned starts for the vector pass
      Dev<float> dx(x, offset);
      for (double ratio : kRatios)
        for (bool sampled : {true, false}) {
          const size_t k = std::max<size_t>(1, static_cast<size_t>(ratio * double(n)));
          const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(k) + " " +
                                   kindName(kind) + (sampled ? " sampled" : " exact");
          std::vector<uint32_t> want(k);  // the CPU's set, padded with zeros as the GPU's
          want.resize(cpuPadSelection(x.data(), n, want.data(),
                                      cpuSelectTopk(x.data(), n, k, sampled, want.data()), k));
          Dev<uint32_t> idx(k);
          const size_t got = gpuSelectTopk(dx.ptr(offset), n, k, sampled, idx.ptr(), stream.get());
          ASSERT_EQ(got, want.size()) << what;  // known before the selection has run
          ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess) << what;
          EXPECT_EQ(idx.get(got), want) << what;
        }
    }
}

TEST(GpuSparse, SelectTopkFromPinnedHostMemory) {
  cuda::Stream stream;
  const size_t n = 100003, k = 100;
  const std::vector<float> x = makeData(Kind::kGradient, n, 5);
  cuda::PinnedBuffer px(n * sizeof(float)), pidx(k * sizeof(uint32_t));
  std::memcpy(px.data(), x.data(), n * sizeof(float));
  for (bool sampled : {true, false}) {
    std::vector<uint32_t> want(k);
    want.resize(cpuPadSelection(x.data(), n, want.data(),
                                cpuSelectTopk(x.data(), n, k, sampled, want.data()), k));
    auto* out = static_cast<uint32_t*>(pidx.data());
    const size_t got =
        gpuSelectTopk(static_cast<const float*>(px.data()), n, k, sampled, out, stream.get());
    ASSERT_EQ(got, want.size());
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    EXPECT_EQ(std::vector<uint32_t>(out, out + got), want);
  }
}

TEST(GpuSparse, SelectAtLeastMatchesTheCpu) {
  cuda::Stream stream;
  for (size_t n : {0ul, 1ul, 3ul, 4ul, 5ul, 17ul, 129ul, 1000ul, 100003ul})
    for (Kind kind : {Kind::kGradient, Kind::kSpecials, Kind::kZeros})
      for (size_t offset : {0ul, 1ul, 3ul}) {
        const std::vector<float> x = makeData(kind, n, static_cast<uint32_t>(n * 3 + offset));
        Dev<float> dx(x, offset);
        for (float t : {0.0f, 0.01f, 1.0f, 2.5f, 1e30f}) {
          const uint32_t key = magnitudeKey(t);
          size_t matches = 0;
          for (float v : x) matches += magnitudeKey(v) >= std::max<uint32_t>(key, 1);
          for (size_t cap : {matches, matches + 1, matches ? matches - 1 : 0}) {
            const std::string what = "n=" + std::to_string(n) + " " + kindName(kind) +
                                     " offset=" + std::to_string(offset) +
                                     " t=" + std::to_string(t) + " cap=" + std::to_string(cap);
            std::vector<uint32_t> want(cap + kSelectSlack);
            const size_t cpu = cpuSelectAtLeast(x.data(), n, key, want.data(), cap);
            Dev<uint32_t> idx(cap + kSelectSlack);
            const size_t gpu =
                gpuSelectAtLeast(dx.ptr(offset), n, key, idx.ptr(), cap, stream.get());
            ASSERT_EQ(gpu, cpu) << what;
            if (cpu != static_cast<size_t>(-1)) {
              want.resize(cpu);
              EXPECT_EQ(idx.get(cpu), want) << what;
            }
          }
        }
      }
}

TEST(GpuSparse, GatherDensifyScatterAddMatchTheCpu) {
  cuda::Stream stream;
  for (size_t n : {1ul, 1000ul, 100003ul})
    for (size_t k : {0ul, 1ul, 37ul, 1000ul}) {
      if (k > n) continue;
      const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(k);
      const std::vector<float> x = makeData(Kind::kSpecials, n, 11);
      const std::vector<float> local = makeData(Kind::kGradient, n, 12);
      std::vector<uint32_t> idx(k);
      cpuRandomStrata(3, 4, 5, n, k, idx.data());
      const std::vector<float> vals = makeData(Kind::kGradient, k, 13);
      Dev<float> dx(x), dlocal(local), dvals(vals), dout(n);
      Dev<uint32_t> didx(idx);

      std::vector<float> want(k);
      cpuGather(x.data(), idx.data(), k, want.data());
      Dev<float> gathered(k);
      gpuGather(dx.ptr(), didx.ptr(), k, gathered.ptr(), stream.get());
      stream.synchronize("gather");
      EXPECT_TRUE(sameBits(gathered.get(k), want)) << what << ": gather";

      want.assign(n, 1.0f);
      cpuDensify(idx.data(), vals.data(), k, want.data(), n);
      gpuDensify(didx.ptr(), dvals.ptr(), k, dout.ptr(), n, stream.get());
      stream.synchronize("densify");
      EXPECT_TRUE(sameBits(dout.get(n), want)) << what << ": densify";

      want.assign(n, 0.0f);
      cpuScatterAdd(want.data(), local.data(), n, idx.data(), vals.data(), k);
      gpuScatterAdd(dout.ptr(), dlocal.ptr(), n, didx.ptr(), dvals.ptr(), k, stream.get());
      stream.synchronize("scatter-add");
      EXPECT_TRUE(sameBits(dout.get(n), want)) << what << ": scatter-add";
      gpuScatterAdd(dlocal.ptr(), dlocal.ptr(), n, didx.ptr(), dvals.ptr(), k, stream.get());
      stream.synchronize("scatter-add in place");
      EXPECT_TRUE(sameBits(dlocal.get(n), want)) << what << ": scatter-add in place";
    }
}

TEST(GpuSparse, SparseFeedbackMatchesTheCpu) {
  cuda::Stream stream;
  for (size_t n : {1ul, 4095ul, 4096ul, 4097ul, 100003ul})
    for (size_t k : {0ul, 1ul, 100ul, 4096ul}) {
      if (k > n) continue;
      const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(k);
      const std::vector<float> x = makeData(Kind::kGradient, n, 21);
      const std::vector<float> residual0 = makeData(Kind::kGradient, n, 22);
      std::vector<uint32_t> idx(k);
      cpuRandomStrata(7, 8, 9, n, k, idx.data());
      std::vector<float> want = residual0;
      double in = 1.0, sent = 2.0;
      cpuSparseFeedback(x.data(), n, idx.data(), k, want.data(), &in, &sent);

      Dev<float> dx(x), dres(residual0);
      Dev<uint32_t> didx(idx);
      double gin = 1.0, gsent = 2.0;
      gpuSparseFeedback(dx.ptr(), n, didx.ptr(), k, dres.ptr(), &gin, &gsent, nullptr,
                        stream.get());
      EXPECT_TRUE(sameBits(dres.get(n), want)) << what << ": residual";
      EXPECT_NEAR(gin, in, 1e-10 * in) << what;
      EXPECT_NEAR(gsent, sent, 1e-10 * sent) << what;

      // Norms only (no residual), twice: the same bits.
      double a = 0, b = 0, a2 = 0, b2 = 0;
      gpuSparseFeedback(dx.ptr(), n, didx.ptr(), k, nullptr, &a, &b, nullptr, stream.get());
      gpuSparseFeedback(dx.ptr(), n, didx.ptr(), k, nullptr, &a2, &b2, nullptr, stream.get());
      EXPECT_EQ(std::memcmp(&a, &a2, sizeof a), 0) << what;
      EXPECT_EQ(std::memcmp(&b, &b2, sizeof b), 0) << what;
      EXPECT_NEAR(a, in - 1.0, 1e-10 * in) << what;

      // Sums added on the device (deviceSums), twice, with no wait: the same bits, doubled.
      Dev<double> sums(2);
      ASSERT_EQ(cudaMemsetAsync(sums.ptr(), 0, 2 * sizeof(double), stream.get()), cudaSuccess);
      double untouched = 5.0;
      gpuSparseFeedback(dx.ptr(), n, didx.ptr(), k, nullptr, &untouched, nullptr, sums.ptr(),
                        stream.get());
      gpuSparseFeedback(dx.ptr(), n, didx.ptr(), k, nullptr, &untouched, nullptr, sums.ptr(),
                        stream.get());
      stream.synchronize("feedback sums");
      const std::vector<double> got = sums.get(2);
      EXPECT_EQ(got[0], a + a) << what;
      EXPECT_EQ(got[1], b + b) << what;
      EXPECT_EQ(untouched, 5.0) << what;

      // Residual only: enqueued, no host values.
      Dev<float> dres2(residual0);
      gpuSparseFeedback(dx.ptr(), n, didx.ptr(), k, dres2.ptr(), nullptr, nullptr, nullptr,
                        stream.get());
      stream.synchronize("feedback");
      EXPECT_TRUE(sameBits(dres2.get(n), want)) << what << ": residual only";
    }
}

TEST(GpuSparse, RandomStrataMatchTheCpu) {
  cuda::Stream stream;
  for (size_t n : {1ul, 7ul, 1000ul, 100000ul, 4000000000ul})
    for (size_t k : {0ul, 1ul, 3ul, 999ul, 1000ul, 65536ul}) {
      if (k > n) continue;
      std::vector<uint32_t> want(k);
      cpuRandomStrata(123, 45, 6789, n, k, want.data());
      Dev<uint32_t> idx(k);
      gpuRandomStrata(123, 45, 6789, n, k, idx.ptr(), stream.get());
      stream.synchronize("strata");
      EXPECT_EQ(idx.get(k), want) << "n=" << n << " k=" << k;
    }
}

// ---- linalg -------------------------------------------------------------------------------------

using kernel_inputs::at;
using kernel_inputs::randomVec;
using kernel_inputs::Shape;

const Shape kShapes[] = {{1, 1, 1},
                         {12, 4, 2},
                         {13, 4, 2},
                         {1031, 33, 2},
                         {1031, 33, 5},
                         {4096, 64, 4},
                         {999, 1, 3},
                         {999, 999, 2},
                         {5000, 700, 3},
                         {37, 5, 4},
                         {(1 << 20) + 5, 1024, 4},
                         {300000, 547, 17}};


// fp32 GEMM tiles: |error| <= 1e-4 of the sum of |terms| (the CPU's double sums are held to 1e-6).
constexpr double kGemmTol = 1e-4;

TEST(GpuLinalg, ProductsMatchADoubleReferenceAndAreDeterministic) {
  cuda::Stream stream;
  for (const Shape& s : kShapes) {
    const size_t n = s.n();
    const auto M = randomVec(s.count, 1), q = randomVec(s.m * s.r, 2), p = randomVec(n * s.r, 3);
    Dev<float> dM(M), dq(q), dp(p), outP(n * s.r), outQ(s.m * s.r);
    gpuMatMulPanels(dM.ptr(), s.count, n, s.m, dq.ptr(), s.r, outP.ptr(), stream.get());
    gpuMatTMulPanels(dM.ptr(), s.count, n, s.m, dp.ptr(), s.r, outQ.ptr(), stream.get());
    stream.synchronize("products");
    const auto gotP = outP.get(n * s.r), gotQ = outQ.get(s.m * s.r);
    for (size_t j = 0; j < s.r; ++j) {
      for (size_t i = 0; i < n; ++i) {
        double want = 0, terms = 0;
        for (size_t k = 0; k < s.m; ++k) {
          want += at(M, s.count, s.m, i, k) * q[j * s.m + k];
          terms += std::fabs(at(M, s.count, s.m, i, k) * q[j * s.m + k]);
        }
        ASSERT_LE(std::fabs(gotP[j * n + i] - want), kGemmTol * terms + 1e-30)
            << s.name() << " P(" << i << "," << j << ")";
      }
      for (size_t k = 0; k < s.m; ++k) {
        double want = 0, terms = 0;
        for (size_t i = 0; i < n; ++i) {
          want += at(M, s.count, s.m, i, k) * p[j * n + i];
          terms += std::fabs(at(M, s.count, s.m, i, k) * p[j * n + i]);
        }
        ASSERT_LE(std::fabs(gotQ[j * s.m + k] - want), kGemmTol * terms + 1e-30)
            << s.name() << " Q(" << k << "," << j << ")";
      }
    }
    // Again, after other work on the handle: the same bits.
    gpuMatTMulPanels(dM.ptr(), s.count, n, s.m, dp.ptr(), s.r, outQ.ptr(), stream.get());
    gpuMatMulPanels(dM.ptr(), s.count, n, s.m, dq.ptr(), s.r, outP.ptr(), stream.get());
    stream.synchronize("products again");
    EXPECT_TRUE(sameBits(outP.get(n * s.r), gotP)) << s.name() << ": P not deterministic";
    EXPECT_TRUE(sameBits(outQ.get(s.m * s.r), gotQ)) << s.name() << ": Q not deterministic";
  }
}

TEST(GpuLinalg, LowRankApplyIsTheCpusBits) {
  cuda::Stream stream;
  for (const Shape& s : kShapes) {
    const size_t n = s.n();
    const auto p = randomVec(n * s.r, 5), q = randomVec(s.m * s.r, 6), x = randomVec(s.count, 7);
    const auto res0 = randomVec(s.count, 8);
    for (float scale : {1.0f, 4.0f}) {
      std::vector<float> out(s.count), res = res0;
      cpuLowRankApply(p.data(), q.data(), n, s.m, s.r, s.count, x.data(), scale, out.data(),
                      res.data());
      Dev<float> dp(p), dq(q), dx(x), dres(res0), dout(s.count + 1);
      gpuLowRankApply(dp.ptr(), dq.ptr(), n, s.m, s.r, s.count, dx.ptr(), scale, dout.ptr(),
                      dres.ptr(), stream.get());
      // In place, no residual.
      gpuLowRankApply(dp.ptr(), dq.ptr(), n, s.m, s.r, s.count, dx.ptr(), scale, dx.ptr(), nullptr,
                      stream.get());
      stream.synchronize("low-rank apply");
      const auto got = dout.get(s.count + 1);
      EXPECT_EQ(bits(got[s.count]), 0xababababu) << s.name() << ": wrote past count";
      EXPECT_TRUE(sameBits(std::vector<float>(got.begin(), got.end() - 1), out)) << s.name();
      EXPECT_TRUE(sameBits(dres.get(s.count), res)) << s.name() << ": residual";
      EXPECT_TRUE(sameBits(dx.get(s.count), out)) << s.name() << ": in place";
    }
  }
}

void expectOrthonormal(const std::vector<float>& p, size_t n, size_t r, const std::string& what) {
  for (float v : p) ASSERT_TRUE(std::isfinite(v)) << what << ": a value is not finite";
  for (size_t a = 0; a < r; ++a)
    for (size_t b = 0; b <= a; ++b) {
      double d = 0;
      for (size_t i = 0; i < n; ++i) d += double(p[a * n + i]) * p[b * n + i];
      EXPECT_NEAR(d, a == b ? 1.0 : 0.0, 1e-5) << what << ": <" << a << ", " << b << ">";
    }
}

TEST(GpuLinalg, OrthonormalizeIsCloseToTheCpuAndDeterministic) {
  cuda::Stream stream;
  for (size_t n : {2ul, 3ul, 17ul, 200ul, 4096ul, 100000ul})
    for (size_t r : {1ul, 2ul, 4ul, 19ul}) {
      if (r > n) continue;
      const std::string what = "n=" + std::to_string(n) + " r=" + std::to_string(r);
      const auto orig = randomVec(n * r, uint32_t(n * 10 + r), 3.0f);
      auto cpu = orig;
      cpuOrthonormalize(cpu.data(), n, r);
      Dev<float> dp(orig);
      gpuOrthonormalize(dp.ptr(), n, r, stream.get());
      stream.synchronize("orthonormalize");
      const auto gpu = dp.get(n * r);
      expectOrthonormal(gpu, n, r, what);
      for (size_t t = 0; t < n * r; ++t) ASSERT_NEAR(gpu[t], cpu[t], 1e-4) << what << " at " << t;
      dp.put(orig);
      gpuOrthonormalize(dp.ptr(), n, r, stream.get());
      stream.synchronize("orthonormalize again");
      EXPECT_TRUE(sameBits(dp.get(n * r), gpu)) << what << ": not deterministic";
    }
}

TEST(GpuLinalg, OrthonormalizeReplacesDegenerateColumnsAsTheCpu) {
  cuda::Stream stream;
  const size_t n = 50;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto base = randomVec(n * 3, 21);
  struct Case {
    const char* name;
    size_t rows, r;
    std::vector<float> p;
  };
  std::vector<Case> cases;
  cases.push_back({"all zero", n, 3, std::vector<float>(n * 3, 0.0f)});
  auto p = base;
  std::fill(p.begin() + n, p.begin() + 2 * n, 0.0f);
  cases.push_back({"zero middle column", n, 3, p});
  p = base;
  std::copy(p.begin(), p.begin() + n, p.begin() + 2 * n);
  cases.push_back({"repeated column", n, 3, p});
  p = base;
  p[n + 7] = nan;
  cases.push_back({"NaN in a column", n, 3, p});
  p = base;
  p[5] = inf;
  cases.push_back({"inf in the first column", n, 3, p});
  p = randomVec(16, 22);
  std::fill(p.begin() + 8, p.end(), 0.0f);
  cases.push_back({"r = n with zero columns", 4, 4, p});
  for (const Case& c : cases) {
    auto cpu = c.p;
    cpuOrthonormalize(cpu.data(), c.rows, c.r);
    Dev<float> dp(c.p);
    gpuOrthonormalize(dp.ptr(), c.rows, c.r, stream.get());
    stream.synchronize("orthonormalize");
    const auto gpu = dp.get(c.p.size());
    expectOrthonormal(gpu, c.rows, c.r, c.name);
    // The same replacement columns (the same unit vector chosen), up to rounding.
    for (size_t t = 0; t < gpu.size(); ++t) ASSERT_NEAR(gpu[t], cpu[t], 1e-4) << c.name << " " << t;
  }
  // All zero: exactly e_0, e_1, e_2.
  Dev<float> z(std::vector<float>(n * 3, 0.0f));
  gpuOrthonormalize(z.ptr(), n, 3, stream.get());
  stream.synchronize("orthonormalize zeros");
  const auto got = z.get(n * 3);
  for (size_t j = 0; j < 3; ++j)
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[j * n + i], i == j ? 1.0f : 0.0f);
}

TEST(GpuLinalg, SquaredNorm) {
  cuda::Stream stream;
  EXPECT_EQ(gpuSquaredNorm(nullptr, 0, stream.get()), 0.0);
  for (size_t n : {1ul, 1001ul, 5000001ul}) {
    const auto x = randomVec(n, 31);
    Dev<float> dx(x);
    const double want = cpuSquaredNorm(x.data(), n);
    const double a = gpuSquaredNorm(dx.ptr(), n, stream.get());
    const double b = gpuSquaredNorm(dx.ptr(), n, stream.get());
    EXPECT_NEAR(a, want, 1e-10 * want) << n;
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << n << ": not deterministic";
  }
}

}  // namespace
}  // namespace squeeze::device
