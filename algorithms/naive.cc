// Naive all-reduce: the reference. Every rank sends its whole buffer to rank 0, which combines
// the contributions in rank order, finalizes, and sends the result back to every rank.
//
// Schedule, per pipeline piece (SQZ_CHUNK_BYTES): rank 0: recv-reduce from 1, 2, ..., P-1
// (each depending on the last), finalize, send-final to every rank; rank r > 0: send its input,
// recv-final the result (after the send: in place, the send reads what the receive overwrites).
// Cost: (P-1) alpha + 2 (P-1) n beta at rank 0, which also does all (P-1) n of the reduction:
// fine for a handful of bytes, where one round trip beats any cleverness.
#include "algorithms/algorithm.h"

namespace squeeze {

Schedule buildNaiveAllReduce(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  if (P == 1) return localOnlySchedule(req);
  Schedule sched;
  forEachPiece(0, req.count, prm.chunkElems, [&](size_t off, size_t cnt) {
    if (r == 0) {
      uint32_t prev = kNoDep;
      for (int p = 1; p < P; ++p) {
        Op op = spanOp(OpKind::kRecvReduce, p, 0, off, cnt,
                       p == 1 ? BufferRole::kInput : BufferRole::kOutput);
        op.deps[0] = prev;
        prev = sched.add(op);
      }
      Op fin = spanOp(OpKind::kFinalize, -1, 0, off, cnt);
      fin.deps[0] = prev;
      uint32_t done = sched.add(fin);
      for (int p = 1; p < P; ++p) {
        Op op = spanOp(OpKind::kSendFinal, p, 1, off, cnt);
        op.deps[0] = done;
        sched.add(op);
      }
    } else {
      uint32_t sent = sched.add(spanOp(OpKind::kSend, 0, 0, off, cnt, BufferRole::kInput));
      Op op = spanOp(OpKind::kRecvFinal, 0, 1, off, cnt);
      op.deps[0] = sent;
      sched.add(op);
    }
  });
  return sched;
}

}  // namespace squeeze
