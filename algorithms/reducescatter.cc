// Reduce-scatter: block r (count elements) of the combination of every rank's sendbuff
// (P*count elements) lands in rank r's recvbuff. In place when recvbuff == sendbuff + r*count.
//   ring: P-1 steps; at step s rank r sends its partial of block r-s-1 to r+1 and combines block
//     r-s-2 from r-1 with its input into a scratch partial; the last step combines block r into
//     recvbuff, which it finalizes. Cost: (P-1) alpha + (P-1) n beta + (P-1) n gamma.
//   naive: every rank sends block b to rank b, which combines in rank order (parameter-server
//     style). Cost: (P-1) alpha, the same bytes, all at once.
#include "algorithms/algorithm.h"

namespace squeeze {

Schedule buildRingReduceScatter(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  if (P == 1) return localOnlySchedule(req);
  const size_t n = req.count;
  Schedule sched;
  sched.scratchElems = P * n;
  std::vector<std::vector<uint32_t>> partial(P);  // producer per block piece
  for (int s = 0; s < P - 1; ++s) {
    const int sendB = (r - s - 1 + 2 * P) % P, recvB = (r - s - 2 + 2 * P) % P;
    const bool last = s == P - 2;  // recvB == r
    size_t j = 0;
    forEachPiece(0, n, prm.chunkElems, [&](size_t off, size_t cnt) {
      Op op = spanOp(OpKind::kSend, (r + 1) % P, s, sendB * n + off, cnt,
                     s == 0 ? BufferRole::kInput : BufferRole::kScratch);
      if (s > 0) op.deps[0] = partial[sendB][j];
      sched.add(op);
      ++j;
    });
    forEachPiece(0, n, prm.chunkElems, [&](size_t off, size_t cnt) {
      Op op = spanOp(OpKind::kRecvReduce, (r - 1 + P) % P, s, recvB * n + off, cnt,
                     BufferRole::kInput, last ? BufferRole::kOutput : BufferRole::kScratch);
      if (last) op.dst.offset = off;
      uint32_t id = sched.add(op);
      partial[recvB].push_back(id);
      if (last) {
        Op fin = spanOp(OpKind::kFinalize, -1, 0, off, cnt);
        fin.deps[0] = id;
        sched.add(fin);
      }
    });
  }
  return sched;
}

Schedule buildNaiveReduceScatter(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  if (P == 1) return localOnlySchedule(req);
  const size_t n = req.count;
  Schedule sched;
  for (int p = 0; p < P; ++p) {
    if (p == r) continue;
    forEachPiece(0, n, prm.chunkElems, [&](size_t off, size_t cnt) {
      sched.add(spanOp(OpKind::kSend, p, 0, p * n + off, cnt, BufferRole::kInput));
    });
  }
  std::vector<uint32_t> last;
  forEachPiece(0, n, prm.chunkElems, [&](size_t, size_t) { last.push_back(kNoDep); });
  for (int p = 0; p < P; ++p) {
    if (p == r) continue;
    size_t j = 0;
    forEachPiece(0, n, prm.chunkElems, [&](size_t off, size_t cnt) {
      Op op = spanOp(OpKind::kRecvReduce, p, 0, r * n + off, cnt,
                     last[j] == kNoDep ? BufferRole::kInput : BufferRole::kOutput);
      op.dst.offset = off;
      if (last[j] != kNoDep) op.src.offset = off;  // the running sum lives in the output
      op.deps[0] = last[j];
      last[j++] = sched.add(op);
    });
  }
  size_t j = 0;
  forEachPiece(0, n, prm.chunkElems, [&](size_t off, size_t cnt) {
    Op fin = spanOp(OpKind::kFinalize, -1, 0, off, cnt);
    fin.deps[0] = last[j++];
    sched.add(fin);
  });
  return sched;
}

}  // namespace squeeze
