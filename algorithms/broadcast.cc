// Broadcast: root's sendbuff to every rank's recvbuff.
//   ring: a pipelined chain root -> root+1 -> ... -> root-1; each rank forwards piece k while
//     receiving piece k+1. Cost: (P-1) alpha + n beta (+ pieces of pipeline fill).
//   naive: root sends the whole buffer to every rank directly. Cost: alpha + (P-1) n beta at the
//     root; best for tiny messages.
#include "algorithms/algorithm.h"

namespace squeeze {

Schedule buildRingBroadcast(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  Schedule sched;
  const int pos = (r - req.root + P) % P, next = (r + 1) % P, prev = (r - 1 + P) % P;
  if (pos == 0 && !req.inPlace())
    sched.add(spanOp(OpKind::kCopy, -1, 0, 0, req.count, BufferRole::kInput));
  forEachPiece(0, req.count, prm.chunkElems, [&](size_t off, size_t cnt) {
    uint32_t have = kNoDep;
    if (pos > 0) have = sched.add(spanOp(OpKind::kRecvFinal, prev, 0, off, cnt));
    if (pos < P - 1) {
      Op op = spanOp(OpKind::kSendFinal, next, 0, off, cnt,
                     pos == 0 ? BufferRole::kInput : BufferRole::kOutput);
      op.deps[0] = have;
      sched.add(op);
    }
  });
  return sched;
}

Schedule buildNaiveBroadcast(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  Schedule sched;
  if (r == req.root) {
    if (!req.inPlace()) sched.add(spanOp(OpKind::kCopy, -1, 0, 0, req.count, BufferRole::kInput));
    for (int p = 0; p < P; ++p) {
      if (p == r) continue;
      forEachPiece(0, req.count, prm.chunkElems, [&](size_t off, size_t cnt) {
        sched.add(spanOp(OpKind::kSendFinal, p, 0, off, cnt, BufferRole::kInput));
      });
    }
  } else {
    forEachPiece(0, req.count, prm.chunkElems, [&](size_t off, size_t cnt) {
      sched.add(spanOp(OpKind::kRecvFinal, req.root, 0, off, cnt));
    });
  }
  return sched;
}

}  // namespace squeeze
