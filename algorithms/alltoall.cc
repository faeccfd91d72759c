// All-to-all: block p (count elements) of rank r's sendbuff lands at block r of rank p's
// recvbuff. Not in place.
//   naive (pairwise): every rank posts its P-1 sends and P-1 receives at once, in pipeline
//     pieces; the transports move them as fast as the links allow. Cost: (P-1) alpha +
//     (P-1) n beta per rank.
#include "algorithms/algorithm.h"

namespace squeeze {

Schedule buildNaiveAlltoAll(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  const size_t n = req.count;
  Schedule sched;
  Op copy = spanOp(OpKind::kCopy, -1, 0, r * n, n, BufferRole::kInput);
  sched.add(copy);
  for (int p = 0; p < P; ++p) {
    if (p == r) continue;
    forEachPiece(0, n, prm.chunkElems, [&](size_t off, size_t cnt) {
      // The header's offset is the piece's place within the block, the same on both ends.
      Op send = spanOp(OpKind::kSendFinal, p, 0, off, cnt, BufferRole::kInput);
      send.src.offset = p * n + off;
      sched.add(send);
      Op recv = spanOp(OpKind::kRecvFinal, p, 0, off, cnt);
      recv.dst.offset = p * n + off;
      sched.add(recv);
    });
  }
  return sched;
}

}  // namespace squeeze
