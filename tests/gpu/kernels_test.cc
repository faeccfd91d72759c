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
//   - pinned, mapped host memory as kernel operands (unified addressing);
//   - gpuReduceRanks at 1, 2, 5 and 8 ranks, and gpuCheckCalls on the ranks' call words.
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

namespace squeeze::device {
namespace {

const size_t kSizes[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                  DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBfloat16};
constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};

// Device bytes with room for a misalignment offset on either side.
class Dev {
 public:
  explicit Dev(size_t bytes) : buf_(bytes + 64) {}
  Dev(const void* host, size_t bytes, size_t offset = 0) : buf_(bytes + 64) {
    put(host, bytes, offset);
  }
  void put(const void* host, size_t bytes, size_t offset = 0) {
    if (!bytes) return;
    cuda::check(cudaMemcpy(at(offset), host, bytes, cudaMemcpyHostToDevice), "upload");
    // From pageable memory cudaMemcpy may return before the copy lands (it is staged), and the
    // kernels run on non-blocking streams, which do not wait for the legacy one.
    cuda::check(cudaStreamSynchronize(cudaStreamLegacy), "upload");
  }
  template <class T = unsigned char>
  std::vector<T> get(size_t count, size_t offset = 0) const {
    std::vector<T> h(count);
    if (count)
      cuda::check(cudaMemcpy(h.data(), at(offset), count * sizeof(T), cudaMemcpyDeviceToHost),
                  "download");
    return h;
  }
  unsigned char* at(size_t offset) const {
    return static_cast<unsigned char*>(buf_.data()) + offset;
  }

 private:
  cuda::DeviceBuffer buf_;
};

std::vector<unsigned char> randomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t r = gen();
    std::memcpy(v.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return v;
}

// Random elements: integers any bits; floats mostly ordinary values (so sums and products mean
// something), with some arbitrary bit patterns (subnormals, infinities, NaN) mixed in.
std::vector<unsigned char> randomElements(DataType t, size_t n, uint64_t seed) {
  std::vector<unsigned char> v = randomBytes(n * dataTypeSize(t), seed);
  std::mt19937 gen(static_cast<uint32_t>(seed * 31 + 7));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (size_t i = 0; i < n; ++i) {
    if (gen() % 8 == 0) continue;  // keep the random bits
    const float f = normal(gen);
    unsigned char* p = v.data() + i * dataTypeSize(t);
    switch (t) {
      case DataType::kFloat16: {
        const uint16_t h = floatToHalf(f);
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBfloat16: {
        const uint16_t h = floatToBfloat16(f);
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kFloat32:
        std::memcpy(p, &f, 4);
        break;
      case DataType::kFloat64: {
        const double d = double(f) * 1e-3;
        std::memcpy(p, &d, 8);
        break;
      }
      default:
        break;
    }
  }
  return v;
}

bool isNan(DataType t, const unsigned char* p) {
  switch (t) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    }
    case DataType::kBfloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    }
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return std::isnan(d);
    }
    default:
      return false;
  }
}

// Byte-for-byte equality of n elements (two NaNs of the type are equal).
void expectSame(DataType t, const unsigned char* cpu, const unsigned char* gpu, size_t n,
                const std::string& what) {
  const size_t size = dataTypeSize(t);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char *c = cpu + i * size, *g = gpu + i * size;
    if (std::memcmp(c, g, size) == 0 || (isNan(t, c) && isNan(t, g))) continue;
    if (bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements differ, first at "
                     << first;
}
void expectSameFloats(const std::vector<float>& cpu, const std::vector<float>& gpu,
                      const std::string& what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  expectSame(DataType::kFloat32, reinterpret_cast<const unsigned char*>(cpu.data()),
             reinterpret_cast<const unsigned char*>(gpu.data()), cpu.size(), what);
}
void expectSameBytes(const std::vector<unsigned char>& cpu, const std::vector<unsigned char>& gpu,
                     const std::string& what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  expectSame(DataType::kUint8, cpu.data(), gpu.data(), cpu.size(), what);
}

std::string name(DataType t, RedOp op, size_t n) {
  return std::string(dataTypeName(t)) + "/" + redOpName(op) + "/n=" + std::to_string(n);
}

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
  std::memcpy(pa.data(), a.data(), a.size());
  Dev db(b.data(), b.size());
  std::vector<unsigned char> want(a.size());
  cpuReduceFn(DataType::kFloat32, RedOp::kSum)(want.data(), a.data(), b.data(), n);
  gpuReduce(DataType::kFloat32, RedOp::kSum, pout.data(), pa.data(), db.at(0), n, stream.get());
  stream.synchronize("gpuReduce pinned");
  expectSame(DataType::kFloat32, want.data(), static_cast<unsigned char*>(pout.data()), n,
             "pinned");
}

// gpuReduceRanks (the stream collectives' reduction and copy) against cpuReduceRanks and
// against the pairwise fold in rank order it is defined as: every datatype and op at 1 (a copy),
// 2, 5 and 8 ranks, inputs aligned and misaligned (vectors, or element by element), avg divided by
// the ranks; it runs only where the verdict is 0. gpuCheckCalls against cpuCheckCalls: agreeing
// words, a rank whose words differ (the lowest such rank is named, with both ranks' words), a
// released stream, and an error already there (sticky).
constexpr uint32_t kVerdictUnset = 0x5a5a5a5a;

std::vector<unsigned char> runRanksOnGpu(DataType t, RedOp op,
                                         const std::vector<std::vector<unsigned char>>& inputs,
                                         const std::vector<size_t>& offsets, size_t n,
                                         uint32_t verdict, int divisor) {
  const size_t size = dataTypeSize(t);
  cuda::Stream stream;
  std::vector<std::unique_ptr<Dev>> dev;
  RankInputs r{};
  r.nranks = static_cast<int>(inputs.size());
  for (size_t q = 0; q < inputs.size(); ++q) {
    dev.push_back(std::make_unique<Dev>(inputs[q].data(), n * size, offsets[q] * size));
    r.in[q] = dev.back()->at(offsets[q] * size);
  }
  Dev v(&verdict, sizeof verdict);
  r.verdict = reinterpret_cast<const uint32_t*>(v.at(0));
  const std::vector<unsigned char> sentinel(n * size, 0x5a);
  Dev out(sentinel.data(), sentinel.size());
  gpuReduceRanks(t, op, out.at(0), r, n, divisor, stream.get());
  stream.synchronize("gpuReduceRanks");
  return out.get(n * size);
}

TEST(GpuReduce, RanksFoldInRankOrderLikeTheCpu) {
  for (DataType t : kAllTypes) {
    const size_t size = dataTypeSize(t);
    for (int ranks : {1, 2, 5, 8}) {
      for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000), (size_t(1) << 16) + 3}) {
        std::vector<std::vector<unsigned char>> inputs;
        for (int q = 0; q < ranks; ++q) inputs.push_back(randomElements(t, n, 40 + 7 * q + n));
        for (RedOp op : kAllOps) {
          const int divisor = op == RedOp::kAvg ? ranks : 1;
          // The definition: a pairwise fold in rank order, then avg's division.
          std::vector<unsigned char> want = inputs[0];
          for (int q = 1; q < ranks && n; ++q)
            cpuReduceFn(t, op)(want.data(), want.data(), inputs[q].data(), n);
          if (divisor > 1 && n) cpuDivide(want.data(), n, t, divisor);
          // The CPU twin gives it.
          const uint32_t ok = 0;
          RankInputs host{};
          host.nranks = ranks;
          host.verdict = &ok;
          for (int q = 0; q < ranks; ++q) host.in[q] = inputs[q].data();
          std::vector<unsigned char> twin(n * size);
          cpuReduceRanks(t, op, twin.data(), host, n, divisor);
          const std::string what = name(t, op, n) + " ranks=" + std::to_string(ranks);
          expectSame(t, want.data(), twin.data(), n, what + " (cpu twin)");
          // The GPU, aligned and with one input misaligned (element by element).
          for (size_t skew : {size_t(0), size_t(1)}) {
            std::vector<size_t> offsets(ranks, 0);
            offsets[ranks - 1] = skew;
            const auto got = runRanksOnGpu(t, op, inputs, offsets, n, 0, divisor);
            expectSame(t, want.data(), got.data(), n, what + " skew " + std::to_string(skew));
          }
        }
      }
    }
  }
  // A verdict other than 0 (a disagreement, a released stream): nothing is read or written.
  const size_t n = 4099;
  const std::vector<std::vector<unsigned char>> inputs = {
      randomElements(DataType::kFloat32, n, 1), randomElements(DataType::kFloat32, n, 2)};
  for (uint32_t verdict : {2u, kReleased})
    EXPECT_EQ(runRanksOnGpu(DataType::kFloat32, RedOp::kSum, inputs, {0, 0}, n, verdict, 1),
              std::vector<unsigned char>(n * 4, 0x5a))
        << "verdict " << verdict << ": the reduction wrote its output";
}

// Runs the check on the GPU and on the CPU from the same words and error word; both must leave
// the same error words and verdict.
struct CheckResult {
  std::vector<uint32_t> error;
  uint32_t verdict;
};
CheckResult checkOn(bool gpu, const std::vector<std::array<uint32_t, kCallWords>>& words,
                    const std::array<uint32_t, kCallWords>& expect, uint32_t error0) {
  cuda::PinnedBuffer pinned((kMaxReduceRanks + 1) * 64);
  auto* slots = static_cast<uint32_t*>(pinned.data());
  std::memset(slots, 0, (kMaxReduceRanks + 1) * 64);
  CallCheck c{};
  c.nranks = static_cast<int>(words.size());
  for (int q = 0; q < c.nranks; ++q) {
    std::memcpy(slots + 16 * (q + 1), words[q].data(), sizeof(words[q]));
    c.call[q] = slots + 16 * (q + 1);
  }
  std::memcpy(c.expect, expect.data(), sizeof(c.expect));
  slots[0] = error0;
  c.error = slots;
  CheckResult r;
  if (gpu) {
    cuda::Stream stream;
    const uint32_t unset = kVerdictUnset;
    Dev v(&unset, sizeof unset);
    gpuCheckCalls(c, reinterpret_cast<uint32_t*>(v.at(0)), stream.get());
    stream.synchronize("gpuCheckCalls");
    r.verdict = v.get<uint32_t>(1)[0];
  } else {
    r.verdict = kVerdictUnset;
    cpuCheckCalls(c, &r.verdict);
  }
  r.error.assign(slots, slots + kErrorWords);
  return r;
}

TEST(GpuReduce, CallCheckNamesTheFirstRankThatDiffers) {
  const std::array<uint32_t, kCallWords> mine = {3, 4099, 0x00070000, 1};
  struct Case {
    const char* what;
    int ranks;
    int differs[2];  // ranks whose count differs (-1: none)
    uint32_t error0;
    uint32_t verdict;
  };
  const Case cases[] = {{"all agree", 8, {-1, -1}, 0, 0},
                        {"rank 2 and 6 differ", 8, {2, 6}, 0, 3},
                        {"rank 0 differs", 2, {0, -1}, 0, 1},
                        {"released", 4, {-1, -1}, kReleased, kReleased},
                        {"an earlier error stays", 4, {1, -1}, 4, 4},
                        // No rank: a gate, the verdict is the error word as it stands.
                        {"a gate, clean", 0, {-1, -1}, 0, 0},
                        {"a gate, released", 0, {-1, -1}, kReleased, kReleased}};
  for (const Case& k : cases) {
    std::vector<std::array<uint32_t, kCallWords>> words(k.ranks, mine);
    for (int q : k.differs)
      if (q >= 0) words[q][1] = 2 * 4099 + q;
    const CheckResult cpu = checkOn(false, words, mine, k.error0);
    const CheckResult gpu = checkOn(true, words, mine, k.error0);
    EXPECT_EQ(cpu.verdict, k.verdict) << k.what;
    EXPECT_EQ(gpu.verdict, k.verdict) << k.what;
    EXPECT_EQ(gpu.error, cpu.error) << k.what;
    if (k.error0 == 0 && k.verdict != 0) {
      EXPECT_EQ(cpu.error[2], words[k.verdict - 1][1]) << k.what << ": that rank's count";
      EXPECT_EQ(cpu.error[2 + kCallWords], mine[1]) << k.what << ": this rank's count";
    }
  }
}

// A round's words to its peers are stored only under a clean verdict, by the GPU as by the CPU.
TEST(GpuReduce, PublishWordsOnlyUnderACleanVerdict) {
  for (uint32_t verdict : {0u, 2u, kReleased})
    for (bool gpu : {false, true}) {
      cuda::PinnedBuffer pinned(5 * 64);
      auto* words = static_cast<uint32_t*>(pinned.data());
      std::memset(words, 0, 5 * 64);
      PublishWords p{};
      p.count = 5;
      p.signals = 1;
      for (int i = 0; i < p.count; ++i) {
        p.word[i] = words + 16 * i;
        p.value[i] = 100 + i;
      }
      if (gpu) {
        cuda::Stream stream;
        Dev v(&verdict, sizeof verdict);
        p.verdict = reinterpret_cast<const uint32_t*>(v.at(0));
        gpuPublishWords(p, stream.get());
        stream.synchronize("gpuPublishWords");
      } else {
        p.verdict = &verdict;
        cpuPublishWords(p);
      }
      for (int i = 0; i < p.count; ++i)
        EXPECT_EQ(words[16 * i], verdict == 0 ? 100u + i : 0u)
            << (gpu ? "gpu" : "cpu") << ", verdict " << verdict << ", word " << i;
    }
}

// A small round's check and first fold, one block: the separate calls' verdict, error words and
// output, at every type and op, aligned and not; nothing written under a disagreement.
TEST(GpuReduce, ASmallRoundsCheckAndFoldAreTheSeparateCalls) {
  const std::array<uint32_t, kCallWords> mine = {9, 4099, 0x00070000, 1};
  for (DataType t : kAllTypes)
    for (RedOp op : kAllOps)
      for (int ranks : {2, 8})
        for (size_t n : {size_t(0), size_t(7), size_t(4099)})
          for (int differs : {-1, 1}) {
            const size_t size = dataTypeSize(t);
            const int divisor = op == RedOp::kAvg ? ranks : 1;
            std::vector<std::vector<unsigned char>> inputs;
            for (int q = 0; q < ranks; ++q) inputs.push_back(randomElements(t, n, 70 + q + n));
            cuda::PinnedBuffer pinned((kMaxReduceRanks + 1) * 64);
            auto* slots = static_cast<uint32_t*>(pinned.data());
            std::memset(slots, 0, (kMaxReduceRanks + 1) * 64);
            CallCheck c{};
            c.nranks = ranks;
            for (int q = 0; q < ranks; ++q) {
              std::memcpy(slots + 16 * (q + 1), mine.data(), sizeof(mine));
              if (q == differs) slots[16 * (q + 1) + 1] = 77;
              c.call[q] = slots + 16 * (q + 1);
            }
            std::memcpy(c.expect, mine.data(), sizeof(c.expect));
            c.error = slots;
            // The separate calls on the CPU: the definition.
            std::vector<unsigned char> want(n * size, 0x5a);
            uint32_t wantVerdict = kVerdictUnset;
            RankInputs host{};
            host.nranks = ranks;
            host.verdict = &wantVerdict;
            for (int q = 0; q < ranks; ++q) host.in[q] = inputs[q].data();
            cpuCheckCalls(c, &wantVerdict);
            cpuReduceRanks(t, op, want.data(), host, n, divisor);
            const std::vector<uint32_t> wantError(slots, slots + kErrorWords);
            const std::string what = name(t, op, n) + " ranks=" + std::to_string(ranks) +
                                     (differs >= 0 ? " (rank 1 differs)" : "");
            EXPECT_EQ(wantVerdict, differs >= 0 ? uint32_t(differs + 1) : 0u) << what;
            // The fused kernel, the last input one element off (element by element).
            for (size_t skew : {size_t(0), size_t(1)}) {
              std::memset(slots, 0, kErrorWords * 4);
              cuda::Stream stream;
              std::vector<std::unique_ptr<Dev>> dev;
              RankInputs r{};
              r.nranks = ranks;
              for (int q = 0; q < ranks; ++q) {
                const size_t at = q == ranks - 1 ? skew * size : 0;
                dev.push_back(std::make_unique<Dev>(inputs[q].data(), n * size, at));
                r.in[q] = dev.back()->at(at);
              }
              const uint32_t unset = kVerdictUnset;
              Dev v(&unset, sizeof unset);
              r.verdict = reinterpret_cast<const uint32_t*>(v.at(0));
              const std::vector<unsigned char> sentinel(n * size, 0x5a);
              Dev out(sentinel.data(), sentinel.size());
              gpuCheckReduceRanks(c, reinterpret_cast<uint32_t*>(v.at(0)), t, op, out.at(0), r,
                                  n, divisor, stream.get());
              stream.synchronize("gpuCheckReduceRanks");
              const std::string at = what + " skew " + std::to_string(skew);
              EXPECT_EQ(v.get<uint32_t>(1)[0], wantVerdict) << at;
              EXPECT_EQ(std::vector<uint32_t>(slots, slots + kErrorWords), wantError) << at;
              const auto got = out.get(n * size);
              expectSame(t, want.data(), got.data(), n, at);
            }
          }
}

// A small round's gate, copies and words, one block: copied and published only where the error
// word is clean, by the GPU as by the CPU; the verdict is the error word.
TEST(GpuReduce, ASmallRoundsGateCopiesAndWordsAreTheSeparateCalls) {
  const size_t sizes[] = {0, 1001, 32 << 10};
  const size_t skews[] = {0, 3, 0};
  for (uint32_t error : {0u, 2u, kReleased})
    for (bool gpu : {false, true}) {
      const std::string what =
          std::string(gpu ? "gpu" : "cpu") + ", error word " + std::to_string(error);
      cuda::PinnedBuffer pinned(6 * 64);
      auto* words = static_cast<uint32_t*>(pinned.data());
      std::memset(words, 0, 6 * 64);
      words[16 * 5] = error;
      std::vector<std::vector<unsigned char>> src;
      std::vector<std::unique_ptr<Dev>> srcDev, dstDev;
      RoundCopies copies{};
      for (int k = 0; k < 3; ++k) {
        src.push_back(randomElements(DataType::kUint8, sizes[k], 90 + k));
        const std::vector<unsigned char> zero(sizes[k] + 8, 0);
        srcDev.push_back(std::make_unique<Dev>(src[k].data(), sizes[k], skews[k]));
        dstDev.push_back(std::make_unique<Dev>(zero.data(), zero.size()));
        copies.dst[k] = gpu ? static_cast<void*>(dstDev[k]->at(skews[k])) : nullptr;
        copies.src[k] = gpu ? static_cast<const void*>(srcDev[k]->at(skews[k])) : src[k].data();
        copies.bytes[k] = sizes[k];
      }
      copies.count = 3;
      std::vector<std::vector<unsigned char>> hostDst;
      for (int k = 0; k < 3; ++k) hostDst.emplace_back(sizes[k], 0);
      if (!gpu)
        for (int k = 0; k < 3; ++k) copies.dst[k] = hostDst[k].data();
      PublishWords p{};
      p.count = 5;
      p.signals = 1;
      for (int i = 0; i < p.count; ++i) {
        p.word[i] = words + 16 * i;
        p.value[i] = 100 + i;
      }
      uint32_t verdict = kVerdictUnset;
      if (gpu) {
        cuda::Stream stream;
        Dev v(&verdict, sizeof verdict);
        p.verdict = reinterpret_cast<const uint32_t*>(v.at(0));
        gpuGatedCopyPublish(words + 16 * 5, reinterpret_cast<uint32_t*>(v.at(0)), copies, p,
                            stream.get());
        stream.synchronize("gpuGatedCopyPublish");
        verdict = v.get<uint32_t>(1)[0];
        for (int k = 0; k < 3; ++k) hostDst[k] = dstDev[k]->get(sizes[k], skews[k]);
      } else {
        p.verdict = &verdict;
        cpuGatedCopyPublish(words + 16 * 5, &verdict, copies, p);
      }
      EXPECT_EQ(verdict, error) << what;
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(hostDst[k], error == 0 ? src[k] : std::vector<unsigned char>(sizes[k], 0))
            << what << ", copy " << k;
      for (int i = 0; i < p.count; ++i)
        EXPECT_EQ(words[16 * i], error == 0 ? 100u + i : 0u) << what << ", word " << i;
    }
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
      std::memcpy(f.data(), fbytes.data(), fbytes.size());
      std::memcpy(h.data(), hbytes.data(), hbytes.size());
      const auto lbytes = randomElements(DataType::kFloat32, n, 12 + n);
      std::memcpy(local.data(), lbytes.data(), lbytes.size());

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
      std::memcpy(x.data(), xbytes.data(), xbytes.size());
      std::memcpy(r0.data(), rbytes.data(), rbytes.size());
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
