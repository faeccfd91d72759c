// Double binary tree all-reduce (Sanders, Speck & Traeff; NCCL 2.4; the seed's "double binary
// tree all-reduce"). Two binary trees over the same ranks, each carrying half of the buffer:
// tree 0 is the in-order balanced tree on ranks 0..P-1 (the root of a range is its middle), tree
// 1 the same tree on mirrored ranks (P-1-r) when P is even, or shifted ranks (r+1 mod P) when P
// is odd, so that (nearly) every leaf of one tree is an inner node of the other and each rank
// sends and receives about n/2 per phase.
//
// Schedule, per tree and per pipeline piece of its half: reduce up (recv-reduce from each child,
// then send to the parent; the root finalizes), broadcast down (recv-final from the parent,
// send-final to each child). Pieces are emitted in rounds: round k holds the reduce of piece k
// and the broadcast of piece k - D (D = tree depth), for both trees, in the same order on every
// rank, so each pair's messages match in order and the two phases overlap.
// Cost: 2 log2(P) alpha + about 2 n beta per rank (n/2 up and n/2 down per tree), pipelined:
// logarithmic latency and, with pieces, close to the ring's bandwidth.
#include "algorithms/algorithm.h"

namespace squeeze {
namespace {

struct TreeLinks {
  int parent = -1;
  int children[2] = {-1, -1};
};

// Links of position `pos` in the in-order balanced tree on [0, n).
TreeLinks linksOf(int pos, int n) {
  TreeLinks links;
  int lo = 0, hi = n, parent = -1;
  for (;;) {
    int mid = lo + (hi - lo) / 2;
    if (pos == mid) {
      links.parent = parent;
      if (mid > lo) links.children[0] = lo + (mid - lo) / 2;
      if (mid + 1 < hi) links.children[1] = mid + 1 + (hi - mid - 1) / 2;
      return links;
    }
    parent = mid;
    if (pos < mid)
      hi = mid;
    else
      lo = mid + 1;
  }
}

int depthOf(int n) {
  int d = 0;
  while ((1 << d) <= n) ++d;
  return d;
}

}  // namespace

Schedule buildTreeAllReduce(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  if (P == 1) return localOnlySchedule(req);
  // Tree 1's position of a rank and its inverse.
  auto toPos1 = [&](int rank) { return P % 2 == 0 ? P - 1 - rank : (rank + P - 1) % P; };
  auto fromPos1 = [&](int pos) { return P % 2 == 0 ? P - 1 - pos : (pos + 1) % P; };
  TreeLinks trees[2] = {linksOf(r, P), linksOf(toPos1(r), P)};
  for (int c = 0; c < 2; ++c)
    if (trees[1].children[c] >= 0) trees[1].children[c] = fromPos1(trees[1].children[c]);
  if (trees[1].parent >= 0) trees[1].parent = fromPos1(trees[1].parent);

  struct Piece {
    size_t off, cnt;
  };
  std::vector<Piece> pieces[2];
  const size_t half = partStart(req.count, 2, 1);
  forEachPiece(0, half, prm.chunkElems, [&](size_t o, size_t c) { pieces[0].push_back({o, c}); });
  forEachPiece(half, req.count, prm.chunkElems,
               [&](size_t o, size_t c) { pieces[1].push_back({o, c}); });
  std::vector<uint32_t> up[2], down[2];
  for (int t = 0; t < 2; ++t) {
    up[t].assign(pieces[t].size(), kNoDep);
    down[t].assign(pieces[t].size(), kNoDep);
  }

  Schedule sched;
  auto reduceUp = [&](int t, size_t k) {
    const TreeLinks& tl = trees[t];
    const Piece& pc = pieces[t][k];
    uint32_t prev = kNoDep;
    for (int child : tl.children) {
      if (child < 0) continue;
      Op op = spanOp(OpKind::kRecvReduce, child, 2 * t, pc.off, pc.cnt,
                     prev == kNoDep ? BufferRole::kInput : BufferRole::kOutput);
      op.deps[0] = prev;
      prev = sched.add(op);
    }
    if (tl.parent >= 0) {
      Op op = spanOp(OpKind::kSend, tl.parent, 2 * t, pc.off, pc.cnt,
                     prev == kNoDep ? BufferRole::kInput : BufferRole::kOutput);
      op.deps[0] = prev;
      up[t][k] = sched.add(op);
    } else {
      Op op = spanOp(OpKind::kFinalize, -1, 0, pc.off, pc.cnt);
      op.deps[0] = prev;
      down[t][k] = sched.add(op);
    }
  };
  auto broadcastDown = [&](int t, size_t k) {
    const TreeLinks& tl = trees[t];
    const Piece& pc = pieces[t][k];
    if (tl.parent >= 0) {
      Op op = spanOp(OpKind::kRecvFinal, tl.parent, 2 * t + 1, pc.off, pc.cnt);
      op.deps[0] = up[t][k];  // in place, the send up reads what this overwrites
      down[t][k] = sched.add(op);
    }
    for (int child : tl.children) {
      if (child < 0) continue;
      Op op = spanOp(OpKind::kSendFinal, child, 2 * t + 1, pc.off, pc.cnt);
      op.deps[0] = down[t][k];
      sched.add(op);
    }
  };

  const size_t lag = static_cast<size_t>(depthOf(P));
  const size_t rounds = std::max(pieces[0].size(), pieces[1].size()) + lag;
  for (size_t k = 0; k < rounds; ++k) {
    for (int t = 0; t < 2; ++t)
      if (k < pieces[t].size()) reduceUp(t, k);
    for (int t = 0; t < 2; ++t)
      if (k >= lag && k - lag < pieces[t].size()) broadcastDown(t, k - lag);
  }
  return sched;
}

}  // namespace squeeze
