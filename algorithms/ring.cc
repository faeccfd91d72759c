// Ring all-reduce (Patarasuk & Yuan; the seed's "ring all-reduce"), pipelined in chunks.
//
// Schedule, for rank r of P, buffer of N elements cut into P segments (segment s is
// partStart(N, P, s) .. partStart(N, P, s+1)), each segment cut into pieces of at most
// chunkElems elements that travel independently (so combining piece i overlaps sending i+1):
//   reduce-scatter, step s = 0..P-2: send segment (r-s) to r+1 (from the input at s = 0, then
//     from the output, where step s-1 left it), receive segment (r-s-1) from r-1 and combine it
//     with the input into the output. After P-1 steps rank r holds segment (r+1) fully reduced.
//   finalize segment (r+1): avg's division, and the codec's encode-once (DESIGN: replicas agree
//     bit for bit because every rank ends with the owner's payload).
//   all-gather, step t = 0..P-2: forward segment (r+1-t) to r+1 unchanged, receive segment (r-t)
//     from r-1 into the output.
// Cost (alpha-beta, message size n bytes): 2(P-1) alpha + 2 (P-1)/P n beta, plus (P-1)/P n
// bytes of reduction per rank: bandwidth-optimal, latency linear in P.
#include "algorithms/algorithm.h"

namespace squeeze {
namespace {

size_t mod(long long a, int p) { return static_cast<size_t>(((a % p) + p) % p); }

}  // namespace

Schedule buildRingAllReduce(const CollRequest& req, const ScheduleParams& prm) {
  Schedule sched;
  const int P = prm.nranks, r = prm.rank;
  const size_t N = req.count;
  if (P == 1) return localOnlySchedule(req);
  const int right = static_cast<int>(mod(r + 1, P)), left = static_cast<int>(mod(r - 1, P));
  auto segStart = [&](size_t s) { return partStart(N, P, s); };
  auto pieces = [&](size_t s) {
    size_t len = segStart(s + 1) - segStart(s);
    return (len + prm.chunkElems - 1) / prm.chunkElems;
  };
  // Piece j of segment s as an op template: count and wire offset filled in.
  auto piece = [&](size_t s, size_t j, OpKind kind, int peer, uint32_t step) {
    size_t lo = segStart(s) + j * prm.chunkElems;
    return spanOp(kind, peer, step, lo, std::min(prm.chunkElems, segStart(s + 1) - lo));
  };

  // Per segment and piece, the op that last produced it on this rank, and its last send.
  std::vector<std::vector<uint32_t>> producer(P), lastSend(P);
  for (int s = 0; s < P; ++s) {
    producer[s].assign(pieces(s), kNoDep);
    lastSend[s].assign(pieces(s), kNoDep);
  }

  for (int step = 0; step < P - 1; ++step) {
    const size_t sendSeg = mod(r - step, P), recvSeg = mod(r - step - 1, P);
    const uint32_t st = static_cast<uint32_t>(step);
    for (size_t j = 0; j < pieces(sendSeg); ++j) {
      Op op = piece(sendSeg, j, OpKind::kSend, right, st);
      if (step == 0) op.src.buf = BufferRole::kInput;
      op.deps[0] = producer[sendSeg][j];
      lastSend[sendSeg][j] = sched.add(op);
    }
    for (size_t j = 0; j < pieces(recvSeg); ++j) {
      Op op = piece(recvSeg, j, OpKind::kRecvReduce, left, st);
      op.src.buf = BufferRole::kInput;  // the first touch of this segment on this rank
      producer[recvSeg][j] = sched.add(op);
    }
  }
  const size_t owned = mod(r + 1, P);
  for (size_t j = 0; j < pieces(owned); ++j) {
    Op op = piece(owned, j, OpKind::kFinalize, -1, 0);
    op.deps[0] = producer[owned][j];
    producer[owned][j] = sched.add(op);
  }
  for (int t = 0; t < P - 1; ++t) {
    const uint32_t step = static_cast<uint32_t>(P - 1 + t);
    const size_t sendSeg = mod(r + 1 - t, P), recvSeg = mod(r - t, P);
    for (size_t j = 0; j < pieces(sendSeg); ++j) {
      Op op = piece(sendSeg, j, OpKind::kSendFinal, right, step);
      op.deps[0] = producer[sendSeg][j];
      lastSend[sendSeg][j] = sched.add(op);
    }
    for (size_t j = 0; j < pieces(recvSeg); ++j) {
      Op op = piece(recvSeg, j, OpKind::kRecvFinal, left, step);
      // The output range may still be on its way out from reduce-scatter: write after it left.
      op.deps[0] = lastSend[recvSeg][j];
      producer[recvSeg][j] = sched.add(op);
    }
  }
  return sched;
}

}  // namespace squeeze
