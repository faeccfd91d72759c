// Unit tests for the quantizer codecs (compress/int8.cc, qsgd.cc, onebit.cc, terngrad.cc and
// their kernels in device/cpu/quantize.cc), each codec at its defaults and at settings that take
// the other code paths (4-bit QSGD, blocks that do not fill whole code bytes), for counts
// {1, 7, 255, 256, 257, 10000}:
//   - the round trip stays within the bound each codec's opening comment documents;
//   - the stochastic codecs (QSGD, TernGrad) are unbiased: the mean of D(C(x)) over many calls
//     converges to x (tolerance from Hoeffding's inequality, see Unbiased);
//   - encode's size is <= maxEncodedBytes and is what decode expects; decode and combine reject
//     a truncated payload, a payload of the wrong size and one from another spec with kRemote;
//   - combine(out, local, payload) == local + decode(payload) bit for bit, also in place;
//   - encodeFeedback writes encode's payload and adds exactly x - decode(payload) to the residual;
//   - the same (seed, call, rank, offset) gives the same payload, another call or rank another;
//   - 1-bit decodes each value to the mean of its column's sign side;
//   - the AVX2 and the baseline kernels agree bit for bit, also on -0, infinities, NaN and
//     subnormals.
#include "device/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "compress/codecs.h"
#include "tests/common/kernel_inputs.h"

namespace squeeze {
namespace {

enum class Kind { kInt8, kQsgd, kOnebit, kTerngrad };

struct Case {
  const char* spec;
  Kind kind;
  size_t block;  // the values per block the spec gives
  int levels;    // qsgd's s
};

const Case kCases[] = {
    {"int8", Kind::kInt8, 256, 0},
    {"int8:block=100", Kind::kInt8, 100, 0},
    {"qsgd", Kind::kQsgd, 512, 16},
    {"qsgd:levels=7,block=100", Kind::kQsgd, 100, 7},  // 4 bits per value, odd block tails
    {"qsgd:levels=1,block=64,seed=9", Kind::kQsgd, 64, 1},
    {"qsgd:levels=127", Kind::kQsgd, 512, 127},
    {"qsgd:block=24", Kind::kQsgd, 24, 16},  // a row of 16 (AVX-512), then one of 8 (AVX2)
    {"onebit", Kind::kOnebit, 256, 0},
    {"onebit:block=13", Kind::kOnebit, 13, 0},
    {"terngrad", Kind::kTerngrad, 256, 0},
    {"terngrad:block=6,seed=3", Kind::kTerngrad, 6, 0},
    {"terngrad:block=40,seed=5", Kind::kTerngrad, 40, 0},  // rows of 16, 16 and 8
};

const size_t kCounts[] = {1, 7, 255, 256, 257, 10000};

std::unique_ptr<Codec> makeCodec(const std::string& text) {
  return makeChunkCodec(CodecSpec::parse(text));
}

bool stochastic(Kind k) { return k == Kind::kQsgd || k == Kind::kTerngrad; }

// Gradient-like input (shared with the GPU twins' test).
std::vector<float> input(size_t n, unsigned seed) { return kernel_inputs::gradientLike(n, seed); }

// -0, infinities, NaN, subnormals and values near the top of float, one every 37 values (most
// blocks then hold one: their scale is inf or NaN), for the instruction sets' agreement.
void withSpecialValues(std::vector<float>& x) {
  const float odd[] = {-0.0f, std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), 1e-42f, -3e38f, 3e38f};
  for (size_t i = 5; i < x.size(); i += 37) x[i] = odd[(i / 37) % 7];
  for (size_t i = 600; i < x.size() && i < 1200; ++i) x[i] = i % 2 ? -1e-40f : 0.0f;
}

struct Encoded {
  std::vector<unsigned char> payload;
  size_t bytes = 0;
};

Encoded encode(Codec& c, const std::vector<float>& x, const ChunkInfo& at) {
  Encoded e;
  e.payload.resize(c.maxEncodedBytes(x.size(), DataType::kFloat32));
  e.bytes = c.encode(x.data(), x.size(), DataType::kFloat32, at, e.payload.data());
  EXPECT_LE(e.bytes, e.payload.size());
  e.payload.resize(e.bytes);  // the exact size: an over-read would leave the vector
  return e;
}

std::vector<float> decode(Codec& c, const Encoded& e, size_t n, const ChunkInfo& at) {
  std::vector<float> d(n, std::nanf(""));
  c.decode(e.payload.data(), e.bytes, n, DataType::kFloat32, at, d.data());
  return d;
}

// Checks the documented round-trip bound block by block; returns the largest error seen.
double expectWithinBound(const Case& c, const std::vector<float>& x, const std::vector<float>& d,
                         const std::string& what) {
  double worst = 0;
  for (size_t at = 0; at < x.size(); at += c.block) {
    const size_t end = std::min(x.size(), at + c.block);
    double maxAbs = 0, sq = 0, errSq = 0;
    for (size_t i = at; i < end; ++i) {
      maxAbs = std::max(maxAbs, std::fabs(double(x[i])));
      sq += double(x[i]) * x[i];
    }
    const double norm = std::sqrt(sq);
    double bound = 0;
    switch (c.kind) {
      case Kind::kInt8:  // scale / 2, plus float rounding (int8.cc)
        bound = maxAbs / 127 / 2 + 0x1p-22 * maxAbs + 0x1p-140;
        break;
      case Kind::kQsgd:  // norm / s, plus float rounding (qsgd.cc)
        bound = norm / c.levels + 0x1p-22 * norm;
        break;
      case Kind::kOnebit:    // max|v| of the block, to the rounding of the means (onebit.cc)
      case Kind::kTerngrad:  // s = max|v| (terngrad.cc)
        bound = maxAbs * (1 + 0x1p-16);
        break;
    }
    for (size_t i = at; i < end; ++i) {
      const double err = std::fabs(double(x[i]) - d[i]);
      errSq += err * err;
      worst = std::max(worst, err);
      if (!(err <= bound)) {
        ADD_FAILURE() << what << ": element " << i << " = " << x[i] << " decodes to " << d[i]
                      << ", error " << err << " over the bound " << bound;
        return worst;
      }
    }
    if (c.kind == Kind::kOnebit) {  // per block |x - D|_2 <= |x|_2
      EXPECT_LE(errSq, sq * (1 + 0x1p-16)) << what << ": block at " << at;
    }
  }
  return worst;
}

template <class F>
void expectRemote(F&& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemote) << what << ": " << e.what();
  }
}

class QuantizeTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeTest, RoundTripWithinBound) {
  const Case& c = GetParam();
  auto codec = makeCodec(c.spec);
  for (size_t n : kCounts) {
    // At offset 2^32 - 100 the stochastic codecs' draws cross the hash's run boundary.
    for (size_t offset : {size_t{0}, size_t{4096}, (size_t{1} << 32) - 100}) {
      const std::string what =
          std::string(c.spec) + " count=" + std::to_string(n) + " offset=" + std::to_string(offset);
      const std::vector<float> x = input(n, static_cast<unsigned>(n));
      const ChunkInfo at{offset, 5, 1};
      Encoded e = encode(*codec, x, at);
      EXPECT_EQ(e.bytes, codec->maxEncodedBytes(n, DataType::kFloat32)) << what;
      if (n >= 256) {
        EXPECT_LT(e.bytes * 3, n * 4) << what << ": hardly compressed";
      }
      const double worst = expectWithinBound(c, x, decode(*codec, e, n, at), what);
      if (n >= 256) {
        EXPECT_GT(worst, 0) << what << ": lossless? the bound test saw no error";
      }
    }
  }
}

TEST_P(QuantizeTest, ZerosStayZero) {
  const Case& c = GetParam();
  auto codec = makeCodec(c.spec);
  for (size_t n : kCounts) {
    std::vector<float> x(n, 0.0f);
    const ChunkInfo at{0, 0, 0};
    Encoded e = encode(*codec, x, at);
    std::vector<float> d = decode(*codec, e, n, at);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], 0.0f) << c.spec << " count=" << n << " i=" << i;
  }
}

// The mean of N independent draws of a variable confined to an interval of width w is within
// t of its expectation except with probability 2 exp(-2 N t^2 / w^2) (Hoeffding). Here
// D(C(x))_i takes one of two neighbouring values, w = norm / s for QSGD and w = s for TernGrad;
// with t = 4 w / sqrt(N) that is 2 exp(-32) per element, so a failure means a bias. A codec
// that rounded to nearest instead would be off by up to w / 2, 8 times the tolerance. A small
// bias shared by all elements (a Bernoulli probability a few percent low) is caught by the
// drift: the errors, signed by x and scaled by w, averaged over all N * n draws.
// Ranks on different CPUs must agree bit for bit: the AVX-512, AVX2 and baseline kernels give
// the same payloads, decoded values, sums and residuals.
TEST_P(QuantizeTest, SameBitsOnEveryInstructionSet) {
  using device::CpuIsa;
  const Case& c = GetParam();
  device::cpuQuantizeAllowIsa(CpuIsa::kAvx512);
  const CpuIsa widest = device::cpuQuantizeIsa();
  if (widest == CpuIsa::kBaseline) GTEST_SKIP() << "this CPU has no AVX2: one code path";
  auto codec = makeCodec(c.spec);
  struct Run {
    Encoded e;
    std::vector<float> decoded, combined, residual;
  };
  // The second offset puts a multiple of 2^32 inside the chunk, where the draws' run key changes
  // (the AVX rows then take their draws from a buffer instead of computing them).
  auto run = [&](CpuIsa isa, size_t n, bool special, size_t offset) {
    device::cpuQuantizeAllowIsa(isa);
    std::vector<float> x = input(n, 51);
    const std::vector<float> local = input(n, 52);
    if (special) withSpecialValues(x);
    const ChunkInfo at{offset, 3, 2};
    Run r;
    r.e = encode(*codec, x, at);
    r.decoded = decode(*codec, r.e, n, at);
    r.combined = local;
    codec->combine(r.combined.data(), r.combined.data(), r.e.payload.data(), r.e.bytes, n,
                   DataType::kFloat32, RedOp::kSum, at);
    r.residual = local;
    std::vector<unsigned char> payload(r.e.bytes);
    codec->encodeFeedback(x.data(), n, DataType::kFloat32, at, payload.data(), r.residual.data(),
                          nullptr);
    return r;
  };
  for (size_t offset : {size_t{1} << 20, (size_t{1} << 32) - 300})
    for (bool special : {false, true})
      for (size_t n : kCounts) {
        const Run base = run(CpuIsa::kBaseline, n, special, offset);
        for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
          if (isa > widest) continue;
          const Run wide = run(isa, n, special, offset);
          const std::string what = std::string(c.spec) + " count=" + std::to_string(n) +
                                   " offset=" + std::to_string(offset) +
                                   (special ? " special" : "") +
                                   (isa == CpuIsa::kAvx512 ? " avx512" : " avx2");
          EXPECT_EQ(wide.e.payload, base.e.payload) << what;
          EXPECT_EQ(0, std::memcmp(wide.decoded.data(), base.decoded.data(), n * 4)) << what;
          EXPECT_EQ(0, std::memcmp(wide.combined.data(), base.combined.data(), n * 4)) << what;
          EXPECT_EQ(0, std::memcmp(wide.residual.data(), base.residual.data(), n * 4)) << what;
        }
      }
  device::cpuQuantizeAllowIsa(CpuIsa::kAvx512);
}

class StochasticTest : public QuantizeTest {};

TEST_P(StochasticTest, Unbiased) {
  const Case& c = GetParam();
  auto codec = makeCodec(c.spec);
  const size_t n = 257;
  const int kCalls = 4000;
  // Magnitudes of one order (unlike input()), so that most values sit well inside their
  // block's range and a bias in the draws shows.
  std::vector<float> x(n);
  std::mt19937 gen(77);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) x[i] = i % 50 == 7 ? 0.0f : uniform(gen);
  std::vector<double> sum(n, 0.0);
  for (int call = 0; call < kCalls; ++call) {
    const ChunkInfo at{1000, static_cast<uint64_t>(call), call % 3};
    Encoded e = encode(*codec, x, at);
    std::vector<float> d = decode(*codec, e, n, at);
    for (size_t i = 0; i < n; ++i) sum[i] += d[i];
  }
  size_t exactlyRight = 0;
  double drift = 0;  // sum over elements of (mean - x) * sign(x) / width: a bias adds up here
  for (size_t at = 0; at < n; at += c.block) {
    const size_t end = std::min(n, at + c.block);
    double maxAbs = 0, sq = 0;
    for (size_t i = at; i < end; ++i) {
      maxAbs = std::max(maxAbs, std::fabs(double(x[i])));
      sq += double(x[i]) * x[i];
    }
    const double width = c.kind == Kind::kQsgd ? std::sqrt(sq) / c.levels : maxAbs;
    const double tol = 4 * width / std::sqrt(double(kCalls)) + 1e-6 * width;
    for (size_t i = at; i < end; ++i) {
      const double mean = sum[i] / kCalls;
      EXPECT_NEAR(mean, x[i], tol)
          << c.spec << ": element " << i << " (block width " << width << ")";
      exactlyRight += mean == x[i];
      if (x[i] != 0) drift += (mean - x[i]) * (x[i] > 0 ? 1 : -1) / width;
    }
  }
  // drift / n averages N * n draws, each in an interval of width 1: the same bound, 4 / sqrt(N n).
  EXPECT_LE(std::fabs(drift / n), 4 / std::sqrt(double(kCalls) * n))
      << c.spec << ": the errors lean one way on average (toward zero when negative)";
  EXPECT_LT(exactlyRight, n / 2) << c.spec << ": most means exact: are the draws random?";
}

TEST_P(QuantizeTest, RejectsMalformedPayloads) {
  const Case& c = GetParam();
  auto codec = makeCodec(c.spec);
  for (size_t n : kCounts) {
    const std::string what = std::string(c.spec) + " count=" + std::to_string(n);
    const std::vector<float> x = input(n, 3);
    const ChunkInfo at{0, 1, 0};
    const Encoded e = encode(*codec, x, at);
    std::vector<float> out(n + 1), local(n + 1, 1.0f);
    auto tryBoth = [&](const void* p, size_t bytes, size_t count, const std::string& how) {
      expectRemote([&] { codec->decode(p, bytes, count, DataType::kFloat32, at, out.data()); },
                   what + " decode " + how);
      expectRemote(
          [&] {
            codec->combine(out.data(), local.data(), p, bytes, count, DataType::kFloat32,
                           RedOp::kSum, at);
          },
          what + " combine " + how);
    };
    std::vector<unsigned char> shorter(e.payload.begin(), e.payload.end() - 1);
    tryBoth(shorter.data(), shorter.size(), n, "truncated by one byte");
    std::vector<unsigned char> header(e.payload.begin(), e.payload.begin() + 8);
    tryBoth(header.data(), header.size(), n, "header only");
    tryBoth(header.data(), 0, n, "empty");
    std::vector<unsigned char> longer = e.payload;
    longer.push_back(0);
    tryBoth(longer.data(), longer.size(), n, "one byte too long");
    if (codec->maxEncodedBytes(n + 1, DataType::kFloat32) != e.bytes)
      tryBoth(e.payload.data(), e.bytes, n + 1, "for count + 1");
  }
}

TEST_P(QuantizeTest, CombineIsLocalPlusDecode) {
  const Case& c = GetParam();
  auto codec = makeCodec(c.spec);
  for (size_t n : kCounts) {
    const std::string what = std::string(c.spec) + " count=" + std::to_string(n);
    const std::vector<float> x = input(n, 11), local = input(n, 12);
    const ChunkInfo at{64, 2, 3};
    const Encoded e = encode(*codec, x, at);
    const std::vector<float> d = decode(*codec, e, n, at);
    std::vector<float> expect(n), out(n, -7.0f), inPlace = local;
    for (size_t i = 0; i < n; ++i) expect[i] = local[i] + d[i];
    codec->combine(out.data(), local.data(), e.payload.data(), e.bytes, n, DataType::kFloat32,
                   RedOp::kSum, at);
    codec->combine(inPlace.data(), inPlace.data(), e.payload.data(), e.bytes, n, DataType::kFloat32,
                   RedOp::kAvg, at);
    EXPECT_EQ(0, std::memcmp(out.data(), expect.data(), n * sizeof(float))) << what;
    EXPECT_EQ(0, std::memcmp(inPlace.data(), expect.data(), n * sizeof(float)))
        << what << " in place";
  }
}

TEST_P(QuantizeTest, FeedbackResidualIsWhatThePayloadDrops) {
  const Case& c = GetParam();
  auto codec = makeCodec(c.spec);
  for (size_t n : kCounts) {
    const std::string what = std::string(c.spec) + " count=" + std::to_string(n);
    const std::vector<float> x = input(n, 21), r0 = input(n, 22);
    const ChunkInfo at{300, 9, 2};
    const Encoded e = encode(*codec, x, at);
    const std::vector<float> d = decode(*codec, e, n, at);
    std::vector<unsigned char> payload(codec->maxEncodedBytes(n, DataType::kFloat32));
    std::vector<float> residual = r0;
    EncodeNorms norms;
    norms.inputSq = 1;  // accumulated onto, not overwritten
    const size_t bytes = codec->encodeFeedback(x.data(), n, DataType::kFloat32, at, payload.data(),
                                               residual.data(), &norms);
    ASSERT_EQ(bytes, e.bytes) << what;
    EXPECT_EQ(0, std::memcmp(payload.data(), e.payload.data(), bytes)) << what;
    double inSq = 1, sentSq = 0;
    for (size_t i = 0; i < n; ++i) {
      const float expect = r0[i] + (x[i] - d[i]);
      ASSERT_EQ(residual[i], expect) << what << ": residual of element " << i;
      inSq += double(x[i]) * x[i];
      sentSq += double(d[i]) * d[i];
    }
    EXPECT_NEAR(norms.inputSq, inSq, 1e-9 * inSq) << what;
    // The sent squares are counted from the codes, code * unit before the decoder rounds it to
    // float (device/cpu/quantize.cc, QuantNorms): within 2^-23 of each decoded value's square.
    EXPECT_NEAR(norms.sentSq, sentSq, 0x1p-22 * sentSq + 1e-300) << what;
    // Without a residual or norms: the same payload, nothing written elsewhere.
    std::vector<unsigned char> again(payload.size());
    EXPECT_EQ(
        codec->encodeFeedback(x.data(), n, DataType::kFloat32, at, again.data(), nullptr, nullptr),
        bytes);
    EXPECT_EQ(0, std::memcmp(again.data(), e.payload.data(), bytes)) << what;
  }
}

TEST_P(QuantizeTest, DeterministicFromSeedCallRankOffset) {
  const Case& c = GetParam();
  const size_t n = 10000;
  const std::vector<float> x = input(n, 31);
  auto a = makeCodec(c.spec), b = makeCodec(c.spec);  // a fresh codec: no hidden state
  const ChunkInfo at{123, 4, 1};
  const Encoded e = encode(*a, x, at);
  EXPECT_EQ(e.payload, encode(*a, x, at).payload) << c.spec;
  EXPECT_EQ(e.payload, encode(*b, x, at).payload) << c.spec;
  if (!stochastic(c.kind)) return;
  EXPECT_NE(e.payload, encode(*a, x, ChunkInfo{123, 5, 1}).payload) << c.spec << ": call";
  EXPECT_NE(e.payload, encode(*a, x, ChunkInfo{123, 4, 2}).payload) << c.spec << ": rank";
  EXPECT_NE(e.payload, encode(*a, x, ChunkInfo{124, 4, 1}).payload) << c.spec << ": offset";
  if (std::strstr(c.spec, "seed")) return;
  auto reseeded =
      makeCodec(std::string(c.spec) + (std::strchr(c.spec, ':') ? "," : ":") + "seed=1");
  EXPECT_NE(e.payload, encode(*reseeded, x, at).payload) << c.spec << ": seed";
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name;
  for (const char* p = info.param.spec; *p; ++p)
    name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
  return name;
}

std::vector<Case> stochasticCases() {
  std::vector<Case> out;
  for (const Case& c : kCases)
    if (stochastic(c.kind)) out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Quantizers, QuantizeTest, ::testing::ValuesIn(kCases), caseName);
INSTANTIATE_TEST_SUITE_P(Quantizers, StochasticTest, ::testing::ValuesIn(stochasticCases()),
                         caseName);

// 1-bit SGD's rule itself: within a column every value decodes to the mean of its sign side.
TEST(QuantizeOnebit, DecodesToTheSideMeans) {
  for (const auto& [spec, block] :
       {std::pair<const char*, size_t>{"onebit", 256}, {"onebit:block=13", 13}}) {
    auto codec = makeCodec(spec);
    for (size_t n : kCounts) {
      const std::vector<float> x = input(n, 41);
      const Encoded e = encode(*codec, x, ChunkInfo{});
      const std::vector<float> d = decode(*codec, e, n, ChunkInfo{});
      for (size_t at = 0; at < n; at += block) {
        const size_t end = std::min(n, at + block);
        double sum[2] = {0, 0};
        size_t count[2] = {0, 0};
        for (size_t i = at; i < end; ++i) {
          sum[std::signbit(x[i])] += x[i];
          ++count[std::signbit(x[i])];
        }
        for (size_t i = at; i < end; ++i) {
          const int side = std::signbit(x[i]);
          const double mean = sum[side] / double(count[side]);
          ASSERT_NEAR(d[i], mean, 1e-5 * std::fabs(mean)) << spec << " count=" << n << " i=" << i;
        }
      }
    }
  }
}

// A payload encoded under another spec of the same size is refused, naming both settings.
TEST(QuantizeSpec, PayloadFromAnotherSpecIsRemoteError) {
  const std::pair<const char*, const char*> pairs[] = {
      {"int8:block=256", "int8:block=200"},
      {"qsgd:levels=16", "qsgd:levels=15"},
      {"onebit:block=256", "onebit:block=250"},
      {"terngrad:block=256", "terngrad:block=252"},
  };
  for (const auto& [mine, theirs] : pairs) {
    auto a = makeCodec(mine), b = makeCodec(theirs);
    const size_t n = 100;
    ASSERT_EQ(a->maxEncodedBytes(n, DataType::kFloat32), b->maxEncodedBytes(n, DataType::kFloat32));
    const std::vector<float> x = input(n, 5);
    const Encoded e = encode(*b, x, ChunkInfo{});
    std::vector<float> out(n);
    try {
      a->decode(e.payload.data(), e.bytes, n, DataType::kFloat32, ChunkInfo{}, out.data());
      ADD_FAILURE() << mine << " decoded a payload of " << theirs;
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kRemote);
      EXPECT_NE(std::string(err.what()).find("same spec"), std::string::npos) << err.what();
    }
  }
}

TEST(QuantizeSpec, BadSettingsAreInvalidArguments) {
  for (const char* spec :
       {"int8:block=0", "int8:block=2.5", "qsgd:levels=0", "qsgd:levels=128", "qsgd:levels=3.5",
        "qsgd:seed=-1", "onebit:block=0", "terngrad:block=1e9", "terngrad:seed=0.5"}) {
    try {
      makeCodec(spec);
      ADD_FAILURE() << spec << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << spec << ": " << e.what();
    }
  }
}

// The ratios the opening comments state, for a 1M-value chunk at the defaults.
TEST(QuantizeSpec, RatiosAtDefaults) {
  const size_t n = size_t{1} << 20;
  const std::pair<const char*, double> ratios[] = {{"int8", 3.94},
                                                   {"qsgd", 3.97},
                                                   {"qsgd:levels=7", 7.88},
                                                   {"onebit", 25.6},
                                                   {"terngrad", 15.06}};
  for (const auto& [spec, ratio] : ratios)
    EXPECT_NEAR(n * 4.0 / makeCodec(spec)->maxEncodedBytes(n, DataType::kFloat32), ratio, 0.01)
        << spec;
}

}  // namespace
}  // namespace squeeze
