// Unit tests for the sparsifier chunk codecs (compress/topk.cc, randk.cc, threshold.cc) and their
// kernels (device/sparse.h), for counts {1, 7, 1000, 100000}:
//   - topk: the k largest nonzero magnitudes (fewer only when x has fewer nonzeros), ties to the
//     lowest index, checked against a brute-force order; the decoded payload is x there and 0
//     elsewhere; the sampled and exact routes send the same payload; a payload padded with zero
//     entries (a GPU's, cpuPadSelection) decodes, combines and feeds back bit for bit as the
//     unpadded one;
//   - payload bounds (<= maxEncodedBytes, min(8k, 4 count) + 8), dense fallback at large ratios;
//   - combine == local + decode bit for bit (aliased and not), encodeFeedback's residual ==
//     residual + x - decode bit for bit;
//   - randk picks the same k distinct indices on every rank for the same (seed, call, offset),
//     different ones for another call, and payloads of different ranks add exactly;
//   - threshold sends exactly |x| >= threshold (also for a threshold no float represents);
//   - malformed payloads (bad tag, index >= count, unordered index, truncated, too many entries)
//     raise an Error with code kRemote from decode and from combine; bad keys raise
//     kInvalidArgument.
#include "device/sparse.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "compress/codecs.h"
#include "compress/topk.h"

namespace squeeze {
namespace {

const size_t kCounts[] = {1, 7, 1000, 100000};

std::unique_ptr<Codec> make(const std::string& spec) {
  return makeChunkCodec(CodecSpec::parse(spec));
}

// Gradient-like values: normal, a few zeros, a heavy tail (deterministic per seed).
std::vector<float> gradient(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<float> x(n);
  for (auto& v : x) {
    const int p = pick(gen);
    v = normal(gen);
    if (p == 0) v = 0.0f;
    if (p == 1) v *= 100.0f;
  }
  return x;
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

std::optional<ErrorCode> errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return std::nullopt;
}

struct Encoded {
  std::vector<char> payload;
  size_t bytes = 0;
};

Encoded encode(Codec& c, const std::vector<float>& x, const ChunkInfo& at = {}) {
  Encoded e;
  e.payload.resize(c.maxEncodedBytes(x.size(), DataType::kFloat32) + 64);
  e.bytes = c.encode(x.data(), x.size(), DataType::kFloat32, at, e.payload.data());
  EXPECT_LE(e.bytes, c.maxEncodedBytes(x.size(), DataType::kFloat32));
  return e;
}

std::vector<float> decode(Codec& c, const Encoded& e, size_t n, const ChunkInfo& at = {}) {
  std::vector<float> out(n, 123.0f);
  c.decode(e.payload.data(), e.bytes, n, DataType::kFloat32, at, out.data());
  return out;
}

// Checks dec = x on a set of at most k elements, 0 elsewhere, with every selected magnitude >=
// every unselected one; returns how many were selected.
size_t checkTopSet(const std::vector<float>& x, const std::vector<float>& dec, size_t k,
                   const std::string& what) {
  size_t sel = 0;
  uint32_t minSel = std::numeric_limits<uint32_t>::max(), maxUnsel = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t key = device::magnitudeKey(x[i]);
    if (dec[i] != 0.0f) {
      if (bits(dec[i]) != bits(x[i])) {
        ADD_FAILURE() << what << ": element " << i << " decodes to " << dec[i] << ", not " << x[i];
        return sel;
      }
      ++sel;
      minSel = std::min(minSel, key);
    } else {
      if (bits(dec[i]) != 0 && bits(dec[i]) != bits(x[i]))
        ADD_FAILURE() << what << ": element " << i << " is -0";
      maxUnsel = std::max(maxUnsel, key);
    }
  }
  EXPECT_LE(sel, k) << what;
  if (sel > 0) {
    EXPECT_GE(minSel, maxUnsel) << what << ": an unsent value is larger than a sent one";
  }
  return sel;
}

// The k largest nonzero magnitude keys of x, ties to the lowest index, as ascending indices.
std::vector<uint32_t> bruteTopk(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order;
  for (size_t i = 0; i < x.size(); ++i)
    if (device::magnitudeKey(x[i]) != 0) order.push_back(static_cast<uint32_t>(i));
  std::stable_sort(order.begin(), order.end(), [&x](uint32_t a, uint32_t b) {
    return device::magnitudeKey(x[a]) > device::magnitudeKey(x[b]);
  });
  order.resize(std::min(k, order.size()));
  std::sort(order.begin(), order.end());
  return order;
}

size_t nonzeros(const std::vector<float>& x) {
  return static_cast<size_t>(std::count_if(x.begin(), x.end(), [](float v) { return v != 0; }));
}

// combine == local + decode bit for bit, in place and not; encodeFeedback's residual ==
// residual + (x - decode), bit for bit.
void checkCombineAndFeedback(Codec& c, const std::vector<float>& x, const ChunkInfo& at,
                             const std::string& what) {
  const size_t n = x.size();
  Encoded e = encode(c, x, at);
  std::vector<float> dec = decode(c, e, n, at);
  std::vector<float> local = gradient(n, 777), out(n, 5.0f);
  c.combine(out.data(), local.data(), e.payload.data(), e.bytes, n, DataType::kFloat32, RedOp::kSum,
            at);
  std::vector<float> inPlace = local;
  c.combine(inPlace.data(), inPlace.data(), e.payload.data(), e.bytes, n, DataType::kFloat32,
            RedOp::kSum, at);
  for (size_t i = 0; i < n; ++i) {
    const float want = local[i] + dec[i];
    if (bits(out[i]) != bits(want) || bits(inPlace[i]) != bits(want)) {
      ADD_FAILURE() << what << ": combine at " << i << " gives " << out[i] << " / " << inPlace[i]
                    << ", local + decode is " << want;
      break;
    }
  }
  std::vector<float> residual = gradient(n, 4242), before = residual;
  std::vector<char> payload(c.maxEncodedBytes(n, DataType::kFloat32));
  EncodeNorms norms;
  const size_t bytes = c.encodeFeedback(x.data(), n, DataType::kFloat32, at, payload.data(),
                                        residual.data(), &norms);
  ASSERT_EQ(bytes, e.bytes) << what;
  EXPECT_EQ(std::memcmp(payload.data(), e.payload.data(), bytes), 0) << what;
  double in = 0, sent = 0;
  for (size_t i = 0; i < n; ++i) {
    in += double(x[i]) * x[i];
    sent += double(dec[i]) * dec[i];
    const float want = before[i] + (x[i] - dec[i]);
    if (bits(residual[i]) != bits(want)) {
      ADD_FAILURE() << what << ": residual at " << i << " is " << residual[i] << ", want " << want;
      break;
    }
  }
  EXPECT_NEAR(norms.inputSq, in, 1e-9 * in + 1e-30) << what;
  EXPECT_NEAR(norms.sentSq, sent, 1e-9 * sent + 1e-30) << what;
}

// ---- topk ---------------------------------------------------------------------------------

TEST(Topk, KeepCount) {
  EXPECT_EQ(keepCount(0.05, 1000), 50u);
  EXPECT_EQ(keepCount(0.001, 1000), 1u);
  EXPECT_EQ(keepCount(0.0011, 1000), 2u);
  EXPECT_EQ(keepCount(1e-9, 7), 1u);
  EXPECT_EQ(keepCount(1.0, 7), 7u);
  EXPECT_EQ(keepCount(0.5, 0), 0u);
}

TEST(Topk, ExactSelectsTheKLargest) {
  for (size_t n : kCounts)
    for (double ratio : {0.001, 0.01, 0.1, 0.3}) {
      const std::string what = "n=" + std::to_string(n) + " ratio=" + std::to_string(ratio);
      auto c = make("topk:ratio=" + std::to_string(ratio));
      const size_t k = keepCount(ratio, n);
      std::vector<float> x = gradient(n, static_cast<uint32_t>(n * 7 + k));
      Encoded e = encode(*c, x);
      const bool dense = 2 * k >= n;
      EXPECT_EQ(e.bytes, dense ? 8 + 4 * n : 8 + 8 * std::min(k, nonzeros(x))) << what;
      EXPECT_LE(e.bytes, 8 + std::min(8 * k, 4 * n)) << what;
      std::vector<float> dec = decode(*c, e, n);
      if (dense) {
        EXPECT_EQ(std::memcmp(dec.data(), x.data(), n * 4), 0) << what;
      } else {
        EXPECT_EQ(checkTopSet(x, dec, k, what), std::min(k, nonzeros(x))) << what;
      }
      checkCombineAndFeedback(*c, x, ChunkInfo{}, what);
    }
}

TEST(Topk, SampledKeepsTheGuaranteeAndMatchesExact) {
  for (size_t n : kCounts)
    for (double ratio : {0.001, 0.01, 0.1, 0.25}) {
      for (uint32_t seed = 0; seed < 3; ++seed) {
        const std::string what = "n=" + std::to_string(n) + " ratio=" + std::to_string(ratio) +
                                 " seed=" + std::to_string(seed);
        auto sampled = make("topk:sample=1,ratio=" + std::to_string(ratio));
        auto exact = make("topk:sample=0,ratio=" + std::to_string(ratio));
        const size_t k = keepCount(ratio, n);
        std::vector<float> x = gradient(n, seed * 1000003u + static_cast<uint32_t>(n));
        Encoded es = encode(*sampled, x), ee = encode(*exact, x);
        std::vector<float> dec = decode(*sampled, es, n);
        if (2 * k < n) checkTopSet(x, dec, k, what);
        // On continuous data the first pass keeps >= k candidates: the exact top k.
        ASSERT_EQ(es.bytes, ee.bytes) << what;
        EXPECT_EQ(std::memcmp(es.payload.data(), ee.payload.data(), es.bytes), 0) << what;
        if (seed == 0) checkCombineAndFeedback(*sampled, x, ChunkInfo{}, what);
      }
    }
}

// The selection kernel on inputs that defeat the sample: ties, mostly zeros, sorted, a spike;
// the result is always the k largest nonzeros with ties to the lowest index, by either route.
TEST(Topk, SelectionOnAdversarialInputs) {
  const size_t n = 100000;
  std::vector<std::pair<std::string, std::vector<float>>> inputs;
  inputs.push_back({"all equal", std::vector<float>(n, 1.5f)});
  std::vector<float> sparseX(n, 0.0f);
  for (size_t i = 0; i < 50; ++i) sparseX[i * 1999] = float(i + 1) * (i % 2 ? -1.0f : 1.0f);
  inputs.push_back({"50 nonzeros", sparseX});
  std::vector<float> signedZeros(n, -0.0f);
  for (size_t i = 0; i < n; i += 2) signedZeros[i] = 0.0f;
  for (size_t i = 0; i < 20; ++i) signedZeros[n - 1 - 7 * i] = float(i + 1);
  inputs.push_back({"20 nonzeros among signed zeros", signedZeros});
  std::vector<float> ramp(n);
  for (size_t i = 0; i < n; ++i) ramp[i] = float(i) * 1e-3f;
  inputs.push_back({"ramp", ramp});
  std::vector<float> spike = gradient(n, 5);
  for (size_t i = 40000; i < 40300; ++i) spike[i] = 1e6f + float(i);
  inputs.push_back({"contiguous spike", spike});
  std::vector<float> twoLevel(n, 1.0f);
  for (size_t i = 0; i < n; i += 3) twoLevel[i] = 2.0f;
  inputs.push_back({"two levels", twoLevel});
  std::vector<float> withInf = gradient(n, 6);
  withInf[17] = std::numeric_limits<float>::infinity();
  withInf[99999] = -std::numeric_limits<float>::infinity();
  inputs.push_back({"infinities", withInf});

  for (const auto& [name, x] : inputs)
    for (size_t k : {1ul, 100ul, 1000ul, 30000ul})
      for (bool sampled : {false, true}) {
        const std::string what = name + " k=" + std::to_string(k) + (sampled ? " sampled" : "");
        std::vector<uint32_t> idx(k + 8, 0xdeadbeef);
        const size_t m = device::cpuSelectTopk(x.data(), n, k, sampled, idx.data());
        ASSERT_EQ(m, std::min(k, nonzeros(x))) << what;
        EXPECT_EQ(idx[k], 0xdeadbeef) << what << ": wrote past k";
        idx.resize(m);
        EXPECT_EQ(idx, bruteTopk(x, k)) << what;
        std::vector<float> dec(n, 0.0f);
        for (size_t j = 0; j < m; ++j) dec[idx[j]] = x[idx[j]];
        EXPECT_EQ(checkTopSet(x, dec, k, what), std::min(k, nonzeros(x))) << what;
      }
}

// A GPU pads its selection to k with the chunk's lowest-index zeros; such a payload must
// decode, combine (onto -0 too) and leave the residual exactly as the host's unpadded one.
TEST(Topk, ZeroPaddingChangesNothing) {
  const size_t n = 50000, k = 400;
  std::vector<float> x(n, 0.0f);
  for (size_t i = 0; i < n; i += 3) x[i] = -0.0f;
  for (size_t i = 0; i < 150; ++i) x[(i * 331 + 7) % n] = float(int(i % 13) - 6) * 0.5f + 0.25f;
  std::vector<uint32_t> idx(k, 0xdeadbeef);
  const size_t m = device::cpuSelectTopk(x.data(), n, k, true, idx.data());
  ASSERT_EQ(m, 150u);
  std::vector<uint32_t> padded = idx;
  ASSERT_EQ(device::cpuPadSelection(x.data(), n, padded.data(), m, k), k);
  std::vector<uint32_t> want(idx.begin(), idx.begin() + m);  // the selection, then zeros below
  for (uint32_t i = 0; want.size() < k; ++i)
    if (x[i] == 0.0f && !std::binary_search(idx.begin(), idx.begin() + m, i)) want.push_back(i);
  std::sort(want.begin(), want.end());
  ASSERT_EQ(padded, want);

  auto c = make("topk:ratio=" + std::to_string(double(k) / n));
  ASSERT_EQ(c->maxEncodedBytes(n, DataType::kFloat32), 8 + 8 * k);
  auto payloadOf = [&](const std::vector<uint32_t>& ix, size_t entries) {
    Encoded e;
    e.bytes = 8 + 8 * entries;
    e.payload.resize(e.bytes + 64);
    const uint32_t header[2] = {sparse::kSparseFormat, static_cast<uint32_t>(entries)};
    std::memcpy(e.payload.data(), header, 8);
    std::memcpy(e.payload.data() + 8, ix.data(), 4 * entries);
    for (size_t j = 0; j < entries; ++j)
      std::memcpy(e.payload.data() + 8 + 4 * entries + 4 * j, &x[ix[j]], 4);
    return e;
  };
  const Encoded plain = payloadOf(idx, m), pad = payloadOf(padded, k);
  const Encoded host = encode(*c, x);
  ASSERT_EQ(host.bytes, plain.bytes);
  EXPECT_EQ(std::memcmp(host.payload.data(), plain.payload.data(), plain.bytes), 0);
  const std::vector<float> d0 = decode(*c, plain, n), d1 = decode(*c, pad, n);
  EXPECT_EQ(std::memcmp(d0.data(), d1.data(), n * 4), 0) << "decode";
  std::vector<float> local(n, -0.0f), o0(n), o1(n);
  for (size_t i = 1; i < n; i += 5) local[i] = 0.125f;
  c->combine(o0.data(), local.data(), plain.payload.data(), plain.bytes, n, DataType::kFloat32,
             RedOp::kSum, ChunkInfo{});
  c->combine(o1.data(), local.data(), pad.payload.data(), pad.bytes, n, DataType::kFloat32,
             RedOp::kSum, ChunkInfo{});
  EXPECT_EQ(std::memcmp(o0.data(), o1.data(), n * 4), 0) << "combine";
  std::vector<float> r0(n, -0.0f), r1(n, -0.0f);
  double in0 = 0, in1 = 0, sent0 = 0, sent1 = 0;
  device::cpuSparseFeedback(x.data(), n, idx.data(), m, r0.data(), &in0, &sent0);
  device::cpuSparseFeedback(x.data(), n, padded.data(), k, r1.data(), &in1, &sent1);
  EXPECT_EQ(std::memcmp(r0.data(), r1.data(), n * 4), 0) << "feedback";
  EXPECT_EQ(in0, in1);
  EXPECT_EQ(sent0, sent1);
}

TEST(Topk, DenseFallbackAndBound) {
  auto c = make("topk:ratio=0.5");
  std::vector<float> x = gradient(1000, 1);
  Encoded e = encode(*c, x);
  EXPECT_EQ(e.bytes, 8 + 4 * 1000u);
  EXPECT_EQ(c->maxEncodedBytes(1000, DataType::kFloat32), 8 + 4 * 1000u);
  EXPECT_EQ(decode(*c, e, 1000), x);
  checkCombineAndFeedback(*c, x, ChunkInfo{}, "dense");
  auto s = make("topk:ratio=0.1");
  EXPECT_EQ(s->maxEncodedBytes(1000, DataType::kFloat32), 8 + 8 * 100u);
  EXPECT_EQ(s->maxEncodedBytes(7, DataType::kFloat32), 8 + 8 * 1u);
  EXPECT_EQ(s->maxEncodedBytes(1, DataType::kFloat32), 8 + 4 * 1u);
  // An all-zero chunk sends nothing but the header.
  EXPECT_EQ(encode(*s, std::vector<float>(1000, 0.0f)).bytes, 8u);
}

// ---- malformed payloads ----------------------------------------------------------------------

void expectRemote(Codec& c, std::vector<char> payload, size_t bytes, size_t n,
                  const std::string& what) {
  payload.resize(std::max(payload.size(), bytes) + 16);
  std::vector<float> out(n), local(n, 1.0f);
  EXPECT_EQ(errorOf([&] {
              c.decode(payload.data(), bytes, n, DataType::kFloat32, ChunkInfo{}, out.data());
            }),
            ErrorCode::kRemote)
      << what << " (decode)";
  EXPECT_EQ(errorOf([&] {
              c.combine(out.data(), local.data(), payload.data(), bytes, n, DataType::kFloat32,
                        RedOp::kSum, ChunkInfo{});
            }),
            ErrorCode::kRemote)
      << what << " (combine)";
}

void putU32(std::vector<char>& p, size_t at, uint32_t v) { std::memcpy(&p[at], &v, 4); }

TEST(SparsePayload, MalformedRaisesRemote) {
  const size_t n = 1000;
  std::vector<float> x = gradient(n, 3);
  for (const char* spec : {"topk:ratio=0.01", "threshold:threshold=1.5"}) {
    auto c = make(spec);
    Encoded e = encode(*c, x);
    ASSERT_GT(e.bytes, 16u) << spec;
    uint32_t m;
    std::memcpy(&m, &e.payload[4], 4);
    ASSERT_GE(m, 2u) << spec;
    const std::string s = spec;
    std::vector<char> p = e.payload;
    putU32(p, 0, 0x12345678);
    expectRemote(*c, p, e.bytes, n, s + " bad tag");
    p = e.payload;
    putU32(p, 8, static_cast<uint32_t>(n));
    expectRemote(*c, p, e.bytes, n, s + " index == count");
    p = e.payload;
    putU32(p, 8 + 4 * (m - 1), 0xffffffffu);
    expectRemote(*c, p, e.bytes, n, s + " index 2^32-1");
    p = e.payload;
    std::memcpy(&p[12], &p[8], 4);  // the second index repeats the first
    expectRemote(*c, p, e.bytes, n, s + " repeated index");
    p = e.payload;
    std::swap_ranges(&p[8], &p[12], &p[12]);  // the first two indices swapped
    expectRemote(*c, p, e.bytes, n, s + " descending index");
    expectRemote(*c, e.payload, e.bytes - 1, n, s + " truncated by one byte");
    expectRemote(*c, e.payload, e.bytes - 8, n, s + " truncated by one pair");
    expectRemote(*c, e.payload, 5, n, s + " shorter than the header");
    p = e.payload;
    putU32(p, 4, m + 1);
    expectRemote(*c, p, e.bytes, n, s + " entries one too many for the size");
    p = e.payload;
    putU32(p, 4, 0x7fffffffu);
    expectRemote(*c, p, e.bytes, n, s + " count too large");
    p = e.payload;
    putU32(p, 0, sparse::kDenseFormat);
    expectRemote(*c, p, e.bytes, n, s + " dense tag with a sparse body");
  }
  // topk: more than k entries is refused even when the size is consistent.
  auto loose = make("topk:ratio=0.3"), tight = make("topk:ratio=0.01");
  Encoded e = encode(*loose, x);
  expectRemote(*tight, e.payload, e.bytes, n, "topk entries > k");
  // randk: the size is the only thing to check.
  auto r = make("randk:ratio=0.01");
  Encoded er = encode(*r, x);
  expectRemote(*r, er.payload, er.bytes - 4, n, "randk short");
  expectRemote(*r, er.payload, er.bytes + 4, n, "randk long");
}

// ---- randk ---------------------------------------------------------------------------------

TEST(Randk, SameIndicesOnEveryRankAndPayloadsAdd) {
  for (size_t n : kCounts)
    for (double ratio : {0.001, 0.01, 0.3, 1.0}) {
      const std::string what = "n=" + std::to_string(n) + " ratio=" + std::to_string(ratio);
      auto c = make("randk:seed=11,ratio=" + std::to_string(ratio));
      const size_t k = keepCount(ratio, n);
      std::vector<float> ones(n, 1.0f), twos(n, 2.0f);
      const ChunkInfo rank0{4096, 3, 0}, rank5{4096, 3, 5}, otherCall{4096, 4, 0};
      Encoded e0 = encode(*c, ones, rank0), e5 = encode(*c, twos, rank5);
      EXPECT_EQ(e0.bytes, 4 * k) << what;
      EXPECT_EQ(c->maxEncodedBytes(n, DataType::kFloat32), 4 * k) << what;
      std::vector<float> d0 = decode(*c, e0, n, rank0), d5 = decode(*c, e5, n, rank5);
      EXPECT_EQ(nonzeros(d0), k) << what << ": k distinct indices";
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(d0[i] * 2.0f, d5[i]) << what << " element " << i;
      // Payloads add: rank 5's partial sum re-encoded at rank 0 carries 1 + 2 at every index.
      std::vector<float> sum(n);
      c->combine(sum.data(), ones.data(), e5.payload.data(), e5.bytes, n, DataType::kFloat32,
                 RedOp::kSum, rank0);
      std::vector<float> back = decode(*c, encode(*c, sum, rank0), n, rank0);
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(back[i] == 0.0f || back[i] == 3.0f) << what << " element " << i;
      EXPECT_EQ(nonzeros(back), k) << what;
      if (n >= 1000 && k < n) {
        std::vector<float> d4 = decode(*c, encode(*c, ones, otherCall), n, otherCall);
        EXPECT_NE(d0, d4) << what << ": another call picks the same indices";
        auto seeded = make("randk:seed=12,ratio=" + std::to_string(ratio));
        EXPECT_NE(d0, decode(*seeded, encode(*seeded, ones, rank0), n, rank0))
            << what << ": another seed picks the same indices";
      }
      std::vector<float> x = gradient(n, 9);
      checkCombineAndFeedback(*c, x, rank0, what);
      std::vector<float> dx = decode(*c, encode(*c, x, rank0), n, rank0);
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(dx[i] == 0.0f || bits(dx[i]) == bits(x[i])) << what << " element " << i;
    }
}

// Every element gets picked about equally often over many calls.
TEST(Randk, PicksSpreadEvenly) {
  const size_t n = 1000, calls = 2000;
  auto c = make("randk:ratio=0.01");
  std::vector<int> picked(n, 0);
  std::vector<float> ones(n, 1.0f);
  for (size_t call = 0; call < calls; ++call) {
    std::vector<float> d =
        decode(*c, encode(*c, ones, ChunkInfo{0, call, 0}), n, ChunkInfo{0, call, 0});
    for (size_t i = 0; i < n; ++i) picked[i] += d[i] != 0.0f;
  }
  // Expected 20 picks each; a binomial(2000, 0.01) stays within [3, 45] with overwhelming odds.
  const auto [lo, hi] = std::minmax_element(picked.begin(), picked.end());
  EXPECT_GE(*lo, 3);
  EXPECT_LE(*hi, 45);
}

// ---- threshold -------------------------------------------------------------------------------

TEST(Threshold, SendsExactlyTheLargeValues) {
  for (size_t n : kCounts)
    for (double t : {0.5, 2.0, 50.0}) {
      const std::string what = "n=" + std::to_string(n) + " threshold=" + std::to_string(t);
      auto c = make("threshold:threshold=" + std::to_string(t));
      std::vector<float> x = gradient(n, static_cast<uint32_t>(n + 17));
      EXPECT_EQ(c->maxEncodedBytes(n, DataType::kFloat32), 8 + 4 * n) << what;
      Encoded e = encode(*c, x);
      size_t above = 0;
      for (float v : x) above += std::fabs(v) >= t;
      const bool dense = 2 * above >= n;
      EXPECT_EQ(e.bytes, dense ? 8 + 4 * n : 8 + 8 * above) << what;
      std::vector<float> dec = decode(*c, e, n);
      for (size_t i = 0; i < n; ++i) {
        const float want = dense || std::fabs(x[i]) >= t ? x[i] : 0.0f;
        ASSERT_EQ(bits(dec[i]), bits(want)) << what << " element " << i;
      }
      checkCombineAndFeedback(*c, x, ChunkInfo{}, what);
    }
}

TEST(Threshold, ComparesAgainstTheExactThreshold) {
  // 0.1 is not a float: float(0.1) is just above it and is sent, the float below is not.
  auto c = make("threshold:threshold=0.1");
  std::vector<float> x(100, 0.0f);
  x[3] = 0.1f;
  x[5] = -0.1f;
  x[7] = std::nextafter(0.1f, 0.0f);
  x[9] = -std::nextafter(0.1f, 0.0f);
  std::vector<float> dec = decode(*c, encode(*c, x), x.size());
  EXPECT_EQ(dec[3], 0.1f);
  EXPECT_EQ(dec[5], -0.1f);
  EXPECT_EQ(dec[7], 0.0f);
  EXPECT_EQ(dec[9], 0.0f);
  EXPECT_EQ(nonzeros(dec), 2u);
}

// ---- keys ------------------------------------------------------------------------------------

TEST(SparseKeys, BadValuesAreInvalidArguments) {
  for (const char* spec :
       {"topk:ratio=0", "topk:ratio=1.5", "topk:sample=0.5", "topk:sample=2", "randk:ratio=0",
        "randk:seed=-1", "randk:seed=1.5", "threshold", "threshold:threshold=0",
        "threshold:threshold=-1", "dgc:momentum=1.5", "dgc:warmup=2.5", "dgc:ratio=0",
        "dgc:sample=3", "dgc:clip=-1"})
    EXPECT_EQ(errorOf([&] { createCodecHandle(CodecSpec::parse(spec), 100, DataType::kFloat32); }),
              ErrorCode::kInvalidArgument)
        << spec;
  for (const char* spec : {"topk", "topk:ratio=1,sample=1", "randk:seed=5", "threshold:threshold=1",
                           "dgc", "dgc:ratio=0.01,momentum=0,clip=5,warmup=100,sample=0"})
    EXPECT_EQ(errorOf([&] { createCodecHandle(CodecSpec::parse(spec), 100, DataType::kFloat32); }),
              std::nullopt)
        << spec;
  EXPECT_EQ(errorOf([&] { createCodecHandle(CodecSpec::parse("topk"), 100, DataType::kInt32); }),
            ErrorCode::kInvalidArgument);
}

// ---- kernels ---------------------------------------------------------------------------------

TEST(SparseKernels, SelectAtLeastStopsAtTheCap) {
  std::vector<float> x = gradient(100003, 8);
  const uint32_t key = device::magnitudeKey(1.0f);
  size_t want = 0;
  for (float v : x) want += device::magnitudeKey(v) >= key;
  std::vector<uint32_t> idx(want + device::kSelectSlack + 1, 0xdeadbeef);
  EXPECT_EQ(device::cpuSelectAtLeast(x.data(), x.size(), key, idx.data(), want), want);
  EXPECT_EQ(idx[want + device::kSelectSlack], 0xdeadbeef);
  for (size_t j = 0; j < want; ++j) {
    ASSERT_GE(std::fabs(x[idx[j]]), 1.0f);
    if (j) {
      ASSERT_LT(idx[j - 1], idx[j]);
    }
  }
  EXPECT_EQ(device::cpuSelectAtLeast(x.data(), x.size(), key, idx.data(), want - 1),
            static_cast<size_t>(-1));
  EXPECT_EQ(idx[want + device::kSelectSlack], 0xdeadbeef);
  // A tail shorter than a vector, and nothing at all.
  const float few[5] = {1.0f, 0.0f, -2.0f, -0.0f, 3.0f};
  EXPECT_EQ(device::cpuSelectAtLeast(few, 5, 1, idx.data(), 5), 3u);
  EXPECT_EQ(idx[1], 2u);
  EXPECT_EQ(device::cpuSelectAtLeast(x.data(), 0, 1, idx.data(), 5), 0u);
}

// The scalar, AVX2 and AVX-512 passes select the same indices and detect overflow at the same
// cap, for lengths around the vector widths and densities from none to all.
TEST(SparseKernels, EveryVectorPathSelectsTheSame) {
  struct Reset {
    ~Reset() { device::cpuForceSelectPath(device::SelectPath::kBest); }
  } reset;
  std::vector<float> x = gradient(5000, 21);
  for (size_t i = 100; i < 200; ++i) x[i] = std::numeric_limits<float>::quiet_NaN();
  int paths = 0;
  for (auto path :
       {device::SelectPath::kScalar, device::SelectPath::kAvx2, device::SelectPath::kAvx512}) {
    if (!device::cpuForceSelectPath(path)) continue;  // not on this CPU
    ++paths;
    for (size_t n : {0ul, 1ul, 15ul, 16ul, 17ul, 31ul, 33ul, 63ul, 64ul, 65ul, 129ul, 5000ul})
      for (float t : {0.0f, 0.01f, 1.0f, 2.5f, 1e30f}) {
        const uint32_t key = std::max<uint32_t>(1, device::magnitudeKey(t));
        std::vector<uint32_t> want;
        for (size_t i = 0; i < n; ++i)
          if (device::magnitudeKey(x[i]) >= key) want.push_back(static_cast<uint32_t>(i));
        for (size_t cap : {want.size(), want.size() + 1, want.size() ? want.size() - 1 : 0}) {
          std::vector<uint32_t> idx(cap + device::kSelectSlack);
          const size_t got = device::cpuSelectAtLeast(x.data(), n, key, idx.data(), cap);
          const std::string what = "path " + std::to_string(static_cast<int>(path)) +
                                   " n=" + std::to_string(n) + " t=" + std::to_string(t) +
                                   " cap=" + std::to_string(cap);
          if (want.size() > cap) {
            EXPECT_EQ(got, static_cast<size_t>(-1)) << what;
          } else {
            ASSERT_EQ(got, want.size()) << what;
            idx.resize(got);
            EXPECT_EQ(idx, want) << what;
          }
        }
      }
    // Whole top-k selections agree with the default path's.
    std::vector<float> big = gradient(100000, 22);
    for (size_t k : {1ul, 100ul, 5000ul}) {
      std::vector<uint32_t> a(k), b(k);
      const size_t ma = device::cpuSelectTopk(big.data(), big.size(), k, true, a.data());
      device::cpuForceSelectPath(device::SelectPath::kBest);
      const size_t mb = device::cpuSelectTopk(big.data(), big.size(), k, true, b.data());
      device::cpuForceSelectPath(path);
      EXPECT_EQ(ma, mb);
      EXPECT_EQ(a, b);
    }
  }
  EXPECT_GE(paths, 1);
}

TEST(SparseKernels, RandomStrataAreDistinctAndAscending) {
  for (size_t n : {1ul, 7ul, 1000ul, 100000ul})
    for (size_t k : {1ul, 3ul, 7ul, 999ul, 1000ul}) {
      if (k > n) continue;
      std::vector<uint32_t> idx(k);
      device::cpuRandomStrata(1, 2, 3, n, k, idx.data());
      for (size_t j = 0; j < k; ++j) {
        ASSERT_LT(idx[j], n);
        if (j) {
          ASSERT_LT(idx[j - 1], idx[j]);
        }
      }
    }
}

// The fused select-and-feedback kernels give the two steps' indices and residual bits (residual
// + x where unsent, untouched where sent) on every vector path, whatever the residual holds
// (0, as after a handle's prepare: the pass adds at once; nonzero or -0 here and there: it stops
// adding there), and where the pass must undo adds: the selection's fallback (a sample that
// sees only the large values), ties past the cap, a threshold payload that goes dense.
TEST(SparseKernels, FusedFeedbackEqualsTheTwoSteps) {
  struct Reset {
    ~Reset() { device::cpuForceSelectPath(device::SelectPath::kBest); }
  } reset;
  const size_t n = 100003;  // not whole vectors: the scalar tail too
  std::vector<std::pair<std::string, std::vector<float>>> inputs;
  inputs.push_back({"gradient", gradient(n, 31)});
  inputs.push_back({"all equal", std::vector<float>(n, 1.5f)});
  std::vector<float> fooled(n, 1e-3f);  // the sample sees only the large values
  const size_t s = device::topkSampleSize(n);
  for (size_t j = 0; j < s; ++j) fooled[device::topkSamplePosition(j, n / s)] = 50.0f + float(j);
  for (size_t i = 7; i < n; i += 13) fooled[i] = 1e-2f * float(i % 5);
  inputs.push_back({"sample fooled", fooled});
  std::vector<float> withInf = gradient(n, 32);
  withInf[5] = std::numeric_limits<float>::infinity();
  withInf[n - 3] = -std::numeric_limits<float>::infinity();
  inputs.push_back({"infinities", withInf});
  std::vector<std::pair<std::string, std::vector<float>>> residuals;
  residuals.push_back({"zero", std::vector<float>(n, 0.0f)});
  std::vector<float> fewSet(n, 0.0f);
  for (size_t i = 60000; i < n; i += 977) fewSet[i] = 0.37f;
  fewSet[99998] = -0.0f;
  fewSet[n - 1] = 1.0f;  // in the tail
  residuals.push_back({"a few set", fewSet});
  residuals.push_back({"gradient", gradient(n, 33)});

  // The two steps, by definition.
  auto reference = [](const std::vector<float>& x, const std::vector<uint32_t>& idx,
                      std::vector<float> r) {
    std::vector<char> sent(x.size(), 0);
    for (uint32_t i : idx) sent[i] = x[i] != 0.0f;
    for (size_t i = 0; i < x.size(); ++i)
      if (!sent[i]) r[i] += x[i];
    return r;
  };
  auto sameBits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (auto path :
       {device::SelectPath::kScalar, device::SelectPath::kAvx2, device::SelectPath::kAvx512}) {
    if (!device::cpuForceSelectPath(path)) continue;  // not on this CPU
    for (const auto& [xName, x] : inputs)
      for (const auto& [rName, r0] : residuals) {
        const std::string what = "path " + std::to_string(static_cast<int>(path)) + " " + xName +
                                 ", residual " + rName;
        for (size_t k : {1ul, 1000ul, 5000ul}) {
          std::vector<uint32_t> want(k), got(2 * k);
          want.resize(device::cpuSelectTopk(x.data(), n, k, true, want.data()));
          std::vector<float> r = r0;
          double in = 0, sent = 0;
          const size_t m = device::cpuSelectTopkFeedback(x.data(), n, k, true, got.data(),
                                                         r.data(), &in, &sent);
          ASSERT_EQ(m, want.size()) << what << " k=" << k;
          for (size_t j = 0; j < m; ++j)  // the values follow the indices
            ASSERT_EQ(got[m + j], bits(x[want[j]])) << what << " k=" << k << " value " << j;
          got.resize(m);
          EXPECT_EQ(got, want) << what << " k=" << k;
          EXPECT_TRUE(sameBits(r, reference(x, want, r0))) << what << " k=" << k;
          double wantIn = 0, wantSent = 0;
          for (float v : x) wantIn += double(v) * v;
          for (uint32_t i : want) wantSent += double(x[i]) * x[i];
          if (std::isfinite(wantIn)) {
            EXPECT_NEAR(in, wantIn, 1e-9 * wantIn) << what;
            EXPECT_NEAR(sent, wantSent, 1e-9 * wantSent) << what;
          }
          // randk's kernel: the values and the feedback of given indices in one pass.
          std::vector<float> values(want.size()), wantValues(want.size());
          for (size_t j = 0; j < want.size(); ++j) wantValues[j] = x[want[j]];
          r = r0;
          device::cpuGatherFeedback(x.data(), n, want.data(), want.size(), values.data(),
                                    r.data(), nullptr, nullptr);
          EXPECT_TRUE(sameBits(values, wantValues)) << what << " gather k=" << k;
          EXPECT_TRUE(sameBits(r, reference(x, want, r0))) << what << " gather k=" << k;
        }
        for (float t : {1.0f, 3.0f, 60.0f})
          for (size_t cap : {size_t(10), size_t(2000), n / 2}) {
            const uint32_t key = device::magnitudeKey(t);
            std::vector<uint32_t> want(cap + device::kSelectSlack), got(want.size());
            const size_t mw = device::cpuSelectAtLeast(x.data(), n, key, want.data(), cap);
            std::vector<float> r = r0;
            const size_t mg = device::cpuSelectAtLeastFeedback(x.data(), n, key, got.data(), cap,
                                                               r.data(), nullptr, nullptr);
            const std::string at = what + " t=" + std::to_string(t) + " cap=" +
                                   std::to_string(cap);
            ASSERT_EQ(mg, mw) << at;
            if (mw == static_cast<size_t>(-1)) {
              EXPECT_TRUE(sameBits(r, r0)) << at << ": a dense payload's residual changed";
              continue;
            }
            want.resize(mw);
            got.resize(mg);
            EXPECT_EQ(got, want) << at;
            EXPECT_TRUE(sameBits(r, reference(x, want, r0))) << at;
          }
      }
  }
}

// The hashes and positions the CPU and CUDA backends share (device/sparse.h) are pinned: randk's
// indices and the sampled top-k's thresholds must not change between versions or backends.
TEST(SparseKernels, SharedMathIsPinned) {
  EXPECT_EQ(device::sparseHash(0), 0xe220a8397b1dcdafull);  // splitmix64's first output
  std::vector<uint32_t> idx(5);
  device::cpuRandomStrata(1, 2, 3, 1000, 5, idx.data());
  EXPECT_EQ(idx, (std::vector<uint32_t>{14, 218, 477, 639, 966}));
  const size_t want[] = {88, 156, 259, 311, 443};
  for (size_t j = 0; j < 5; ++j) EXPECT_EQ(device::topkSamplePosition(j, 100), want[j]);
  for (size_t n : {32768ul, 100003ul, 4000000000ul}) {
    const size_t s = device::topkSampleSize(n), step = n / s;
    for (size_t j : {size_t(0), s / 2, s - 1}) {
      const size_t at = device::topkSamplePosition(j, step);
      EXPECT_GE(at, j * step);
      EXPECT_LT(at, (j + 1) * step);
    }
  }
  EXPECT_EQ(device::magnitudeKey(-1.0f), device::magnitudeKey(1.0f));
  EXPECT_EQ(device::magnitudeKey(-0.0f), 0u);
}

}  // namespace
}  // namespace squeeze
