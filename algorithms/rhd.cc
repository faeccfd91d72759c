// Recursive halving/doubling all-reduce (Rabenseifner; the seed's "recursive halving and
// doubling"): reduce-scatter by recursive halving, all-gather by recursive doubling.
//
// Schedule, with p2 the largest power of two <= P and rem = P - p2:
//   fold (step 0): ranks below 2*rem pair up; each even one sends its whole input to its odd
//     neighbour, which combines it and takes part as virtual rank r/2; the even one sits out.
//     Other ranks are virtual rank r - rem.
//   reduce-scatter (steps 1..L, L = log2 p2): the buffer is cut into p2 blocks; at the step with
//     mask m (p2/2 down to 1) a rank exchanges half of its current block range with virtual
//     rank v^m: it sends the half it gives up and combines the partner's copy of the half it
//     keeps (the lower half when v & m is 0). It ends owning block v, which it finalizes.
//   all-gather (steps L+1..2L): masks 1 up to p2/2, each rank sends the final blocks it has and
//     receives its partner's, doubling its range.
//   unfold (step 2L+1): each odd folded rank sends the result to its even neighbour.
// Every block is cut into SQZ_CHUNK_BYTES pieces from its start, so every exchange is whole
// pieces and dependencies are per piece.
// Cost: 2 log2(p2) alpha + 2 (p2-1)/p2 n beta (+ 2 (alpha + n beta) when P is not a power of
// two): the latency of a tree with the bandwidth of a ring.
#include "algorithms/algorithm.h"

namespace squeeze {

Schedule buildRhdAllReduce(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  if (P == 1) return localOnlySchedule(req);
  int p2 = 1, L = 0;
  while (p2 * 2 <= P) {
    p2 *= 2;
    ++L;
  }
  const int rem = P - p2;
  const int vrank = r < 2 * rem ? (r % 2 == 0 ? -1 : r / 2) : r - rem;
  auto realRank = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };

  // The piece grid: blocks of the p2-way split, each cut into chunk pieces.
  struct Piece {
    size_t off, cnt;
  };
  std::vector<Piece> pieces;
  std::vector<size_t> blockFirst(p2 + 1);
  for (int b = 0; b < p2; ++b) {
    blockFirst[b] = pieces.size();
    forEachPiece(partStart(req.count, p2, b), partStart(req.count, p2, b + 1), prm.chunkElems,
                 [&](size_t off, size_t cnt) { pieces.push_back({off, cnt}); });
  }
  blockFirst[p2] = pieces.size();
  const size_t np = pieces.size();
  std::vector<uint32_t> producer(np, kNoDep), lastSend(np, kNoDep);
  std::vector<BufferRole> where(np, BufferRole::kInput);

  Schedule sched;
  const uint32_t unfoldStep = static_cast<uint32_t>(2 * L + 1);
  if (vrank < 0) {  // even folded rank: hand the input over, get the result back
    for (const Piece& pc : pieces) {
      uint32_t s = sched.add(spanOp(OpKind::kSend, r + 1, 0, pc.off, pc.cnt, BufferRole::kInput));
      Op op = spanOp(OpKind::kRecvFinal, r + 1, unfoldStep, pc.off, pc.cnt);
      op.deps[0] = s;
      sched.add(op);
    }
    return sched;
  }
  if (r < 2 * rem) {
    for (size_t i = 0; i < np; ++i) {
      producer[i] = sched.add(spanOp(OpKind::kRecvReduce, r - 1, 0, pieces[i].off, pieces[i].cnt,
                                     BufferRole::kInput));
      where[i] = BufferRole::kOutput;
    }
  }
  auto sendRange = [&](int peer, uint32_t step, int b0, int b1, OpKind kind) {
    for (size_t i = blockFirst[b0]; i < blockFirst[b1]; ++i) {
      Op op = spanOp(kind, peer, step, pieces[i].off, pieces[i].cnt, where[i]);
      op.deps[0] = producer[i];
      lastSend[i] = sched.add(op);
    }
  };

  int blo = 0, bhi = p2;
  uint32_t step = 1;
  for (int mask = p2 / 2; mask >= 1; mask /= 2, ++step) {
    const int peer = realRank(vrank ^ mask);
    const int bmid = (blo + bhi) / 2;
    const bool keepLow = (vrank & mask) == 0;
    if (keepLow)
      sendRange(peer, step, bmid, bhi, OpKind::kSend);
    else
      sendRange(peer, step, blo, bmid, OpKind::kSend);
    const int k0 = keepLow ? blo : bmid, k1 = keepLow ? bmid : bhi;
    for (size_t i = blockFirst[k0]; i < blockFirst[k1]; ++i) {
      Op op = spanOp(OpKind::kRecvReduce, peer, step, pieces[i].off, pieces[i].cnt, where[i]);
      op.deps[0] = producer[i];
      producer[i] = sched.add(op);
      where[i] = BufferRole::kOutput;
    }
    blo = k0;
    bhi = k1;
  }
  for (size_t i = blockFirst[blo]; i < blockFirst[bhi]; ++i) {
    Op op = spanOp(OpKind::kFinalize, -1, 0, pieces[i].off, pieces[i].cnt);
    op.deps[0] = producer[i];
    producer[i] = sched.add(op);
  }
  for (int mask = 1; mask < p2; mask *= 2, ++step) {
    const int peer = realRank(vrank ^ mask);
    const int size = bhi - blo;
    const bool partnerAbove = (vrank & mask) == 0;
    sendRange(peer, step, blo, bhi, OpKind::kSendFinal);
    const int p0 = partnerAbove ? bhi : blo - size, p1 = partnerAbove ? bhi + size : blo;
    for (size_t i = blockFirst[p0]; i < blockFirst[p1]; ++i) {
      Op op = spanOp(OpKind::kRecvFinal, peer, step, pieces[i].off, pieces[i].cnt);
      op.deps[0] = lastSend[i];  // the range may still be on its way out from reduce-scatter
      producer[i] = sched.add(op);
    }
    blo = partnerAbove ? blo : p0;
    bhi = partnerAbove ? p1 : bhi;
  }
  if (r < 2 * rem) {
    for (size_t i = 0; i < np; ++i) {
      Op op = spanOp(OpKind::kSendFinal, r - 1, unfoldStep, pieces[i].off, pieces[i].cnt);
      op.deps[0] = producer[i];
      sched.add(op);
    }
  }
  return sched;
}

}  // namespace squeeze
