// The stream collectives' kernels (device/reduce.h) against their CPU twins, bit for bit:
//   - gpuReduceRanks at 1, 2, 5 and 8 ranks, every datatype and op, aligned and misaligned;
//   - gpuCheckCalls on the ranks' call words, gpuPublishWords under a verdict;
//   - a small round's one-block kernels (gpuCheckReduceRanks, gpuGatedCopyPublish) against the
//     separate calls.
// main() is gpu_main.cc: without a GPU the binary exits 77 (skipped).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/types.h"
#include "device/cuda/runtime.h"
#include "device/reduce.h"
#include "tests/gpu/kernel_checks.h"

namespace squeeze::device {
namespace {

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

// Five words to store, a 64-byte line apart from `words` on (word i: 100 + i), the last a signal.
PublishWords fiveWords(uint32_t* words) {
  PublishWords p{};
  p.count = 5;
  p.signals = 1;
  for (int i = 0; i < p.count; ++i) {
    p.word[i] = words + 16 * i;
    p.value[i] = 100 + i;
  }
  return p;
}

// A round's words to its peers are stored only under a clean verdict, by the GPU as by the CPU.
TEST(GpuReduce, PublishWordsOnlyUnderACleanVerdict) {
  for (uint32_t verdict : {0u, 2u, kReleased})
    for (bool gpu : {false, true}) {
      cuda::PinnedBuffer pinned(5 * 64);
      auto* words = static_cast<uint32_t*>(pinned.data());
      std::memset(words, 0, 5 * 64);
      PublishWords p = fiveWords(words);
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
      PublishWords p = fiveWords(words);
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

}  // namespace
}  // namespace squeeze::device
