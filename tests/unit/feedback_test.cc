// The host's error-feedback passes (device/cpu/handle_kernels.cc) against the
// rule written out plainly here, the one gpuFeedbackPass and gpuCastFeedback
// follow too: residual[i] += x[i] - d[i] as float operations, and |x|^2, |d|^2
// summed per block of kNormBlock values in 8 float lanes (a block's tail in
// lane 0), each block's lanes added in double from 0, and the blocks' totals
// in a pairwise tree, level after level (NormTree; the GPU's normTreeKernel).
//   - NormTree, which adds as it streams, equals that level order for every
//     block count up to 600;
//   - cpuFeedbackPass, cpuCopyFeedback (dense: d = x, payload = x) and
//   cpuCastFeedback (d =
//     widen(narrow(x)), payload = cpuNarrow's) give those bits, with and
//     without a residual or the norms, on the AVX2 and on the baseline code,
//     for counts around the lanes and blocks, over values with -0, infinities,
//     NaN and subnormals;
//   - the dense and cast codecs' fused encodeFeedback equal the generic
//   Codec::encodeFeedback
//     (encode, decode, feedback pass) bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "compress/codecs.h"
#include "device/cast.h"
#include "device/handle_kernels.h"
#include "device/quantize.h"
#include "tests/common/kernel_inputs.h"

namespace squeeze {
namespace {

using device::kNormBlock;

const size_t kCounts[] = {0, 1, 7, 8, 9, 1023, 1024, 1025, 3 * 1024 + 13};
// With these, the dense and cast payloads are large enough to take non-temporal stores
// (device/cpu/stream_store.h), and one count leaves a tail after the last 8 values.
const size_t kCountsAndStreamed[] = {0, 1, 7, 8, 9, 1023, 1024, 1025, 3 * 1024 + 13,
                                     (size_t{4} << 20) + 13};

// Gradient-like values, with the special ones mixed in when `special` (the
// norms are then NaN: the finite runs pin their summation order).
std::vector<float> values(size_t n, unsigned seed, bool special) {
  std::vector<float> x = kernel_inputs::gradientLike(n, seed);
  if (!special) return x;
  const float odd[] = {-0.0f,
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(),
                       1e-42f,
                       70000.0f,
                       3e38f};
  for (size_t i = seed % 5; i < n; i += 37) x[i] = odd[(i / 37) % 7];
  return x;
}

uint32_t bitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct Result {
  std::vector<float> residual;
  double in = 0.5, sent = 0.25;  // added to, not overwritten
};

// Sums of the blocks' totals in the tree's level order, as handle_kernels.cu
// does it in place: at step s = 1, 2, 4, ..., t[j] += t[j + s] for every j
// that is a multiple of 2s with j + s < B.
double levelOrderSum(std::vector<double> t) {
  for (size_t s = 1; s < t.size(); s *= 2)
    for (size_t j = 0; j + s < t.size(); j += 2 * s) t[j] = t[j] + t[j + s];
  return t.empty() ? 0.0 : t[0];
}

// The rule, element by element.
Result reference(const std::vector<float> &x, const std::vector<float> &d,
                 const std::vector<float> &r0) {
  Result r{r0};
  std::vector<double> inTotals, sentTotals;
  for (size_t b = 0; b < x.size(); b += kNormBlock) {
    const size_t end = std::min(x.size(), b + kNormBlock);
    const size_t whole = (end - b) / 8 * 8;  // the values in whole lane rows
    float in8[8] = {}, sent8[8] = {};
    for (size_t i = b; i < end; ++i) {
      const size_t lane = i - b < whole ? (i - b) % 8 : 0;
      in8[lane] = in8[lane] + x[i] * x[i];
      sent8[lane] = sent8[lane] + d[i] * d[i];
      r.residual[i] = r.residual[i] + (x[i] - d[i]);
    }
    double in = 0, sent = 0;
    for (int l = 0; l < 8; ++l) {
      in += in8[l];
      sent += sent8[l];
    }
    inTotals.push_back(in);
    sentTotals.push_back(sent);
  }
  r.in += levelOrderSum(inTotals);
  r.sent += levelOrderSum(sentTotals);
  return r;
}

TEST(NormTree, StreamingEqualsTheLevelOrder) {
  std::vector<double> in, sent;
  uint64_t z = 12345;
  for (size_t blocks = 0; blocks <= 600; ++blocks) {
    device::NormTree tree;
    for (size_t b = 0; b < blocks; ++b) tree.push(in[b], sent[b]);
    double gotIn = 0.5, gotSent = 0.25;  // added to
    tree.addTo(&gotIn, &gotSent);
    ASSERT_EQ(gotIn, 0.5 + levelOrderSum(in)) << blocks << " blocks";
    ASSERT_EQ(gotSent, 0.25 + levelOrderSum(sent)) << blocks << " blocks";
    // Totals of mixed magnitudes, so that another order rounds differently.
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    in.push_back(std::ldexp(double(z >> 11), int(z % 40) - 60));
    sent.push_back(std::ldexp(double(z >> 13), -int(z % 50)));
  }
}

// Equal bits, or both NaN (which NaN an operation on two NaNs keeps is not
// pinned).
void expectSame(const Result &got, const Result &want, bool residual, bool norms,
                const std::string &what) {
  if (residual)
    for (size_t i = 0; i < want.residual.size(); ++i) {
      const float g = got.residual[i], w = want.residual[i];
      if (!(std::isnan(g) && std::isnan(w)) && bitsOf(g) != bitsOf(w)) {
        ADD_FAILURE() << what << ": residual of element " << i << " is " << g << ", want " << w;
        break;
      }
    }
  if (!norms) return;
  if (std::isnan(want.in)) {
    EXPECT_TRUE(std::isnan(got.in)) << what;
  } else {
    EXPECT_EQ(got.in, want.in) << what;
  }
  if (std::isnan(want.sent)) {
    EXPECT_TRUE(std::isnan(got.sent)) << what;
  } else {
    EXPECT_EQ(got.sent, want.sent) << what;
  }
}

// Runs body(residual or null, inputSq or null, sentSq or null) for each
// instruction set and each choice of residual and norms, against the
// reference's result.
template <class Body>
void forEachWay(const std::string &what, const std::vector<float> &r0, const Result &want,
                Body body) {
  using device::CpuIsa;
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kBaseline}) {
    device::cpuQuantizeAllowIsa(isa);
    const char* isaName = isa == CpuIsa::kAvx512 ? " avx512"
                          : isa == CpuIsa::kAvx2 ? " avx2"
                                                 : " baseline";
    for (int way = 0; way < 3; ++way) {
      const bool residual = way != 2, norms = way != 1;
      Result got{r0};
      body(residual ? got.residual.data() : nullptr, norms ? &got.in : nullptr,
           norms ? &got.sent : nullptr);
      const std::string how = what + isaName +
                              (residual ? " residual" : "") + (norms ? " norms" : "");
      if (!residual && !r0.empty()) {  // memcmp of an empty vector's null data() is undefined
        EXPECT_EQ(0, std::memcmp(got.residual.data(), r0.data(), r0.size() * 4))
            << how << ": the residual was written";
      }
      if (!norms) {
        EXPECT_TRUE(got.in == 0.5 && got.sent == 0.25) << how << ": norms written";
      }
      expectSame(got, want, residual, norms, how);
    }
  }
  device::cpuQuantizeAllowIsa(device::CpuIsa::kAvx512);
}

TEST(FeedbackKernels, PassFollowsTheRule) {
  for (bool special : {false, true})
    for (size_t n : kCounts) {
      const std::vector<float> x = values(n, 1, special), d = values(n, 2, special),
                               r0 = values(n, 3, special);
      forEachWay("n=" + std::to_string(n) + (special ? " special" : ""), r0, reference(x, d, r0),
                 [&](float *residual, double *in, double *sent) {
                   device::cpuFeedbackPass(x.data(), d.data(), n, residual, in, sent);
                 });
    }
}

TEST(FeedbackKernels, CopyFeedbackIsACopyAndThePass) {
  for (bool special : {false, true})
    for (size_t n : kCountsAndStreamed) {
      const std::vector<float> x = values(n, 4, special), r0 = values(n, 5, special);
      const std::string what = "n=" + std::to_string(n) + (special ? " special" : "");
      forEachWay(what, r0, reference(x, x, r0), [&](float *residual, double *in, double *sent) {
        std::vector<float> payload(n, 9.0f);
        device::cpuCopyFeedback(x.data(), payload.data(), n, residual, in, sent);
        if (n) {
          EXPECT_EQ(0, std::memcmp(payload.data(), x.data(), n * 4)) << what << ": payload";
        }
      });
    }
}

TEST(FeedbackKernels, CastFeedbackIsNarrowWidenAndThePass) {
  for (device::Narrow kind : {device::Narrow::kHalf, device::Narrow::kBfloat16})
    for (bool special : {false, true})
      for (size_t n : kCountsAndStreamed) {
        const std::vector<float> x = values(n, 6, special), r0 = values(n, 7, special);
        const std::string what = std::string(kind == device::Narrow::kHalf ? "fp16" : "bf16") +
                                 " n=" + std::to_string(n) + (special ? " special" : "");
        std::vector<uint16_t> narrowed(n);
        std::vector<float> d(n);
        device::cpuNarrow(kind, x.data(), narrowed.data(), n);
        device::cpuWiden(kind, narrowed.data(), d.data(), n);
        forEachWay(what, r0, reference(x, d, r0), [&](float *residual, double *in, double *sent) {
          std::vector<uint16_t> payload(n, 1);
          device::cpuCastFeedback(kind, x.data(), payload.data(), n, residual, in, sent);
          EXPECT_EQ(payload, narrowed) << what << ": payload";
        });
      }
}

// The codecs' own encodeFeedback against the generic one of
// compress/feedback.cc.
TEST(FeedbackKernels, FusedCodecsEqualTheGenericFeedback) {
  std::unique_ptr<Codec> codecs[] = {makeChunkCodec(CodecSpec::parse("dense")),
                                     makeChunkCodec(CodecSpec::parse("fp16")),
                                     makeChunkCodec(CodecSpec::parse("bf16"))};
  for (auto &codec : codecs)
    for (bool special : {false, true})
      for (size_t n : kCounts) {
        const std::string what =
            std::string(codec->name()) + " n=" + std::to_string(n) + (special ? " special" : "");
        const std::vector<float> x = values(n, 8, special), r0 = values(n, 9, special);
        const size_t bound = codec->maxEncodedBytes(n, DataType::kFloat32);
        std::vector<char> fusedPayload(bound), genericPayload(bound);
        Result fused{r0}, generic{r0};
        const ChunkInfo at{};
        EncodeNorms fusedNorms{fused.in, fused.sent}, genericNorms{generic.in, generic.sent};
        const size_t bytes =
            codec->encodeFeedback(x.data(), n, DataType::kFloat32, at, fusedPayload.data(),
                                  fused.residual.data(), &fusedNorms);
        ASSERT_EQ(bytes, codec->Codec::encodeFeedback(x.data(), n, DataType::kFloat32, at,
                                                      genericPayload.data(),
                                                      generic.residual.data(), &genericNorms))
            << what;
        if (bytes) {
          EXPECT_EQ(0, std::memcmp(fusedPayload.data(), genericPayload.data(), bytes)) << what;
        }
        fused.in = fusedNorms.inputSq;
        fused.sent = fusedNorms.sentSq;
        generic.in = genericNorms.inputSq;
        generic.sent = genericNorms.sentSq;
        expectSame(fused, generic, true, true, what);
      }
}

}  // namespace
}  // namespace squeeze
