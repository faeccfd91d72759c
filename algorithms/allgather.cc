// All-gather: rank r's sendbuff (count elements) lands at recvbuff + r*count on every rank.
// In place when sendbuff == recvbuff + rank*count.
//   ring: P-1 steps; at step t rank r forwards block r-t to r+1 and receives block r-t-1 from
//     r-1, each block in pipeline pieces. Cost: (P-1) alpha + (P-1) n beta (n = count bytes).
//   naive: every rank sends its block to every other rank directly. Cost: (P-1) alpha and the
//     same bytes, all at once.
#include "algorithms/algorithm.h"

namespace squeeze {
namespace {

// Piece op of block b (output offset b*count + off), with the source given separately.
Op blockOp(OpKind kind, int peer, uint32_t step, size_t blockStart, size_t off, size_t cnt) {
  return spanOp(kind, peer, step, blockStart + off, cnt);
}

// Rank r's own block: from the input to its place in the output (a no-op in place).
void copyOwnBlock(Schedule& sched, int r, size_t n) {
  Op copy = spanOp(OpKind::kCopy, -1, 0, 0, n, BufferRole::kInput);
  copy.dst.offset = r * n;
  sched.add(copy);
}

}  // namespace

Schedule buildRingAllGather(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  const size_t n = req.count;
  Schedule sched;
  copyOwnBlock(sched, r, n);
  // producer of each piece of each block (by block, piece index)
  std::vector<std::vector<uint32_t>> got(P);
  for (int t = 0; t < P - 1; ++t) {
    const int sendB = (r - t + P) % P, recvB = (r - t - 1 + 2 * P) % P;
    size_t j = 0;
    forEachPiece(0, n, prm.chunkElems, [&](size_t off, size_t cnt) {
      Op op = blockOp(OpKind::kSendFinal, (r + 1) % P, t, sendB * n, off, cnt);
      if (t == 0) op.src = {BufferRole::kInput, off};  // my own block straight from the input
      else op.deps[0] = got[sendB][j];
      sched.add(op);
      ++j;
    });
    forEachPiece(0, n, prm.chunkElems, [&](size_t off, size_t cnt) {
      got[recvB].push_back(
          sched.add(blockOp(OpKind::kRecvFinal, (r - 1 + P) % P, t, recvB * n, off, cnt)));
    });
  }
  return sched;
}

Schedule buildNaiveAllGather(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  const size_t n = req.count;
  Schedule sched;
  copyOwnBlock(sched, r, n);
  for (int p = 0; p < P; ++p) {
    if (p == r) continue;
    forEachPiece(0, n, prm.chunkElems, [&](size_t off, size_t cnt) {
      Op op = blockOp(OpKind::kSendFinal, p, 0, r * n, off, cnt);
      op.src = {BufferRole::kInput, off};
      sched.add(op);
      sched.add(blockOp(OpKind::kRecvFinal, p, 0, p * n, off, cnt));
    });
  }
  return sched;
}

}  // namespace squeeze
