// Init-time calibration of the tuner (see calibrate.h).
//
// First a barrier: every rank is connected to rank 0 when the communicator is built, not yet to
// each other, and no rank's connection setup may compete for the cores with the timed rounds.
// Then, every rank running the same code:
//   combine  every rank times the CPU reduce kernel (float sum) on L2-sized operands, all ranks
//            at once: gamma, seconds per byte combined.
//   pair     rank 0 and `partner` ping-pong a small and then a medium message while the others
//            wait (in the all-gather below): alpha, half a small round trip, and beta, what a
//            medium message costs more, per byte. A pair with the cores to itself is what the
//            model's alpha and beta mean; how ranks slow down when they share cores is the
//            model's business (cost_model.h), from the host's core count.
// A first, untimed round waits for the partner to arrive; then each round is timed alone and
// the median kept (a preempted round does not count). Rank 0 ends the ping-pong early once it
// has kMinRounds and kPairBudget has passed (a slow link; each ping says whether another
// follows), so it is bounded however slow the link. One all-gather then gives every rank every
// rank's numbers; each keeps the maximum of each term (a collective waits for its slowest rank),
// identical everywhere because computed from identical bytes, and checks that all ranks price
// with the same rows.
#include "core/calibrate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "core/communicator.h"
#include "device/reduce.h"

namespace squeeze {
namespace {

constexpr size_t kSmallBytes = 8;
constexpr size_t kMediumBytes = 256 << 10;
constexpr size_t kCombineBytes = 256 << 10;  // per operand: both operands fit a 1 MiB L2
constexpr int kSmallRounds = 8, kMediumRounds = 4, kMinRounds = 3, kCombineRounds = 8;
constexpr std::chrono::milliseconds kPairBudget{4};  // per message size, after the untimed round

using Clock = SteadyClock;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Median time per message of a ping-pong of `bytes` between rank 0 and `partner` (half a round
// trip), after one untimed round; 0 on the other ranks. Rank 0 decides whether another round
// follows and says so in buf[0] of each ping.
double pingPong(Communicator& comm, int partner, std::vector<char>& buf, size_t bytes,
                int maxRounds) {
  const int rank = comm.rank();
  if (rank != 0 && rank != partner) return 0;
  const int peer = rank == 0 ? partner : 0;
  const P2pCall send{true, peer, buf.data(), bytes}, recv{false, peer, buf.data(), bytes};
  // One round; returns whether another follows.
  auto round = [&](bool wantMore) {
    if (rank == 0) {
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
  round(true);  // the partner may still be on its way here
  const Clock::time_point start = Clock::now();
  std::vector<double> t;
  for (bool more = true; more;) {
    const int done = static_cast<int>(t.size()) + 1;  // rounds timed once this one is
    const Clock::time_point t0 = Clock::now();
    more = round(done < maxRounds && (done < kMinRounds || Clock::now() - start < kPairBudget));
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
};
constexpr size_t kSampleDoubles = sizeof(Sample) / sizeof(double);
static_assert(sizeof(Sample) == kSampleDoubles * sizeof(double));

}  // namespace

MeasuredTerms measureCostTerms(Communicator& comm, int partner, uint64_t rowsHash) {
  const int P = comm.size(), rank = comm.rank();
  SQZ_ENFORCE(P > 1 && partner >= 0 && partner < P, "calibration of ", P,
              " ranks with partner ", partner);
  if (partner > 0) comm.barrier();  // see the top of the file; not the measurement's time
  const Clock::time_point t0 = Clock::now();
  Sample mine{};
  if (partner > 0) {
    std::vector<char> buf(kMediumBytes, 1);
    mine.gamma = combineTime();
    mine.pairSmall = pingPong(comm, partner, buf, kSmallBytes, kSmallRounds);
    mine.pairMedium = pingPong(comm, partner, buf, kMediumBytes, kMediumRounds);
  }
  mine.seconds = secondsSince(t0);
  mine.hashHi = static_cast<double>(rowsHash >> 32);
  mine.hashLo = static_cast<double>(rowsHash & 0xffffffffu);

  std::vector<Sample> all(P);
  CollRequest gather;
  gather.kind = CollKind::kAllGather;
  gather.sendbuf = &mine;
  gather.recvbuf = all.data();
  gather.count = kSampleDoubles;
  gather.dtype = DataType::kFloat64;
  comm.collective(gather);

  Sample worst{};
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
  }
  MeasuredTerms m;
  m.seconds = worst.seconds;
  if (partner == 0) return m;
  // alpha + bytes * beta per message, from the two sizes. The floors keep a term that timer
  // noise made zero or negative from pricing its bytes or messages as free: 1 ns per message,
  // 1 TB/s.
  m.alpha = std::max(worst.pairSmall, 1e-9);
  m.beta = std::max((worst.pairMedium - worst.pairSmall) / double(kMediumBytes - kSmallBytes),
                    1e-12);
  m.gamma = std::max(worst.gamma, 1e-12);
  return m;
}

}  // namespace squeeze
