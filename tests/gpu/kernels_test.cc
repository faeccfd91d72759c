// The CUDA kernels of device/ (reduce.cu, cast.cu, quantize.cu) against their CPU twins, bit
// for bit: every gpu* function is called on the same random data as its cpu* twin, at sizes
// {0, 1, 7, 1000, 2^20 + 3}, and the outputs compared byte by byte:
//   - gpuReduce for every datatype x op, out of place, in place (out == a and out == b), and at
//     pointers that are misaligned alike and unalike (the vector and element-by-element paths);
//     gpuDivide for every datatype;
//   - gpuNarrow / gpuWiden / gpuWidenAdd for both 16-bit formats, in place and misaligned;
//     gpuCastFeedback against the CPU's narrow, widen and feedback pass (norms bit for bit);
//     gpuCopyFeedback and gpuCastFeedback on finite values, norms in the CPU's tree bit for bit;
//   - each quantizer at the settings quantize_test uses: scales (at an unaligned address),
//     codes, decode, decode-add (out of place and in place), and encodeFeedback's residual;
//     its norms only to rounding (the GPU sums them in another order);
//   - pinned, mapped host memory as kernel operands (unified addressing).
// The stream collectives' kernels are round_kernels_test's.
// NaN payloads are the one documented exception: x86 and CUDA make different default NaNs
// (and the CPU's F16C path quiets NaNs differently), so two NaNs of the element type count as
// equal. main() is gpu_main.cc: without a GPU the binary exits 77 (skipped).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <memory>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/types.h"
#include "device/batch.h"
#include "device/cast.h"
#include "device/cuda/runtime.h"
#include "device/handle_kernels.h"
#include "device/quantize.h"
#include "device/reduce.h"
#include "tests/common/kernel_inputs.h"
#include "tests/gpu/kernel_checks.h"

namespace squeeze::device {
namespace {

const size_t kSizes[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};

// ---- reduce ----------------------------------------------------------------------------------

// Element offsets of (out, a, b): aligned; misaligned alike (vectors after a head); unalike.
struct Offsets {
  size_t out, a, b;
};
constexpr Offsets kOffsets[] = {{0, 0, 0}, {1, 1, 1}, {0, 1, 2}};

TEST(GpuReduce, EveryTypeAndOpMatchesTheCpu) {
  cuda::Stream stream;
  for (DataType t : kAllTypes) {
    const size_t size = dataTypeSize(t);
    for (size_t n : kSizes) {
      const auto a = randomElements(t, n, 1 + n), b = randomElements(t, n, 2 + n);
      for (RedOp op : kAllOps) {
        std::vector<unsigned char> want(n * size);
        cpuReduceFn(t, op)(want.data(), a.data(), b.data(), n);
        for (const Offsets& o : kOffsets) {
          const size_t oo = o.out * size, oa = o.a * size, ob = o.b * size;
          Dev da(a.data(), a.size(), oa), db(b.data(), b.size(), ob), dout(n * size);
          gpuReduce(t, op, dout.at(oo), da.at(oa), db.at(ob), n, stream.get());
          stream.synchronize("gpuReduce");
          const auto got = dout.get(n * size, oo);
          expectSame(t, want.data(), got.data(), n,
                     name(t, op, n) + " offsets " + std::to_string(o.out) + "," +
                         std::to_string(o.a) + "," + std::to_string(o.b));
        }
        // In place: out == a, and out == b.
        Dev da(a.data(), a.size()), db(b.data(), b.size());
        gpuReduce(t, op, da.at(0), da.at(0), db.at(0), n, stream.get());
        stream.synchronize("gpuReduce in place");
        expectSame(t, want.data(), da.get(n * size).data(), n, name(t, op, n) + " out == a");
        Dev da2(a.data(), a.size());
        gpuReduce(t, op, db.at(0), da2.at(0), db.at(0), n, stream.get());
        stream.synchronize("gpuReduce in place");
        expectSame(t, want.data(), db.get(n * size).data(), n, name(t, op, n) + " out == b");
      }
    }
  }
}

TEST(GpuReduce, DivideMatchesTheCpu) {
  cuda::Stream stream;
  for (DataType t : kAllTypes) {
    const size_t size = dataTypeSize(t);
    for (size_t n : kSizes) {
      for (int divisor : {3, 7}) {
        for (size_t off : {size_t{0}, size_t{1}}) {
          auto want = randomElements(t, n, 3 + n);
          Dev d(want.data(), want.size(), off * size);
          cpuDivide(want.data(), n, t, divisor);
          gpuDivide(d.at(off * size), n, t, divisor, stream.get());
          stream.synchronize("gpuDivide");
          expectSame(t, want.data(), d.get(n * size, off * size).data(), n,
                     name(t, RedOp::kAvg, n) + " / " + std::to_string(divisor));
        }
      }
    }
  }
}

TEST(GpuReduce, PinnedHostOperands) {
  cuda::Stream stream;
  const size_t n = 1000;
  const auto a = randomElements(DataType::kFloat32, n, 5),
             b = randomElements(DataType::kFloat32, n, 6);
  cuda::PinnedBuffer pa(a.size()), pout(a.size());
  copyBytes(pa.data(), a);
  Dev db(b.data(), b.size());
  std::vector<unsigned char> want(a.size());
  cpuReduceFn(DataType::kFloat32, RedOp::kSum)(want.data(), a.data(), b.data(), n);
  gpuReduce(DataType::kFloat32, RedOp::kSum, pout.data(), pa.data(), db.at(0), n, stream.get());
  stream.synchronize("gpuReduce pinned");
  expectSame(DataType::kFloat32, want.data(), static_cast<unsigned char*>(pout.data()), n,
             "pinned");
}

// ---- casts -----------------------------------------------------------------------------------

TEST(GpuCast, NarrowWidenAndWidenAddMatchTheCpu) {
  cuda::Stream stream;
  for (Narrow kind : {Narrow::kHalf, Narrow::kBfloat16}) {
    const DataType nt = kind == Narrow::kHalf ? DataType::kFloat16 : DataType::kBfloat16;
    const std::string k = kind == Narrow::kHalf ? "half" : "bf16";
    for (size_t n : kSizes) {
      const auto fbytes = randomElements(DataType::kFloat32, n, 10 + n);
      const auto hbytes = randomElements(nt, n, 11 + n);
      std::vector<float> f(n), local(n);
      std::vector<uint16_t> h(n);
      copyBytes(f.data(), fbytes);
      copyBytes(h.data(), hbytes);
      const auto lbytes = randomElements(DataType::kFloat32, n, 12 + n);
      copyBytes(local.data(), lbytes);

      std::vector<uint16_t> narrow(n);
      std::vector<float> wide(n), sum(n);
      cpuNarrow(kind, f.data(), narrow.data(), n);
      cpuWiden(kind, h.data(), wide.data(), n);
      cpuWidenAdd(kind, sum.data(), local.data(), h.data(), n);

      // Float offsets 0 and 1 against 16-bit offsets 0, 1 and 2: aligned alike or not.
      for (size_t fo : {size_t{0}, size_t{1}}) {
        for (size_t ho : {size_t{0}, size_t{1}, size_t{2}}) {
          const std::string what = k + " n=" + std::to_string(n) + " offsets " +
                                   std::to_string(fo) + "," + std::to_string(ho);
          Dev df(f.data(), 4 * n, 4 * fo), dh(h.data(), 2 * n, 2 * ho), dout16(2 * n),
              dout32(4 * n), dlocal(local.data(), 4 * n, 4 * fo);
          auto* f32 = reinterpret_cast<float*>(df.at(4 * fo));
          auto* h16 = reinterpret_cast<uint16_t*>(dh.at(2 * ho));
          auto* l32 = reinterpret_cast<float*>(dlocal.at(4 * fo));
          gpuNarrow(kind, f32, reinterpret_cast<uint16_t*>(dout16.at(2 * ho)), n, stream.get());
          gpuWiden(kind, h16, reinterpret_cast<float*>(dout32.at(4 * fo)), n, stream.get());
          gpuWidenAdd(kind, l32, l32, h16, n, stream.get());  // in place
          stream.synchronize("casts");
          expectSame(nt, reinterpret_cast<const unsigned char*>(narrow.data()),
                     dout16.get(2 * n, 2 * ho).data(), n, what + " narrow");
          expectSameFloats(wide, dout32.get<float>(n, 4 * fo), what + " widen");
          expectSameFloats(sum, dlocal.get<float>(n, 4 * fo), what + " widenAdd in place");
          // Out of place, local misaligned unlike out.
          Dev dlocal2(local.data(), 4 * n, 4 * (1 - fo));
          gpuWidenAdd(kind, reinterpret_cast<float*>(dout32.at(4 * fo)),
                      reinterpret_cast<float*>(dlocal2.at(4 * (1 - fo))), h16, n, stream.get());
          stream.synchronize("widenAdd");
          expectSameFloats(sum, dout32.get<float>(n, 4 * fo), what + " widenAdd");
        }
      }
    }
  }
}

// ---- quantizers ------------------------------------------------------------------------------

using Kind = QuantKind;

struct Case {
  const char* name;
  Kind kind;
  size_t block;
  int levels;  // qsgd
  int bits;    // bits per value of the codes
};

const Case kCases[] = {
    {"int8", Kind::kInt8, 256, 0, 8},
    {"int8:block=100", Kind::kInt8, 100, 0, 8},
    {"qsgd", Kind::kQsgd, 512, 16, 8},
    {"qsgd:levels=7,block=100", Kind::kQsgd, 100, 7, 4},
    {"qsgd:levels=1,block=64", Kind::kQsgd, 64, 1, 4},
    {"qsgd:levels=127", Kind::kQsgd, 512, 127, 8},
    {"onebit", Kind::kOnebit, 256, 0, 1},
    {"onebit:block=13", Kind::kOnebit, 13, 0, 1},
    {"terngrad", Kind::kTerngrad, 256, 0, 2},
    {"terngrad:block=6", Kind::kTerngrad, 6, 0, 2},
};

size_t scaleCount(const Case& c, size_t n) {
  return blockCount(n, c.block) * (c.kind == Kind::kOnebit ? 2 : 1);
}

// quantize_test's input: values over six decades, all-zero blocks, one-sign 1-bit blocks.
using kernel_inputs::gradientLike;
std::vector<float> gradient(size_t n, unsigned seed) { return gradientLike(n, seed); }

// The random stream and first index: one case whose indices cross a 2^32 boundary (a new run
// key partway through the chunk).
struct Draw {
  uint64_t key;
  uint64_t index0;
};
constexpr uint64_t kSeed = 9;
const Draw kDraws[] = {{0, 0}, {0, (uint64_t{1} << 32) - 500}};

// The case's QuantSetting (the draws' key for qsgd and terngrad).
QuantSetting settingOf(const Case& c, const Draw& s) {
  return {c.kind, c.block, c.kind == Kind::kQsgd ? c.levels : 0,
          c.kind == Kind::kQsgd ? c.bits : 0, s.key};
}
void cpuEncode(const Case& c, const float* x, size_t n, const Draw& s, void* scales, uint8_t* codes,
               Feedback* fb) {
  cpuQuantEncodeJob(settingOf(c, s), {x, n, scales, codes, nullptr, s.index0}, fb);
}
void gpuEncode(const Case& c, const float* x, size_t n, const Draw& s, void* scales, uint8_t* codes,
               Feedback* fb, GpuStream st) {
  gpuQuantEncodeJob(settingOf(c, s), {x, n, scales, codes, nullptr, s.index0}, fb, st);
}
void cpuDecodeTo(const Case& c, const void* scales, const uint8_t* codes, size_t n, float* out,
                 const float* local) {
  cpuQuantDecodeJob(settingOf(c, Draw{}), {scales, codes, n, out, local}, local != nullptr);
}
void gpuDecodeTo(const Case& c, const void* scales, const uint8_t* codes, size_t n, float* out,
                 const float* local, GpuStream st) {
  const QuantDecodeJob job{scales, codes, n, out, local};
  gpuQuantDecodeBatch(settingOf(c, Draw{}), &job, 1, local != nullptr, st);
}

// Scales sit 3 bytes into their buffer: unaligned, as after a payload's header they may be.
constexpr size_t kScaleOffset = 3;

// The fused cast encode with feedback: the payload, residual and norms of the CPU's three
// steps (narrow, widen, feedback pass), the norms bit for bit (the same lanes, in order), summed
// on the device and on the host.
TEST(GpuCast, CastFeedbackMatchesTheCpusThreeSteps) {
  cuda::Stream stream;
  for (Narrow kind : {Narrow::kHalf, Narrow::kBfloat16}) {
    const DataType nt = kind == Narrow::kHalf ? DataType::kFloat16 : DataType::kBfloat16;
    for (size_t n : kSizes) {
      if (n == 0) continue;
      const std::string what =
          std::string(kind == Narrow::kHalf ? "half" : "bf16") + " n=" + std::to_string(n);
      const auto xbytes = randomElements(DataType::kFloat32, n, 20 + n);
      const auto rbytes = randomElements(DataType::kFloat32, n, 21 + n);
      std::vector<float> x(n), r0(n), back(n);
      copyBytes(x.data(), xbytes);
      copyBytes(r0.data(), rbytes);
      std::vector<uint16_t> payload(n);
      std::vector<float> residual = r0;
      double in = 0, sent = 0;
      cpuNarrow(kind, x.data(), payload.data(), n);
      cpuWiden(kind, payload.data(), back.data(), n);
      cpuFeedbackPass(x.data(), back.data(), n, residual.data(), &in, &sent);
      for (bool onDevice : {true, false}) {
        Dev dx(x.data(), 4 * n), dr(r0.data(), 4 * n), dp(2 * n), dsums(16);
        const double zero[2] = {0, 0};
        dsums.put(zero, sizeof zero);
        double hin = 0, hsent = 0;
        gpuCastFeedback(kind, reinterpret_cast<float*>(dx.at(0)),
                        reinterpret_cast<uint16_t*>(dp.at(0)), n,
                        reinterpret_cast<float*>(dr.at(0)), &hin, &hsent,
                        onDevice ? reinterpret_cast<double*>(dsums.at(0)) : nullptr, stream.get());
        stream.synchronize("castFeedback");
        const std::string how = what + (onDevice ? " (device sums)" : " (host sums)");
        expectSame(nt, reinterpret_cast<const unsigned char*>(payload.data()), dp.get(2 * n).data(),
                   n, how + " payload");
        expectSameFloats(residual, dr.get<float>(n), how + " residual");
        if (onDevice) {
          const std::vector<double> sums = dsums.get<double>(2);
          hin = sums[0];
          hsent = sums[1];
        }
        // Random bits make some inputs NaN or infinite: then both sums are NaN (or inf) alike.
        auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
        EXPECT_TRUE(same(hin, in)) << how << ": " << hin << " vs " << in;
        EXPECT_TRUE(same(hsent, sent)) << how << ": " << hsent << " vs " << sent;
      }
    }
  }
}

// The fused encodes with feedback (dense: copy; casts) on finite gradient-like values, where the
// norms are finite and so pin their order: every block's lanes, then the blocks in NormTree's
// tree (normTreeKernel on the device, the CPU as it streams), bit for bit, at block counts that
// are not powers of two and past one thread's share of the tree's block. Every 97th residual is
// -0, which the dense pass turns into +0 (its only write on finite values).
TEST(GpuFeedback, FusedEncodesSumTheNormsInTheCpusTree) {
  cuda::Stream stream;
  for (int kind = 0; kind < 3; ++kind) {  // dense, half, bf16
    const Narrow narrow = kind == 1 ? Narrow::kHalf : Narrow::kBfloat16;
    const size_t width = kind == 0 ? 4 : 2;
    for (size_t n : {size_t(1000), (size_t{1} << 20) + 3, (size_t{3} << 20) + 5}) {
      const std::string what =
          std::string(kind == 0 ? "dense" : kind == 1 ? "half" : "bf16") + " n=" + std::to_string(n);
      const std::vector<float> x = kernel_inputs::gradientLike(n, 31 + kind);
      std::vector<float> r0 = kernel_inputs::gradientLike(n, 41 + kind);
      for (size_t i = 0; i < n; i += 97) r0[i] = -0.0f;
      std::vector<unsigned char> payload(width * n);
      std::vector<float> residual = r0;
      double in = 0, sent = 0;
      if (kind == 0)
        cpuCopyFeedback(x.data(), reinterpret_cast<float*>(payload.data()), n, residual.data(),
                        &in, &sent);
      else
        cpuCastFeedback(narrow, x.data(), reinterpret_cast<uint16_t*>(payload.data()), n,
                        residual.data(), &in, &sent);
      ASSERT_TRUE(std::isfinite(in) && std::isfinite(sent)) << what;
      for (bool onDevice : {true, false}) {
        Dev dx(x.data(), 4 * n), dr(r0.data(), 4 * n), dp(width * n), dsums(16);
        const double zero[2] = {0, 0};
        dsums.put(zero, sizeof zero);
        double hin = 0, hsent = 0;
        auto* sums = onDevice ? reinterpret_cast<double*>(dsums.at(0)) : nullptr;
        auto* dxp = reinterpret_cast<float*>(dx.at(0));
        auto* drp = reinterpret_cast<float*>(dr.at(0));
        if (kind == 0)
          gpuCopyFeedback(dxp, reinterpret_cast<float*>(dp.at(0)), n, drp, &hin, &hsent, sums,
                          stream.get());
        else
          gpuCastFeedback(narrow, dxp, reinterpret_cast<uint16_t*>(dp.at(0)), n, drp, &hin,
                          &hsent, sums, stream.get());
        stream.synchronize("fused feedback");
        const std::string how = what + (onDevice ? " (device sums)" : " (host sums)");
        EXPECT_EQ(dp.get(width * n), payload) << how << " payload";
        expectSameFloats(residual, dr.get<float>(n), how + " residual");
        if (onDevice) {
          const std::vector<double> got = dsums.get<double>(2);
          hin = got[0];
          hsent = got[1];
        }
        EXPECT_EQ(hin, in) << how << ": input norm";
        EXPECT_EQ(hsent, sent) << how << ": sent norm";
      }
    }
  }
}

TEST(GpuQuantize, EncodeDecodeAndFeedbackMatchTheCpu) {
  cuda::Stream stream;
  for (const Case& c : kCases) {
    for (size_t n : kSizes) {
      for (const Draw& s0 : kDraws) {
        const Draw s{counterKey(kSeed, s0.index0 ? 2 : 1, 3), s0.index0};
        const std::string what =
            std::string(c.name) + " n=" + std::to_string(n) + (s.index0 ? " index0 near 2^32" : "");
        const std::vector<float> x = gradient(n, static_cast<unsigned>(n + 1));
        const size_t sbytes = 4 * scaleCount(c, n), cbytes = packedChunkBytes(n, c.block, c.bits);

        // Encode, without and with feedback.
        std::vector<unsigned char> scales(sbytes), codes(cbytes);
        cpuEncode(c, x.data(), n, s, scales.data(), codes.data(), nullptr);
        std::vector<float> residual(n);
        for (size_t i = 0; i < n; ++i) residual[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
        const std::vector<float> residual0 = residual;
        Norms cnorms;
        Feedback cfb{residual.data(), &cnorms};
        std::vector<unsigned char> fscales(sbytes), fcodes(cbytes);
        cpuEncode(c, x.data(), n, s, fscales.data(), fcodes.data(), &cfb);

        Dev dx(x.data(), 4 * n), dscales(sbytes), dcodes(cbytes), dres(residual0.data(), 4 * n);
        gpuEncode(c, reinterpret_cast<float*>(dx.at(0)), n, s, dscales.at(kScaleOffset),
                  dcodes.at(0), nullptr, stream.get());
        stream.synchronize("encode");
        expectSameBytes(scales, dscales.get(sbytes, kScaleOffset), what + " scales");
        expectSameBytes(codes, dcodes.get(cbytes), what + " codes");

        Norms gnorms;
        Feedback gfb{reinterpret_cast<float*>(dres.at(0)), &gnorms};
        gpuEncode(c, reinterpret_cast<float*>(dx.at(0)), n, s, dscales.at(kScaleOffset),
                  dcodes.at(0), &gfb, stream.get());  // synchronizes
        expectSameBytes(fscales, dscales.get(sbytes, kScaleOffset), what + " feedback scales");
        expectSameBytes(fcodes, dcodes.get(cbytes), what + " feedback codes");
        expectSameFloats(residual, dres.get<float>(n), what + " residual");
        EXPECT_NEAR(gnorms.inputSq, cnorms.inputSq, 1e-9 * cnorms.inputSq + 1e-300) << what;
        EXPECT_NEAR(gnorms.sentSq, cnorms.sentSq, 1e-9 * cnorms.sentSq + 1e-300) << what;
        if (n) {  // norms only: no residual
          Norms cn, gn;
          Feedback cf{nullptr, &cn}, gf{nullptr, &gn};
          cpuEncode(c, x.data(), n, s, fscales.data(), fcodes.data(), &cf);
          gpuEncode(c, reinterpret_cast<float*>(dx.at(0)), n, s, dscales.at(kScaleOffset),
                    dcodes.at(0), &gf, stream.get());
          EXPECT_NEAR(gn.sentSq, cn.sentSq, 1e-9 * cn.sentSq) << what << " norms only";
          // Added on the device (deviceNorms), twice, without a wait; *norms left alone.
          Dev sums(2 * sizeof(double));
          ASSERT_EQ(cudaMemsetAsync(sums.at(0), 0, 2 * sizeof(double), stream.get()), cudaSuccess);
          Norms untouched;
          Feedback df{nullptr, &untouched, reinterpret_cast<double*>(sums.at(0))};
          for (int twice = 0; twice < 2; ++twice)
            gpuEncode(c, reinterpret_cast<float*>(dx.at(0)), n, s, dscales.at(kScaleOffset),
                      dcodes.at(0), &df, stream.get());
          stream.synchronize("encode with device norms");
          double got[2];
          const std::vector<double> d = sums.get<double>(2);
          std::memcpy(got, d.data(), sizeof got);
          EXPECT_NEAR(got[0], 2 * cn.inputSq, 2e-9 * cn.inputSq) << what << " device norms";
          EXPECT_NEAR(got[1], 2 * cn.sentSq, 2e-9 * cn.sentSq) << what << " device norms";
          EXPECT_EQ(untouched.inputSq, 0.0) << what;
        }

        // Decode and decode-add of the CPU's payload; local aligned and misaligned.
        dscales.put(scales.data(), sbytes, kScaleOffset);
        dcodes.put(codes.data(), cbytes);
        std::vector<float> local(n), decoded(n), added(n);
        for (size_t i = 0; i < n; ++i) local[i] = 0.5f * x[(i * 7) % n] + 1e-3f;
        cpuDecodeTo(c, scales.data(), codes.data(), n, decoded.data(), nullptr);
        cpuDecodeTo(c, scales.data(), codes.data(), n, added.data(), local.data());
        for (size_t off : {size_t{0}, size_t{1}}) {
          const std::string w = what + " offset " + std::to_string(off);
          Dev dout(4 * n), dlocal(local.data(), 4 * n, 4 * off);
          auto* out = reinterpret_cast<float*>(dout.at(4 * off));
          auto* loc = reinterpret_cast<float*>(dlocal.at(4 * off));
          gpuDecodeTo(c, dscales.at(kScaleOffset), dcodes.at(0), n, out, nullptr, stream.get());
          stream.synchronize("decode");
          expectSameFloats(decoded, dout.get<float>(n, 4 * off), w + " decode");
          gpuDecodeTo(c, dscales.at(kScaleOffset), dcodes.at(0), n, out, loc, stream.get());
          stream.synchronize("decodeAdd");
          expectSameFloats(added, dout.get<float>(n, 4 * off), w + " decodeAdd");
          gpuDecodeTo(c, dscales.at(kScaleOffset), dcodes.at(0), n, loc, loc, stream.get());
          stream.synchronize("decodeAdd in place");
          expectSameFloats(added, dlocal.get<float>(n, 4 * off), w + " decodeAdd in place");
        }
      }
    }
  }
}

TEST(GpuQuantize, PinnedHostPayloadAndOutput) {
  cuda::Stream stream;
  const Case& c = kCases[3];  // 4-bit QSGD, odd blocks
  const size_t n = 1000;
  const Draw s{counterKey(kSeed, 1, 0), 0};
  const std::vector<float> x = gradient(n, 3);
  const size_t sbytes = 4 * scaleCount(c, n), cbytes = packedChunkBytes(n, c.block, c.bits);
  std::vector<unsigned char> scales(sbytes), codes(cbytes);
  cpuEncode(c, x.data(), n, s, scales.data(), codes.data(), nullptr);
  std::vector<float> want(n);
  cpuDecodeTo(c, scales.data(), codes.data(), n, want.data(), x.data());

  cuda::PinnedBuffer px(4 * n), pscales(sbytes + kScaleOffset), pcodes(cbytes), pout(4 * n);
  std::memcpy(px.data(), x.data(), 4 * n);
  auto* sp = static_cast<unsigned char*>(pscales.data()) + kScaleOffset;
  gpuEncode(c, static_cast<float*>(px.data()), n, s, sp, static_cast<uint8_t*>(pcodes.data()),
            nullptr, stream.get());
  gpuDecodeTo(c, sp, static_cast<uint8_t*>(pcodes.data()), n, static_cast<float*>(pout.data()),
              static_cast<float*>(px.data()), stream.get());
  stream.synchronize("pinned");
  EXPECT_EQ(std::memcmp(sp, scales.data(), sbytes), 0);
  EXPECT_EQ(std::memcmp(pcodes.data(), codes.data(), cbytes), 0);
  EXPECT_EQ(std::memcmp(pout.data(), want.data(), 4 * n), 0);
}

// n == 0 touches nothing (null pointers are fine) and leaves the feedback sums alone.
TEST(GpuKernels, ZeroCountIsANoOp) {
  cuda::Stream stream;
  const GpuStream st = stream.get();
  gpuReduce(DataType::kFloat32, RedOp::kSum, nullptr, nullptr, nullptr, 0, st);
  gpuDivide(nullptr, 0, DataType::kBfloat16, 3, st);
  gpuNarrow(Narrow::kHalf, nullptr, nullptr, 0, st);
  gpuWiden(Narrow::kBfloat16, nullptr, nullptr, 0, st);
  gpuWidenAdd(Narrow::kHalf, nullptr, nullptr, nullptr, 0, st);
  Norms norms;
  norms.inputSq = 1.5;
  Feedback fb{nullptr, &norms};
  for (const Case& c : kCases) {
    gpuEncode(c, nullptr, 0, Draw{1, 0}, nullptr, nullptr, &fb, st);
    gpuDecodeTo(c, nullptr, nullptr, 0, nullptr, nullptr, st);
  }
  stream.synchronize("zero counts");
  EXPECT_EQ(norms.inputSq, 1.5);
  EXPECT_EQ(norms.sentSq, 0.0);
}

}  // namespace
}  // namespace squeeze::device
