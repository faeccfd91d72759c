// Parameter-server all-reduce (the seed's "parameter server all-reduce"): the buffer is cut into
// P shards; rank s owns shard s. Every rank pushes each shard to its owner, owners combine the
// contributions (in rank order), finalize, and push the result back to every rank.
//
// Schedule, per pipeline piece of each shard: owner: recv-reduce the piece from every other rank
// (chained, rank order), finalize, send-final to every other rank; non-owner: send its input
// piece to the owner, recv-final the result. Phase 0 (pushes) is emitted before phase 1 (the
// replies), so each pair's messages are in the same order on both ends.
// Cost: alpha + (P-1)/P n beta in, the same out, at every rank at once: (P-1) n/P inbound per
// owner, each shard reduced once. One rounding per element for compressing codecs (CGX-style).
#include "algorithms/algorithm.h"

namespace squeeze {

Schedule buildPsAllReduce(const CollRequest& req, const ScheduleParams& prm) {
  const int P = prm.nranks, r = prm.rank;
  if (P == 1) return localOnlySchedule(req);
  Schedule sched;
  auto shard = [&](int s, size_t* lo, size_t* hi) {
    *lo = partStart(req.count, P, s);
    *hi = partStart(req.count, P, s + 1);
  };
  size_t lo, hi;
  // Phase 0: push my pieces of every other shard; receive and combine my own shard.
  std::vector<uint32_t> sentBy;  // my sends of shard pieces, in order, for the phase-1 receives
  for (int s = 0; s < P; ++s) {
    if (s == r) continue;
    shard(s, &lo, &hi);
    forEachPiece(lo, hi, prm.chunkElems, [&](size_t off, size_t cnt) {
      sentBy.push_back(sched.add(spanOp(OpKind::kSend, s, 0, off, cnt, BufferRole::kInput)));
    });
  }
  shard(r, &lo, &hi);
  std::vector<uint32_t> last;  // per piece of my shard: the last op that combined into it
  forEachPiece(lo, hi, prm.chunkElems, [&](size_t, size_t) { last.push_back(kNoDep); });
  for (int p = 0; p < P; ++p) {
    if (p == r) continue;
    size_t j = 0;
    forEachPiece(lo, hi, prm.chunkElems, [&](size_t off, size_t cnt) {
      Op op = spanOp(OpKind::kRecvReduce, p, 0, off, cnt,
                     last[j] == kNoDep ? BufferRole::kInput : BufferRole::kOutput);
      op.deps[0] = last[j];
      last[j++] = sched.add(op);
    });
  }
  // Phase 1: finalize and reply for my shard; receive every other shard's result.
  size_t j = 0;
  forEachPiece(lo, hi, prm.chunkElems, [&](size_t off, size_t cnt) {
    Op fin = spanOp(OpKind::kFinalize, -1, 0, off, cnt);
    fin.deps[0] = last[j];
    last[j++] = sched.add(fin);
  });
  for (int p = 0; p < P; ++p) {
    if (p == r) continue;
    size_t k = 0;
    forEachPiece(lo, hi, prm.chunkElems, [&](size_t off, size_t cnt) {
      Op op = spanOp(OpKind::kSendFinal, p, 1, off, cnt);
      op.deps[0] = last[k++];
      sched.add(op);
    });
  }
  size_t sendIndex = 0;
  for (int s = 0; s < P; ++s) {
    if (s == r) continue;
    shard(s, &lo, &hi);
    forEachPiece(lo, hi, prm.chunkElems, [&](size_t off, size_t cnt) {
      Op op = spanOp(OpKind::kRecvFinal, s, 1, off, cnt);
      op.deps[0] = sentBy[sendIndex++];  // in place, the push reads what this overwrites
      sched.add(op);
    });
  }
  return sched;
}

}  // namespace squeeze
