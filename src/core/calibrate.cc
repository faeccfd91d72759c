// Init-time calibration of the tuner (see calibrate.h).
//
// First a barrier: every rank is connected to rank 0 when the communicator is built, not yet to
// each other, and no rank's connection setup may compete for the cores with the timed rounds.
// Then, every rank running the same code:
//   combine  every rank times the CPU reduce kernel (float sum) on L2-sized operands, all ranks
//            at once: gamma, seconds per byte combined.
//   pair     (Probe::kPair) rank 0 and `partner` ping-pong a small and then a medium message
//            while the others wait (in the all-gather below): alpha, half a small round trip,
//            and beta, what a medium message costs more, per byte. A pair with the cores to
//            itself is what the one-host rows' alpha and beta mean; how ranks slow down when
//            they share cores is the model's business (cost_model.h), from the host's cores.
//   links    (Probe::kRingLinks) every ring neighbour pair (r, r+1) ping-pongs a small, a medium
//            and a large message, in two phases (three for an odd rank count) so that no rank
//            is in two pairs at once while disjoint pairs run together, as a collective's steps
//            do: alpha per link as above, and beta the slope between the medium and the large
//            message. The slope, not the medium message alone: a shaped link lets a burst
//            through at the sender's speed (the lab's tbf lets 125 KB through at once at
//            1 Gbit/s), which a single 256 KiB message would price as twice the link's rate.
// A first, untimed round waits for the partner to arrive; then each round is timed alone and
// the median kept (a preempted round does not count). The pinger ends the ping-pong early once
// it has kMinRounds and kPairBudget has passed (a slow link; each ping says whether another
// follows), so it is bounded however slow the link. One all-gather then gives every rank every
// rank's numbers; each keeps the maximum of each term (a collective waits for its slowest rank
// and its slowest link), identical everywhere because computed from identical bytes, and checks
// that all ranks price with the same rows.
#include "core/calibrate.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/strings.h"
#include "core/communicator.h"
#include "device/reduce.h"

namespace squeeze {
namespace {

constexpr size_t kSmallBytes = 8;
constexpr size_t kMediumBytes = 256 << 10;
// kRingLinks: the slope's upper end. 1 MiB: over 256-512 KiB the lab's slopes scattered from
// 0.05 to 1000 GB/s on 0.119 GB/s links (two medians of a few rounds, 256 KiB apart); over
// 768 KiB they held within 10% in most runs.
constexpr size_t kLargeBytes = 1 << 20;
constexpr int kLinkRounds = 3;  // kRingLinks: at least this many timed rounds of the two sizes
constexpr size_t kCombineBytes = 256 << 10;  // per operand: both operands fit a 1 MiB L2
constexpr int kSmallRounds = 8, kMediumRounds = 4, kMinRounds = 3, kCombineRounds = 8;
constexpr std::chrono::milliseconds kPairBudget{4};  // per message size, after the untimed round

using Clock = SteadyClock;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Median time per message of a ping-pong of `bytes` with `peer` (half a round trip), after one
// untimed round. The pinger decides whether another round follows and says so in buf[0] of
// each ping.
double pingPong(Communicator& comm, int peer, bool pinger, std::vector<char>& buf, size_t bytes,
                int maxRounds, int minRounds = kMinRounds) {
  const P2pCall send{true, peer, buf.data(), bytes}, recv{false, peer, buf.data(), bytes};
  // One round; returns whether another follows.
  auto round = [&](bool wantMore) {
    if (pinger) {
      buf[0] = wantMore ? 1 : 0;
      comm.sendRecv({send});
      comm.sendRecv({recv});
      return wantMore;
    }
    comm.sendRecv({recv});
    const bool more = buf[0] != 0;
    comm.sendRecv({send});
    return more;
  };
  round(true);  // the peer may still be on its way here
  const Clock::time_point start = Clock::now();
  std::vector<double> t;
  for (bool more = true; more;) {
    const int done = static_cast<int>(t.size()) + 1;  // rounds timed once this one is
    const Clock::time_point t0 = Clock::now();
    more = round(done < maxRounds && (done < minRounds || Clock::now() - start < kPairBudget));
    t.push_back(secondsSince(t0) / 2);
  }
  return median(std::move(t));
}

// Median seconds per byte of the CPU float-sum kernel on kCombineBytes operands.
double combineTime() {
  const size_t n = kCombineBytes / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 0.5f);
  device::ReduceFn sum = device::cpuReduceFn(DataType::kFloat32, RedOp::kSum);
  sum(a.data(), a.data(), b.data(), n);  // fault the pages in and warm the cache
  std::vector<double> t;
  for (int i = 0; i < kCombineRounds; ++i) {
    const Clock::time_point t0 = Clock::now();
    sum(a.data(), a.data(), b.data(), n);
    t.push_back(secondsSince(t0));
  }
  return median(std::move(t)) / kCombineBytes;
}

// What each rank contributes to the all-gather.
struct Sample {
  double gamma, pairSmall, pairMedium, seconds;
  double hashHi, hashLo;  // rowsHash's halves: exact in a double
  // The link this rank pinged (kPair: rank 0's to the partner; kRingLinks: to rank + 1), with
  // linkPeer -1 where it pinged none.
  double linkPeer, linkAlpha, linkBeta;
};
constexpr size_t kSampleDoubles = sizeof(Sample) / sizeof(double);
static_assert(sizeof(Sample) == kSampleDoubles * sizeof(double));

// Every rank's `count` doubles at `mine`, rank after rank, into `all` (count * P doubles): how
// each measurement reaches every rank, so that all price with identical numbers.
void allGatherDoubles(Communicator& comm, const void* mine, size_t count, void* all) {
  CollRequest gather;
  gather.kind = CollKind::kAllGather;
  gather.sendbuf = mine;
  gather.recvbuf = all;
  gather.count = count;
  gather.dtype = DataType::kFloat64;
  comm.collective(gather);
}

// The floors keep a term that timer noise made zero or negative from pricing its messages or
// bytes as free: 1 ns per message, 1 TB/s.
double alphaFloor(double a) { return std::max(a, 1e-9); }
double betaFloor(double b) { return std::max(b, 1e-12); }

// Probe::kRingLinks: the ring links in phases; fills mine's link fields where this rank pings.
// Link r joins r and r + 1 (mod P): P links, one for P = 2. Link r's phase is r % 2, but for an
// odd P the last link (P-1, 0) takes a third, since rank 0 is already in link 0's phase.
void measureRingLinks(Communicator& comm, std::vector<char>& buf, Sample& mine) {
  const int P = comm.size(), rank = comm.rank();
  const int links = P == 2 ? 1 : P;
  auto phaseOf = [&](int link) { return P % 2 == 1 && link == P - 1 ? 2 : link % 2; };
  const int left = (rank - 1 + P) % P;  // the link this rank answers on
  // Ping-pongs `bytes` on this rank's links of every phase: the median half round trip where it
  // pings, 0 where it pings none.
  auto sweep = [&](size_t bytes, int maxRounds, int minRounds) {
    double mineTime = 0;
    for (int phase = 0; phase < 3; ++phase) {
      if (rank < links && phaseOf(rank) == phase)
        mineTime = pingPong(comm, (rank + 1) % P, true, buf, bytes, maxRounds, minRounds);
      else if (left < links && phaseOf(left) == phase)
        pingPong(comm, left, false, buf, bytes, maxRounds, minRounds);
    }
    return mineTime;
  };
  // The first pass over the links ran 2-3x slower than the same links a moment later in the
  // lab (whichever phase came first): connections and the executor's polling settle. One
  // untimed small sweep takes that, at the cost of a few round trips per link.
  sweep(kSmallBytes, kMinRounds, kMinRounds);
  const double small = sweep(kSmallBytes, kSmallRounds, kMinRounds);
  // A fresh connection's window starts small, and would slow the medium message more than the
  // large one (the slope then read 0.15-1000 GB/s on 0.119 GB/s links): a large round trip each
  // way first, untimed, opens it.
  sweep(kLargeBytes, 1, 1);
  const double medium = sweep(kMediumBytes, kLinkRounds + 1, kLinkRounds);
  const double large = sweep(kLargeBytes, kLinkRounds + 1, kLinkRounds);
  if (rank < links) {
    mine.linkPeer = (rank + 1) % P;
    mine.linkAlpha = alphaFloor(small);
    mine.linkBeta = betaFloor((large - medium) / double(kLargeBytes - kMediumBytes));
  }
}

}  // namespace

Calibration measureCostTerms(Communicator& comm, Probe probe, int partner, uint64_t rowsHash) {
  const int P = comm.size(), rank = comm.rank();
  SQZ_ENFORCE(P > 1 && (probe != Probe::kPair || (partner > 0 && partner < P)),
              "calibration of ", P, " ranks with partner ", partner);
  if (probe != Probe::kNone) comm.barrier();  // see the top of the file; not the measurement's
  const Clock::time_point t0 = Clock::now();
  Sample mine{};
  mine.linkPeer = -1;
  if (probe != Probe::kNone) {
    std::vector<char> buf(probe == Probe::kRingLinks ? kLargeBytes : kMediumBytes, 1);
    mine.gamma = combineTime();
    if (probe == Probe::kPair && (rank == 0 || rank == partner)) {
      const int peer = rank == 0 ? partner : 0;
      mine.pairSmall = pingPong(comm, peer, rank == 0, buf, kSmallBytes, kSmallRounds);
      mine.pairMedium = pingPong(comm, peer, rank == 0, buf, kMediumBytes, kMediumRounds);
    } else if (probe == Probe::kRingLinks) {
      measureRingLinks(comm, buf, mine);
    }
  }
  mine.seconds = secondsSince(t0);
  mine.hashHi = static_cast<double>(rowsHash >> 32);
  mine.hashLo = static_cast<double>(rowsHash & 0xffffffffu);

  std::vector<Sample> all(P);
  allGatherDoubles(comm, &mine, kSampleDoubles, all.data());

  Sample worst{};
  Calibration c;
  c.probe = probe;
  for (int r = 0; r < P; ++r) {
    const Sample& s = all[r];
    if (s.hashHi != all[0].hashHi || s.hashLo != all[0].hashLo)
      raise(ErrorCode::kInvalidUsage, "rank ", rank, ": the tuner's efficiency rows differ "
            "between rank 0 and rank ", r, " (SQZ_TUNER_FILE names different files, or files "
            "that differ, on their hosts); every rank must price algorithms alike: give every "
            "rank the same file, or none.");
    worst.gamma = std::max(worst.gamma, s.gamma);
    worst.pairSmall = std::max(worst.pairSmall, s.pairSmall);
    worst.pairMedium = std::max(worst.pairMedium, s.pairMedium);
    worst.seconds = std::max(worst.seconds, s.seconds);
    if (probe == Probe::kRingLinks && s.linkPeer >= 0) {
      c.links.push_back({r, static_cast<int>(s.linkPeer), s.linkAlpha, s.linkBeta});
      c.terms.alpha = std::max(c.terms.alpha, s.linkAlpha);
      c.terms.beta = std::max(c.terms.beta, s.linkBeta);
    }
  }
  c.terms.seconds = worst.seconds;
  if (probe == Probe::kNone) return c;
  c.terms.gamma = std::max(worst.gamma, 1e-12);
  if (probe == Probe::kPair) {
    // alpha + bytes * beta per message, from the two sizes.
    c.terms.alpha = alphaFloor(worst.pairSmall);
    c.terms.beta = betaFloor((worst.pairMedium - worst.pairSmall) /
                             double(kMediumBytes - kSmallBytes));
    c.links.push_back({0, partner, c.terms.alpha, c.terms.beta});
  }
  return c;
}

std::vector<double> timeAllReduces(Communicator& comm, size_t bytes,
                                   const std::function<void(const AlgorithmEntry&)>& force) {
  constexpr int kAnchorCalls = 5, kWarmRounds = 10;
  constexpr std::chrono::milliseconds kAnchorPause{2};
  const int P = comm.size();
  std::vector<float> data(bytes / sizeof(float), 1.0f);
  CollRequest req;
  req.kind = CollKind::kAllReduce;
  req.sendbuf = data.data();
  req.recvbuf = data.data();
  req.count = data.size();
  req.dtype = DataType::kFloat32;
  req.op = RedOp::kSum;
  std::vector<const AlgorithmEntry*> timed;
  for (const AlgorithmEntry& a : algorithms())
    if (a.coll == CollKind::kAllReduce && a.id != AlgoId::kDirect && a.supports(req, P))
      timed.push_back(&a);
  std::vector<std::vector<double>> t(kAllReduceAlgos);
  comm.barrier();  // as measureCostTerms: no rank still setting up its connections
  // First kWarmRounds untimed rounds of every algorithm: after the links' probe the lab's small
  // calls ran 2-20x slower for about ten calls (its large messages overflow a shallow switch
  // queue, and the connections take a few round trips to recover); timed then, naive measured
  // 150-430 us at 4 KiB against 55-90 us a moment later, and the caller's first calls paid it.
  for (int i = 0; i < kWarmRounds; ++i)
    for (const AlgorithmEntry* a : timed) {
      force(*a);
      comm.collective(req);
    }
  // Each algorithm from an idle network: a pause first, as long as a shaped link takes to
  // refill the burst it lets through (the lab's tbf: 1 ms of its rate), so that no algorithm
  // pays for the bytes of the one before it. Then one untimed call (it builds what an
  // algorithm's first call builds, and absorbs the ranks' skew) and kAnchorCalls timed.
  for (const AlgorithmEntry* a : timed) {
    force(*a);
    std::this_thread::sleep_for(kAnchorPause);
    for (int call = 0; call <= kAnchorCalls; ++call) {
      const Clock::time_point t0 = Clock::now();
      comm.collective(req);
      if (call > 0) t[static_cast<int>(a->id)].push_back(secondsSince(t0));
    }
  }
  std::vector<double> mine(kAllReduceAlgos, 0);
  for (const AlgorithmEntry* a : timed)
    mine[static_cast<int>(a->id)] = median(std::move(t[static_cast<int>(a->id)]));
  std::vector<double> all(size_t(P) * kAllReduceAlgos);
  allGatherDoubles(comm, mine.data(), kAllReduceAlgos, all.data());
  std::vector<double> slowest(kAllReduceAlgos, 0);
  for (int r = 0; r < P; ++r)
    for (int i = 0; i < kAllReduceAlgos; ++i)
      slowest[i] = std::max(slowest[i], all[size_t(r) * kAllReduceAlgos + i]);
  return slowest;
}

std::string describeLinks(const Calibration& c) {
  std::string out;
  for (const LinkTerms& l : c.links)
    out += strCat(out.empty() ? "" : ", ", l.a, "<->", l.b, " ", l.alpha * 1e6, " us ",
                  1e-9 / l.beta, " GB/s");
  return out.empty() ? "(none measured)" : out;
}

}  // namespace squeeze
