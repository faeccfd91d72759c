// The adaptive methods' decisions on scripted inputs, with no network: GraVAC's state machine
// (compress/gravac.h) against the CFs the seed's rules give step by step, Accordion's switches
// (compress/accordion.h) on a scripted norm sequence, the pay-off guard (compress/payoff_guard.h)
// on scripted timings, and each policy's save/load: a reloaded policy continues bit for bit, a bad
// buffer is refused and changes nothing. And how often a codec handle exchanges figures (a
// communicator that counts): GraVAC once per window, Accordion every call, the guard as it needs.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/error.h"
#include "compress/accordion.h"
#include "compress/codec_comm.h"
#include "compress/gravac.h"
#include "compress/handle.h"
#include "compress/payoff_guard.h"
#include "compress/spec.h"

namespace squeeze {
namespace {

// The scripted run: per call, the gains the probe would report, and a "system" whose step time
// depends on the CF the previous call used (higher CF, shorter step).
struct GravacInput {
  double deltaMin, deltaC;
};
double stepTimeFor(double cf) {
  if (cf == 1) return 1.0;
  if (cf == 10) return 0.5;
  if (cf == 20) return 0.4;
  if (cf == 40) return 0.3;
  if (cf == 80) return 0.25;
  return 0.24;  // 160
}

GravacParams scriptParams() {
  GravacParams p;
  p.cfMin = 10;
  p.cfMax = 160;  // candidates 10, 20, 40, 80, 160
  p.step = 2;
  p.window = 3;
  p.eps = 0.7;
  p.omega = 0.05;
  return p;
}

// Gains per call (|x|^2 = 1, so a window's expected gains are the means of these), window by
// window (3 calls each), and the CF every call of each window must run at.
const std::vector<GravacInput> kScript = {
    // W1 (the first window runs at cf_min = 10), pair (10, 20): means 0.8 / 0.633: next at 10
    // (only delta_min >= eps); not saturated (0.21 > omega): the pair stays
    {0.9, 0.8}, {0.9, 0.6}, {0.6, 0.5},
    // W2 at 10: delta_c 0.88 >= eps: next at 20; saturated (0.022): scale up to (20, 40)
    {0.9, 0.88}, {0.9, 0.88}, {0.9, 0.88},
    // W3 at 20: next at 40; saturated: (40, 80)
    {0.88, 0.86}, {0.88, 0.86}, {0.88, 0.86},
    // W4 at 40: next at 80; saturated: (80, 160), the last pair in [cf_min, cf_max]
    {0.86, 0.85}, {0.86, 0.85}, {0.86, 0.85},
    // W5 at 80: next at 160; 0.059 > omega: the pair stays
    {0.85, 0.80}, {0.85, 0.80}, {0.85, 0.80},
    // W6 at 160: saturated at the last pair, 160 has run: every candidate evaluated; choose where
    // T_compression saturates (80, below) and settle on the pair (40, 80)
    {0.85, 0.84}, {0.85, 0.84}, {0.85, 0.84},
    // W7 at 80: delta_c (at 80) 0.6 < eps, delta_min (at 40) 0.85: next at 40
    {0.85, 0.60}, {0.85, 0.60}, {0.85, 0.60},
    // W8 at 40: both below eps: next dense
    {0.50, 0.40}, {0.50, 0.40}, {0.50, 0.40},
    // W9 dense; the probe goes on: both above eps again: next at 80
    {0.90, 0.80}, {0.90, 0.80}, {0.90, 0.80},
    {0.90, 0.80},
};
const std::vector<double> kExpectedCf = {10, 10, 10, 10, 10, 10, 20, 20, 20, 40, 40, 40, 80, 80,
                                         80, 160, 160, 160, 80, 80, 80, 40, 40, 40, 1, 1, 1, 80};

// One call of a policy that runs alone, as the handle drives it: its figures recorded, and
// exchanged (the sum over one rank: its own) at each window's end.
double oneRank(GravacPolicy& g, double inputSq, double minSq, double cSq, double seconds) {
  g.record(inputSq, minSq, cSq, seconds);
  if (!g.endsWindow()) return g.step(nullptr);
  const std::vector<double> summed = g.pending();
  return g.step(summed.data());
}

TEST(Gravac, FollowsTheSeedsRulesOnAScriptedRun) {
  GravacPolicy g(scriptParams());
  ASSERT_EQ(g.candidates(), 5u);
  ASSERT_EQ(kScript.size(), kExpectedCf.size());
  double lastCf = 0;
  for (size_t i = 0; i < kScript.size(); ++i) {
    const double seconds = i == 0 ? 0 : stepTimeFor(lastCf);
    const double cf = oneRank(g, 1, kScript[i].deltaMin, kScript[i].deltaC, seconds);
    EXPECT_EQ(cf, kExpectedCf[i]) << "call " << i;
    lastCf = cf;
    if (i == 17) {  // the end of W6
      EXPECT_EQ(g.phase(), GravacPolicy::Phase::kSettled);
      // T_compression = mean T_system x mean gain per CF, from the script:
      //   10: 2.0 x (0.8 + 0.9) / 2 = 1.7;  20: 2.5 x 0.88 = 2.2;  40: 3.33 x 0.86 = 2.87;
      //   80: 4 x 0.85 = 3.4;  160: 4.17 x 0.84 = 3.5 (the steps of calls 15 and 16)
      EXPECT_NEAR(g.compressionThroughput(0), 1.7, 1e-9);
      EXPECT_NEAR(g.compressionThroughput(1), 2.5 * 0.88, 1e-9);
      EXPECT_NEAR(g.compressionThroughput(2), 0.86 / 0.3, 1e-9);
      EXPECT_NEAR(g.compressionThroughput(3), 0.85 / 0.25, 1e-9);
      EXPECT_NEAR(g.compressionThroughput(4), 0.84 / 0.24, 1e-9);
      // within omega (5%) of the largest, 3.5: 80 (3.4) is the smallest such -> pair (40, 80)
      EXPECT_EQ(g.lower(), 40);
      EXPECT_EQ(g.upper(), 80);
      EXPECT_EQ(g.windowCf(), 80);
    } else if (i < 17) {
      EXPECT_EQ(g.phase(), GravacPolicy::Phase::kExploring) << "call " << i;
    }
  }
}

TEST(Gravac, ChoosesTheLargestCfWhenThroughputKeepsGrowing) {
  GravacParams p = scriptParams();
  p.omega = 0.001;
  GravacPolicy g(p);
  double lastCf = 0;
  // Every gain equal: scale up every window; each CF's steps as much faster as it is higher.
  for (int i = 0; i < 18; ++i) lastCf = oneRank(g, 1, 0.9, 0.9, i == 0 ? 0 : 1.0 / lastCf);
  EXPECT_EQ(g.phase(), GravacPolicy::Phase::kSettled);
  EXPECT_EQ(g.upper(), 160);  // 160 ran for a window before the choice
  EXPECT_EQ(g.windowCf(), 160);
}

TEST(Gravac, ScalesDownToDenseBelowEps) {
  GravacPolicy g(scriptParams());
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(oneRank(g, 1, 0.3, 0.2, 0.5), i < 3 ? 10 : 1) << i;
    EXPECT_EQ(g.lower(), 10);  // never saturated (|0.3 - 0.2| / 0.3 > omega): no scale-up
  }
}

TEST(Gravac, GainsAreRatiosOfSumsOverTheWindow) {
  // E[|g_c|^2] / E[|x|^2], not the mean of per-call ratios: a call with a large gradient counts
  // for more. Per-call ratios 0.9 and 0.5 average 0.7 (>= eps); weighted by |x|^2 (1 and 9)
  // they give (0.9 + 4.5) / 10 = 0.54 (< eps).
  GravacParams p = scriptParams();
  p.window = 2;
  GravacPolicy g(p);
  oneRank(g, 1, 0.95, 0.9, 0);
  oneRank(g, 9, 9 * 0.95, 9 * 0.5, 0.5);
  EXPECT_EQ(g.windowCf(), 10);  // delta_c 0.54 < eps, delta_min 0.95: the lower CF
}

TEST(Gravac, SaveLoadResumesBitForBit) {
  GravacPolicy a(scriptParams());
  for (size_t i = 0; i < 10; ++i)
    oneRank(a, 1, kScript[i].deltaMin, kScript[i].deltaC, 0.3 + 0.01 * i);
  const std::vector<char> saved = a.save();
  GravacPolicy b(scriptParams());
  b.load(saved.data(), saved.size());
  EXPECT_EQ(b.save(), saved);
  // Call 10 is inside a window: its figures wait in pending, and travel with the state.
  EXPECT_GT(a.pending()[0], 0);
  EXPECT_EQ(b.pending(), a.pending());
  for (size_t i = 10; i < kScript.size(); ++i) {
    const double s = 0.3 + 0.01 * i;
    EXPECT_EQ(oneRank(a, 1, kScript[i].deltaMin, kScript[i].deltaC, s),
              oneRank(b, 1, kScript[i].deltaMin, kScript[i].deltaC, s));
  }
  EXPECT_EQ(a.save(), b.save());
}

TEST(Gravac, LoadRefusesAnotherShapeAndKeepsItsState) {
  GravacPolicy a(scriptParams());
  oneRank(a, 1, 0.9, 0.8, 0);
  const std::vector<char> before = a.save();
  GravacParams other = scriptParams();
  other.cfMax = 1000;  // more candidates
  GravacPolicy b(other);
  const std::vector<char> wrong = b.save();
  EXPECT_THROW(a.load(wrong.data(), wrong.size()), Error);
  EXPECT_THROW(a.load(before.data(), before.size() - 1), Error);
  EXPECT_EQ(a.save(), before);
}

TEST(Gravac, LoadsTheFormSavedBeforePendingFigures) {
  // Version 1 ("GRVC") had no pending figures (every call's were summed at once): it loads with
  // none pending. Built here from a version 2 save: the magic changed, the pending doubles cut.
  GravacPolicy a(scriptParams());
  for (size_t i = 0; i < 4; ++i) oneRank(a, 1, kScript[i].deltaMin, kScript[i].deltaC, 0.5);
  std::vector<char> v1 = a.save();
  v1.resize(v1.size() - a.pending().size() * sizeof(double));
  const uint32_t magicV1 = 0x43565247;
  std::memcpy(v1.data(), &magicV1, sizeof magicV1);
  GravacPolicy b(scriptParams());
  b.load(v1.data(), v1.size());
  EXPECT_EQ(b.lower(), a.lower());
  EXPECT_EQ(b.windowCf(), a.windowCf());
  EXPECT_EQ(b.pending(), std::vector<double>(a.pending().size(), 0.0));
  EXPECT_DOUBLE_EQ(b.compressionThroughput(0), a.compressionThroughput(0));
}

TEST(Gravac, RanksSumTheirFiguresOncePerWindow) {
  // Two ranks, each with its own figures, exchange (sum) them only at windows' ends; a third
  // policy stands for the per-call exchange it replaces: fed the ranks' per-call sums, one rank.
  // All three run the same CFs and end with the same T_compression table, and a rank's pending
  // figures are its own until the exchange.
  GravacPolicy r0(scriptParams()), r1(scriptParams()), perCall(scriptParams());
  double lastCf = 0;
  for (size_t i = 0; i < 27; ++i) {  // 9 windows
    const double seconds = i == 0 ? 0 : stepTimeFor(lastCf);
    const double x0 = 1, x1 = 3;  // rank 1's gradient is larger; its gains differ
    const double min1 = x1 * (kScript[i].deltaMin + 0.02), c1 = x1 * (kScript[i].deltaC - 0.02);
    r0.record(x0, kScript[i].deltaMin, kScript[i].deltaC, seconds);
    r1.record(x1, min1, c1, seconds);
    perCall.record(x0 + x1, kScript[i].deltaMin + min1, kScript[i].deltaC + c1, seconds);
    EXPECT_EQ(r0.endsWindow(), (i + 1) % 3 == 0) << "call " << i;
    ASSERT_EQ(r1.endsWindow(), r0.endsWindow());
    std::vector<double> summed;
    if (r0.endsWindow()) {
      summed = r0.pending();
      for (size_t f = 0; f < summed.size(); ++f) summed[f] += r1.pending()[f];
    } else {
      EXPECT_EQ(r0.pending()[0], x0 * double(i % 3 + 1)) << "call " << i;
    }
    const double cf0 = r0.step(summed.empty() ? nullptr : summed.data());
    const double cf1 = r1.step(summed.empty() ? nullptr : summed.data());
    // The one-rank policy counts each step once where the two ranks count it twice: its
    // throughput figures are doubled to match (the mean is the same either way).
    std::vector<double> one = perCall.pending();
    for (size_t f = 3; f < one.size(); ++f) one[f] *= 2;
    const double cf = perCall.step(one.data());
    EXPECT_EQ(cf0, cf) << "call " << i;
    EXPECT_EQ(cf1, cf) << "call " << i;
    lastCf = cf;
  }
  EXPECT_EQ(r0.save(), r1.save());  // pending is empty after the last window's exchange
  for (size_t j = 0; j < r0.candidates(); ++j)
    EXPECT_DOUBLE_EQ(r0.compressionThroughput(j), perCall.compressionThroughput(j)) << j;
}

TEST(Gravac, AnExchangeInsideAWindowJoinsItsSums) {
  // The pay-off guard's exchanges come when it needs them, inside windows too: the figures they
  // carry count in the window as if they had waited for its end.
  GravacPolicy windowed(scriptParams()), everyCall(scriptParams());
  double lastCf = 0;
  for (size_t i = 0; i < 27; ++i) {  // 9 windows
    const double seconds = i == 0 ? 0 : stepTimeFor(lastCf);
    windowed.record(1, kScript[i].deltaMin, kScript[i].deltaC, seconds);
    everyCall.record(1, kScript[i].deltaMin, kScript[i].deltaC, seconds);
    const std::vector<double> all = everyCall.pending();
    const double cf = everyCall.step(all.data());
    std::vector<double> mine;
    if (windowed.endsWindow()) mine = windowed.pending();
    EXPECT_EQ(windowed.step(mine.empty() ? nullptr : mine.data()), cf) << "call " << i;
    lastCf = cf;
  }
  EXPECT_EQ(windowed.phase(), GravacPolicy::Phase::kSettled);
  EXPECT_EQ(windowed.lower(), everyCall.lower());
  // The steps' sums add in another order: the same to rounding.
  for (size_t j = 0; j < windowed.candidates(); ++j)
    EXPECT_DOUBLE_EQ(windowed.compressionThroughput(j), everyCall.compressionThroughput(j)) << j;
}

TEST(Gravac, AWindowsEndWithoutAnExchangeIsAnError) {
  GravacParams p = scriptParams();
  p.window = 1;
  GravacPolicy g(p);
  g.record(1, 0.9, 0.8, 0);
  EXPECT_THROW(g.step(nullptr), Error);
}

// Ranks that all hold the same values, counted: a data call copies (the average of equal
// gradients), an exchange of figures multiplies them by the ranks (their sum).
class CountingComm final : public CodecComm {
 public:
  explicit CountingComm(int ranks) : ranks_(ranks) {}
  int size() const override { return ranks_; }
  int rank() const override { return 0; }
  const CodecSettings& codecSettings() const override { return settings_; }
  void collective(const CollRequest& req) override {
    ++dataCalls;
    if (req.sendbuf != req.recvbuf) std::memcpy(req.recvbuf, req.sendbuf, req.bytes());
  }
  void hostCollective(const CollRequest& req) override {
    ++exchanges;
    ASSERT_EQ(req.dtype, DataType::kFloat64);
    double* f = static_cast<double*>(req.recvbuf);
    for (size_t i = 0; i < req.count; ++i) f[i] *= ranks_;
  }
  int dataCalls = 0, exchanges = 0;

 private:
  int ranks_;
  CodecSettings settings_;
};

// Runs `calls` calls of `spec` over a counting communicator of 4 ranks.
CountingComm countExchanges(const std::string& spec, int calls) {
  constexpr size_t kCount = 4096;
  CountingComm comm(4);
  auto handle = createCodecHandle(CodecSpec::parse(spec), kCount, DataType::kFloat32);
  std::vector<float> g(kCount), out(kCount);
  for (int c = 0; c < calls; ++c) {
    for (size_t i = 0; i < kCount; ++i)
      g[i] = float((i * 7919 + size_t(c) * 104729) % 1000) / 1000 - 0.5f;
    handle->allReduce(comm, g.data(), out.data(), RedOp::kAvg);
  }
  return comm;
}

TEST(Gravac, TheHandleExchangesFiguresOncePerWindow) {
  const CountingComm windowed = countExchanges("gravac:window=5,min_bytes=0,auto_dense=0", 20);
  EXPECT_EQ(windowed.dataCalls, 20);
  EXPECT_EQ(windowed.exchanges, 4);  // at the ends of the 4 windows, not on every call
  // Accordion's norm of a call is of the ranks' sum: it exchanges on every call.
  const CountingComm accordion =
      countExchanges("accordion:interval=5,min_bytes=0,auto_dense=0", 20);
  EXPECT_EQ(accordion.exchanges, 20);
  // With the guard on, GraVAC exchanges where the guard needs figures (each of its first 17
  // calls, every 16th: 18 of 40) and at windows' ends (none here, a window of 100 calls).
  const CountingComm guarded = countExchanges("gravac:window=100,min_bytes=0,auto_dense=1", 40);
  EXPECT_EQ(guarded.exchanges, 18);
}

TEST(Accordion, SwitchesOnTheNormChangeOfEachInterval) {
  AccordionParams p;
  p.cfLow = 10;
  p.cfHigh = 1000;
  p.interval = 3;
  p.eta = 0.5;
  AccordionPolicy a(p);
  const std::vector<double> norms = {4, 4, 4,        // first interval: critical, nothing to compare
                                     3.9, 4.1, 4.0,  // mean 4, change 0 -> stable next
                                     4, 4, 4,        // stays stable
                                     1, 1, 1,        // change 0.75 >= eta -> critical next
                                     0.9, 0.9, 0.9,  // change 0.1 -> stable next
                                     0.9};
  const std::vector<double> expected = {10,   10,   10,   10,   10, 10, 1000, 1000,
                                        1000, 1000, 1000, 1000, 10, 10, 10,   1000};
  for (size_t i = 0; i < norms.size(); ++i) EXPECT_EQ(a.step(norms[i]), expected[i]) << i;
  EXPECT_FALSE(a.critical());
}

TEST(Accordion, SaveLoadResumesAndRefusesBadState) {
  AccordionParams p;
  p.interval = 4;
  AccordionPolicy a(p), b(p);
  for (int i = 0; i < 6; ++i) a.step(1.0 + 0.5 * i);
  const std::vector<char> saved = a.save();
  b.load(saved.data(), saved.size());
  for (int i = 6; i < 20; ++i) EXPECT_EQ(a.step(5.0 / (1 + i)), b.step(5.0 / (1 + i)));
  EXPECT_EQ(a.save(), b.save());
  AccordionParams shorter = p;
  shorter.interval = 2;  // the saved position in the interval (2) does not fit
  AccordionPolicy c(shorter);
  const std::vector<char> before = c.save();
  EXPECT_THROW(c.load(saved.data(), saved.size()), Error);
  EXPECT_EQ(c.save(), before);
}

// Drives the guard as CodecHandle does: before each call, the previous call's figures, then the
// decision. Codec and link seconds per call are scripted for a 1 MB tensor.
struct GuardRun {
  PayoffGuard guard;
  std::vector<bool> decisions;
  bool previous = false, have = false;
  void run(int calls, double denseSeconds, double compressedLinkSeconds, double codecSeconds) {
    for (int i = 0; i < calls; ++i) {
      if (have) {
        PayoffGuard::Sample s;
        s.compressed = previous;
        s.codecSeconds = previous ? codecSeconds : 0;
        s.seconds = previous ? compressedLinkSeconds + codecSeconds : denseSeconds;
        guard.record(s, 1e6);
      }
      previous = guard.nextCompresses();
      have = true;
      decisions.push_back(previous);
    }
  }
};

TEST(PayoffGuard, GoesDenseWhenTheCodecCostsMoreThanItSaves) {
  GuardRun r;  // dense 10 ms; compressed: 1 ms of link, but 20 ms of codec work
  r.run(300, 0.010, 0.001, 0.020);
  const std::vector<bool> warmup = {true, false, true, false};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.decisions[i], warmup[i]) << i;
  for (int i = 4; i < 300; ++i) {
    // one probe of the other mode 64 calls after the decision, then 128 after that
    const bool probe = i == 4 + 64 || i == 4 + 64 + 128;
    EXPECT_EQ(r.decisions[i], probe) << i;
  }
  EXPECT_EQ(r.guard.denseCalls(), 300u - 4);  // 2 of the warm-up, 298 decided, 2 probes
  EXPECT_NEAR(r.guard.codecPerByte(), 0.020 / 1e6, 1e-15);
  EXPECT_NEAR(r.guard.linkDensePerByte(), 0.010 / 1e6, 1e-15);
}

TEST(PayoffGuard, CompressesWhenTheLinkIsSlow) {
  GuardRun r;  // dense 100 ms; compressed 5 ms of link + 10 ms of codec
  r.run(100, 0.100, 0.005, 0.010);
  for (int i = 4; i < 100; ++i) EXPECT_EQ(r.decisions[i], i != 4 + 64) << i;
}

TEST(PayoffGuard, ExchangesFiguresOnlyWhenItNeedsThem) {
  GuardRun r;
  r.run(1, 0.010, 0.001, 0.020);
  std::vector<uint64_t> syncs;
  for (uint64_t call = 1; call < 200; ++call) {
    if (r.guard.syncs()) syncs.push_back(call);
    r.run(1, 0.010, 0.001, 0.020);
  }
  // the first 17 (warm-up and early decisions), every 16th, and the calls after the probes at
  // 68 and 196
  std::vector<uint64_t> expected;
  for (uint64_t c = 1; c <= 16; ++c) expected.push_back(c);
  for (uint64_t c : {32, 48, 64, 69, 80, 96, 112, 128, 144, 160, 176, 192, 197})
    expected.push_back(c);
  EXPECT_EQ(syncs, expected);
}

// Where timing a call costs (GPU events), the guard names the calls whose times its figures
// need: the first 17, the probes, and the 4 before each sync.
TEST(PayoffGuard, TimesTheCallsItsFiguresNeed) {
  GuardRun r;
  std::vector<uint64_t> timed;
  for (uint64_t call = 0; call < 100; ++call) {
    r.run(1, 0.010, 0.001, 0.020);
    if (r.guard.timesLastCall()) timed.push_back(call);
  }
  std::vector<uint64_t> expected;
  for (uint64_t c = 0; c <= 16; ++c) expected.push_back(c);
  for (uint64_t c : {28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63, 68, 76, 77, 78, 79, 92, 93,
                     94, 95})
    expected.push_back(c);
  EXPECT_EQ(timed, expected);
}

TEST(PayoffGuard, FollowsALinkThatChanges) {
  GuardRun r;
  r.run(50, 0.100, 0.005, 0.010);   // slow link: compress
  EXPECT_TRUE(r.decisions.back());
  r.run(30, 0.004, 0.001, 0.010);  // the link became fast: the probe at call 68 (dense) sees it
  EXPECT_FALSE(r.decisions.back());
  EXPECT_TRUE(r.decisions[67]);
  EXPECT_FALSE(r.decisions[68]);  // the probe
  EXPECT_FALSE(r.decisions[69]);  // decided from its figures
}

}  // namespace
}  // namespace squeeze
