// Reduce: the combination of every rank's sendbuff, in root's recvbuff (other ranks' recvbuff
// is not touched and may be NULL).
//   ring: a pipelined chain root+1 -> root+2 -> ... -> root; each rank combines the piece it
//     receives with its input (in a scratch buffer) and passes it on; root finalizes.
//     Cost: (P-1) alpha + n beta + n gamma per rank, pipelined.
//   naive: every rank sends to root, which combines in rank order. Cost: alpha + (P-1) n beta
//     and (P-1) n gamma at the root.
#include "algorithms/algorithm.h"

namespace squeeze {

Schedule buildRingReduce(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  if (P == 1) return localOnlySchedule(req);
  Schedule sched;
  const int pos = (r - req.root - 1 + 2 * P) % P, next = (r + 1) % P, prev = (r - 1 + P) % P;
  const bool isRoot = pos == P - 1;
  if (pos > 0 && !isRoot) sched.scratchElems = req.count;
  forEachPiece(0, req.count, prm.chunkElems, [&](size_t off, size_t cnt) {
    if (pos == 0) {
      sched.add(spanOp(OpKind::kSend, next, 0, off, cnt, BufferRole::kInput));
      return;
    }
    uint32_t got = sched.add(spanOp(OpKind::kRecvReduce, prev, 0, off, cnt, BufferRole::kInput,
                                    isRoot ? BufferRole::kOutput : BufferRole::kScratch));
    Op op = isRoot ? spanOp(OpKind::kFinalize, -1, 0, off, cnt)
                   : spanOp(OpKind::kSend, next, 0, off, cnt, BufferRole::kScratch);
    op.deps[0] = got;
    sched.add(op);
  });
  return sched;
}

Schedule buildNaiveReduce(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  if (P == 1) return localOnlySchedule(req);
  Schedule sched;
  forEachPiece(0, req.count, prm.chunkElems, [&](size_t off, size_t cnt) {
    if (r != req.root) {
      sched.add(spanOp(OpKind::kSend, req.root, 0, off, cnt, BufferRole::kInput));
      return;
    }
    uint32_t prev = kNoDep;
    for (int p = 0; p < P; ++p) {
      if (p == r) continue;
      Op op = spanOp(OpKind::kRecvReduce, p, 0, off, cnt,
                     prev == kNoDep ? BufferRole::kInput : BufferRole::kOutput);
      op.deps[0] = prev;
      prev = sched.add(op);
    }
    Op fin = spanOp(OpKind::kFinalize, -1, 0, off, cnt);
    fin.deps[0] = prev;
    sched.add(fin);
  });
  return sched;
}

}  // namespace squeeze
