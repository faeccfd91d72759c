// The batched kernels of device/batch.h against their CPU twins, chunk by chunk: one call runs
// 35 chunks of sizes from 0 to 40,000 values (more than one launch's kBatchJobs, and grids of
// different widths in one launch), and each chunk's outputs must be the CPU's on that chunk alone,
// bit for bit: the quantizers' scales, codes, residuals, decodes and decode-adds, the casts and
// the fused cast feedback, the one-block top-k selection, gather, densify, scatter-add, sparse
// feedback and the index check. The sums a batch adds on the device are the single kernels'
// (the cast feedback's the CPU's bits; sparse feedback's those of gpuSparseFeedback chunk after
// chunk; the quantizers' to rounding, as their single kernels'). On the CUDA stand-in the batch
// entry points run the CPU twins; on a GPU this is what checks the tables and grid rows.
// main() is gpu_main.cc: without a GPU the binary exits 77 (skipped).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device/batch.h"
#include "device/cast.h"
#include "device/cuda/runtime.h"
#include "device/handle_kernels.h"
#include "device/quantize.h"
#include "device/sparse.h"

namespace squeeze::device {
namespace {

constexpr size_t kJobs = kBatchJobs + 3;

size_t jobSize(size_t j) {
  static const size_t kSizes[] = {1, 7, 1000, 40000, 0, 4099, 1024, 333};
  return kSizes[j % 8] + (kSizes[j % 8] ? j : 0);
}

// Device memory holding a host vector's bytes (at least one byte, so every job has a pointer).
template <class T>
struct Dev {
  explicit Dev(const std::vector<T>& h)
      : buf(std::max<size_t>(1, h.size()) * sizeof(T)), n(h.size()) {
    if (n) {
      cuda::check(cudaMemcpy(buf.data(), h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "up");
      // From pageable memory cudaMemcpy may return before the copy lands (it is staged), and the
      // kernels run on non-blocking streams, which do not wait for the legacy one.
      cuda::check(cudaStreamSynchronize(cudaStreamLegacy), "up");
    }
  }
  T* ptr() const { return static_cast<T*>(buf.data()); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    if (n)
      cuda::check(cudaMemcpy(h.data(), buf.data(), n * sizeof(T), cudaMemcpyDeviceToHost), "down");
    return h;
  }
  cuda::DeviceBuffer buf;
  size_t n;
};

std::vector<float> randomFloats(size_t n, uint64_t seed, double zeros = 0.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> v(n);
  for (float& f : v) f = u(gen) < zeros ? 0.0f : normal(gen);
  return v;
}

template <class T>
void expectBits(const std::vector<T>& gpu, const std::vector<T>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  if (gpu.empty()) return;
  EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), gpu.size() * sizeof(T)), 0) << what;
}

struct QuantCase {
  QuantSetting s;
  size_t scalesPerBlock, bits;
  const char* name;
};

TEST(GpuBatch, QuantizersMatchTheCpuChunkByChunk) {
  cuda::Stream stream;
  const QuantCase cases[] = {
      {{QuantKind::kInt8, 256}, 1, 8, "int8"},
      {{QuantKind::kQsgd, 512, 127, 8, 0x5eed}, 1, 8, "qsgd8"},
      {{QuantKind::kQsgd, 512, 7, 4, 0x5eed}, 1, 4, "qsgd4"},
      {{QuantKind::kOnebit, 256}, 2, 1, "onebit"},
      {{QuantKind::kTerngrad, 256, 0, 0, 0xfeed}, 1, 2, "terngrad"},
  };
  for (const QuantCase& c : cases) {
    std::vector<Dev<float>> x, residual, out, local;
    std::vector<Dev<uint8_t>> scales, codes;
    std::vector<QuantEncodeJob> enc;
    std::vector<QuantDecodeJob> dec, decAdd;
    std::vector<std::vector<float>> hx, hres, hlocal;
    size_t index0 = 0;
    for (size_t j = 0; j < kJobs; ++j) {
      const size_t n = jobSize(j), blocks = blockCount(n, c.s.block);
      hx.push_back(randomFloats(n, 10 * j + 1));
      hres.push_back(randomFloats(n, 10 * j + 2));
      hlocal.push_back(randomFloats(n, 10 * j + 3));
      x.emplace_back(hx.back());
      residual.emplace_back(hres.back());
      local.emplace_back(hlocal.back());
      out.emplace_back(std::vector<float>(n));
      // The scales one byte off alignment, as a payload's after its header may be.
      scales.emplace_back(std::vector<uint8_t>(1 + 4 * c.scalesPerBlock * blocks));
      codes.emplace_back(std::vector<uint8_t>(blocks * packedBytes(c.s.block, c.bits)));
      enc.push_back(
          {x[j].ptr(), n, scales[j].ptr() + 1, codes[j].ptr(), residual[j].ptr(), index0});
      dec.push_back({scales[j].ptr() + 1, codes[j].ptr(), n, out[j].ptr(), nullptr});
      decAdd.push_back({scales[j].ptr() + 1, codes[j].ptr(), n, local[j].ptr(), local[j].ptr()});
      index0 += n;
    }
    Dev<double> norms(std::vector<double>(2, 0.0));
    gpuQuantEncodeBatch(c.s, enc.data(), enc.size(), true, norms.ptr(), stream.get());
    gpuQuantDecodeBatch(c.s, dec.data(), dec.size(), false, stream.get());
    gpuQuantDecodeBatch(c.s, decAdd.data(), decAdd.size(), true, stream.get());
    stream.synchronize("the batch");
    Norms cpuNorms;
    for (size_t j = 0; j < kJobs; ++j) {
      const size_t n = hx[j].size();
      const std::string at =
          std::string(c.name) + " chunk " + std::to_string(j) + " of " + std::to_string(n);
      std::vector<uint8_t> s(scales[j].n), k(codes[j].n);
      std::vector<float> r = hres[j], o(n), l = hlocal[j];
      Feedback fb{r.data(), &cpuNorms};
      cpuQuantEncodeJob(c.s, {hx[j].data(), n, s.data() + 1, k.data(), nullptr, enc[j].index0},
                        &fb);
      cpuQuantDecodeJob(c.s, {s.data() + 1, k.data(), n, o.data(), nullptr}, false);
      cpuQuantDecodeJob(c.s, {s.data() + 1, k.data(), n, l.data(), l.data()}, true);
      expectBits(scales[j].get(), s, at + ": scales");
      expectBits(codes[j].get(), k, at + ": codes");
      expectBits(residual[j].get(), r, at + ": residual");
      expectBits(out[j].get(), o, at + ": decode");
      expectBits(local[j].get(), l, at + ": decode-add in place");
    }
    const std::vector<double> got = norms.get();
    EXPECT_NEAR(got[0], cpuNorms.inputSq, 1e-9 * cpuNorms.inputSq) << c.name;
    EXPECT_NEAR(got[1], cpuNorms.sentSq, 1e-9 * cpuNorms.sentSq) << c.name;
  }
}

TEST(GpuBatch, CastsAndCastFeedbackMatchTheCpuChunkByChunk) {
  cuda::Stream stream;
  for (Narrow kind : {Narrow::kHalf, Narrow::kBfloat16}) {
    std::vector<Dev<float>> x, residual, wide, local;
    std::vector<Dev<uint16_t>> narrow, payload;
    std::vector<CastJob> narrows, widens, widenAdds;
    std::vector<CastFeedbackJob> feedbacks;
    std::vector<std::vector<float>> hx, hres, hlocal;
    for (size_t j = 0; j < kJobs; ++j) {
      const size_t n = jobSize(j);
      hx.push_back(randomFloats(n, 7 * j + 1));
      hres.push_back(randomFloats(n, 7 * j + 2));
      hlocal.push_back(randomFloats(n, 7 * j + 3));
      x.emplace_back(hx.back());
      residual.emplace_back(hres.back());
      local.emplace_back(hlocal.back());
      wide.emplace_back(std::vector<float>(n));
      narrow.emplace_back(std::vector<uint16_t>(n));
      payload.emplace_back(std::vector<uint16_t>(n));
      narrows.push_back({x[j].ptr(), narrow[j].ptr(), nullptr, n});
      widens.push_back({narrow[j].ptr(), wide[j].ptr(), nullptr, n});
      widenAdds.push_back({narrow[j].ptr(), local[j].ptr(), local[j].ptr(), n});
      feedbacks.push_back({x[j].ptr(), payload[j].ptr(), n, residual[j].ptr()});
    }
    Dev<double> sums(std::vector<double>(2, 0.0));
    gpuNarrowBatch(kind, narrows.data(), narrows.size(), stream.get());
    gpuWidenBatch(kind, widens.data(), widens.size(), false, stream.get());
    gpuWidenBatch(kind, widenAdds.data(), widenAdds.size(), true, stream.get());
    gpuCastFeedbackBatch(kind, feedbacks.data(), feedbacks.size(), sums.ptr(), stream.get());
    stream.synchronize("the batch");
    double in = 0, sent = 0;
    for (size_t j = 0; j < kJobs; ++j) {
      const size_t n = hx[j].size();
      const std::string at = std::string(kind == Narrow::kHalf ? "fp16" : "bf16") + " chunk " +
                             std::to_string(j) + " of " + std::to_string(n);
      std::vector<uint16_t> h(n);
      std::vector<float> w(n), l = hlocal[j], r = hres[j];
      cpuNarrow(kind, hx[j].data(), h.data(), n);
      cpuWiden(kind, h.data(), w.data(), n);
      cpuWidenAdd(kind, l.data(), l.data(), h.data(), n);
      double a = 0, b = 0;
      cpuFeedbackPass(hx[j].data(), w.data(), n, r.data(), &a, &b);
      in += a;  // the device adds each chunk's sums in turn
      sent += b;
      expectBits(narrow[j].get(), h, at + ": narrow");
      expectBits(wide[j].get(), w, at + ": widen");
      expectBits(local[j].get(), l, at + ": widen-add in place");
      expectBits(payload[j].get(), h, at + ": cast feedback's payload");
      expectBits(residual[j].get(), r, at + ": cast feedback's residual");
    }
    expectBits(sums.get(), std::vector<double>{in, sent}, "cast feedback's norms");
  }
}

TEST(GpuBatch, SparseKernelsMatchTheCpuChunkByChunk) {
  cuda::Stream stream;
  std::vector<Dev<float>> x, residual, vals, dense, added, local;
  std::vector<Dev<uint32_t>> idx;
  std::vector<Dev<unsigned long long>> found;
  std::vector<SelectJob> selects;
  std::vector<std::vector<float>> hx, hres, hlocal;
  std::vector<size_t> ks;
  for (size_t j = 0; j < kJobs; ++j) {
    const size_t n = jobSize(j), k = n ? std::min(n, n / 100 + 1 + j % 3) : 0;
    hx.push_back(randomFloats(n, 3 * j + 1, j % 4 == 1 ? 0.995 : 0.1));  // some with few nonzeros
    hres.push_back(randomFloats(n, 3 * j + 2));
    hlocal.push_back(randomFloats(n, 3 * j + 3));
    ks.push_back(k);
    x.emplace_back(hx.back());
    residual.emplace_back(hres.back());
    local.emplace_back(hlocal.back());
    idx.emplace_back(std::vector<uint32_t>(k));
    vals.emplace_back(std::vector<float>(k));
    dense.emplace_back(std::vector<float>(n, 9.0f));
    added.emplace_back(std::vector<float>(n));
    found.emplace_back(std::vector<unsigned long long>(2, ~0ull));  // none, as the batch wants
    selects.push_back({x[j].ptr(), n, k, idx[j].ptr()});
  }
  gpuSelectTopkBatch(selects.data(), selects.size(), stream.get());
  std::vector<GatherJob> gathers;
  std::vector<ScatterJob> densifies, scatterAdds;
  std::vector<SparseFeedbackJob> feedbacks;
  std::vector<IndexCheckJob> checks;
  // Odd chunks' checks report to pinned memory (as a context's batched checks do), and leave
  // their found pair reset for the next check.
  unsigned long long* reports = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&reports), kJobs * 2 * sizeof *reports),
            cudaSuccess);
  std::fill(reports, reports + kJobs * 2, 0ull);
  for (size_t j = 0; j < kJobs; ++j) {
    const size_t n = hx[j].size(), k = ks[j];
    gathers.push_back({x[j].ptr(), idx[j].ptr(), k, vals[j].ptr()});
    densifies.push_back({idx[j].ptr(), vals[j].ptr(), k, dense[j].ptr(), nullptr, n});
    // Out of place on even chunks, in place on odd ones.
    float* out = j % 2 ? local[j].ptr() : added[j].ptr();
    scatterAdds.push_back({idx[j].ptr(), vals[j].ptr(), k, out, local[j].ptr(), n});
    feedbacks.push_back({x[j].ptr(), n, idx[j].ptr(), k, residual[j].ptr()});
    // Every third list checked against a count one short of the chunk: its last index may fail.
    checks.push_back(
        {idx[j].ptr(), k, j % 3 ? n : n - 1, found[j].ptr(), j % 2 ? reports + 2 * j : nullptr});
  }
  gpuGatherBatch(gathers.data(), gathers.size(), stream.get());
  gpuDensifyBatch(densifies.data(), densifies.size(), stream.get());
  gpuScatterAddBatch(scatterAdds.data(), scatterAdds.size(), stream.get());
  Dev<double> sums(std::vector<double>(2, 0.0));
  gpuSparseFeedbackBatch(feedbacks.data(), feedbacks.size(), sums.ptr(), stream.get());
  gpuFindBadIndexBatch(checks.data(), checks.size(), stream.get());
  stream.synchronize("the batch");
  // The single kernel's sums, chunk after chunk, on copies of the inputs.
  Dev<double> singleSums(std::vector<double>(2, 0.0));
  std::vector<Dev<float>> residual2;
  for (size_t j = 0; j < kJobs; ++j) {
    residual2.emplace_back(hres[j]);
    gpuSparseFeedback(x[j].ptr(), hx[j].size(), idx[j].ptr(), ks[j], residual2[j].ptr(), nullptr,
                      nullptr, singleSums.ptr(), stream.get());
  }
  stream.synchronize("the batch");
  for (size_t j = 0; j < kJobs; ++j) {
    const size_t n = hx[j].size(), k = ks[j];
    const std::string at =
        "chunk " + std::to_string(j) + " of " + std::to_string(n) + ", k " + std::to_string(k);
    std::vector<uint32_t> i(k);
    if (k)
      cpuPadSelection(hx[j].data(), n, i.data(), cpuSelectTopk(hx[j].data(), n, k, false, i.data()),
                      k);
    std::vector<float> v(k), d(n), a = hlocal[j], r = hres[j];
    cpuGather(hx[j].data(), i.data(), k, v.data());
    cpuDensify(i.data(), v.data(), k, d.data(), n);
    cpuScatterAdd(a.data(), a.data(), n, i.data(), v.data(), k);
    cpuSparseFeedback(hx[j].data(), n, i.data(), k, r.data(), nullptr, nullptr);
    expectBits(idx[j].get(), i, at + ": selection");
    expectBits(vals[j].get(), v, at + ": gather");
    expectBits(dense[j].get(), d, at + ": densify");
    expectBits((j % 2 ? local[j] : added[j]).get(), a, at + ": scatter-add");
    expectBits(residual[j].get(), r, at + ": feedback's residual");
    const size_t count = j % 3 ? n : n - 1;
    const size_t bad = k ? cpuFirstBadIndex(i.data(), k, count) : SIZE_MAX;
    if (k) {
      const std::vector<unsigned long long> f = found[j].get();
      const unsigned long long* got = j % 2 ? reports + 2 * j : f.data();
      EXPECT_EQ(got[0], bad == SIZE_MAX ? ~0ull : bad) << at << ": index check";
      EXPECT_EQ(got[1], bad == SIZE_MAX ? ~0ull : i[bad]) << at << ": index check's value";
      if (j % 2) {
        EXPECT_EQ(f[0], ~0ull) << at << ": a reporting check leaves its found pair reset";
        EXPECT_EQ(f[1], ~0ull) << at << ": a reporting check leaves its found pair reset";
      }
    }
  }
  expectBits(sums.get(), singleSums.get(), "sparse feedback's norms (the single kernel's)");
  cudaFreeHost(reports);
}

}  // namespace
}  // namespace squeeze::device
