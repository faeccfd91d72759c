// A schedule: what one rank does for one collective call, as a list of ops over element ranges
// of the caller's buffers, with dependencies. Algorithms build schedules; the executor runs them.
//
// Ordering rule the executor relies on: the k-th Send/SendFinal to peer p in this rank's
// schedule is matched by the k-th RecvReduce/RecvFinal from this rank in p's schedule, and both
// carry the same step and offset (checked on arrival).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/types.h"

namespace squeeze {

enum class OpKind : uint8_t {
  kCopy,        // dst[range] = src[range]
  kSend,        // send (encoded) src[range] to peer: a partial result on its way to be reduced
  kRecvReduce,  // dst[range] = src[range] (op) received payload
  kFinalize,    // dst[range] is fully reduced: apply avg's division, encode once and decode
                // the payload back, so the owner holds what every other rank will receive
  kSendFinal,   // forward the final payload of src[range] unchanged
  kRecvFinal,   // receive a final payload and decode it into dst[range]
  kJoin,        // nothing: done when both deps are (to wait for more than two ops)
};

constexpr uint32_t kNoDep = UINT32_MAX;

// A place an op reads or writes: a buffer and an element offset in it.
struct Span {
  BufferRole buf = BufferRole::kOutput;
  size_t offset = 0;  // elements
  uint32_t user = 0;  // index into Schedule::userBuffers when buf is kUser
};

struct Op {
  OpKind kind;
  int peer = -1;
  uint32_t step = 0;  // carried in the message header, with the message's offset
  size_t count = 0;   // elements
  Span src;           // kCopy, kSend, kSendFinal; kRecvReduce's local operand
  Span dst;           // kCopy, kRecvReduce, kFinalize, kRecvFinal
  uint32_t deps[2] = {kNoDep, kNoDep};  // ops that must finish before this one starts

  // The element offset the header carries: where the data sits in the collective's index space.
  size_t wireOffset = 0;
};

struct Schedule {
  std::vector<Op> ops;
  size_t scratchElems = 0;  // size of BufferRole::kScratch the executor provides
  // Grouped send/recv: each op's own buffer. In such schedules an op's step is the message's
  // number between the two ranks, and its count is the message's (the header carries both).
  std::vector<char*> userBuffers;

  uint32_t add(const Op& op) {
    ops.push_back(op);
    return static_cast<uint32_t>(ops.size() - 1);
  }

  // One op that is done when all of `ids` are (kNoDep for none).
  uint32_t joinAll(const std::vector<uint32_t>& ids) {
    uint32_t acc = kNoDep;
    for (uint32_t id : ids) {
      if (acc == kNoDep) {
        acc = id;
        continue;
      }
      Op join{.kind = OpKind::kJoin};
      join.deps[0] = acc;
      join.deps[1] = id;
      acc = add(join);
    }
    return acc;
  }
};

// Splits [0, count) into nparts near-equal parts (the first count % nparts one element longer).
inline size_t partStart(size_t count, size_t nparts, size_t i) {
  size_t base = count / nparts, rem = count % nparts;
  return i * base + (i < rem ? i : rem);
}

// Cuts [lo, hi) into pipeline pieces of at most chunk elements, starting at lo: f(offset, count).
template <class F>
void forEachPiece(size_t lo, size_t hi, size_t chunk, F&& f) {
  for (size_t a = lo; a < hi; a += chunk) f(a, hi - a < chunk ? hi - a : chunk);
}

// An op over [offset, offset + count) of the collective's index space, both spans there.
inline Op spanOp(OpKind kind, int peer, uint32_t step, size_t offset, size_t count,
                 BufferRole src = BufferRole::kOutput, BufferRole dst = BufferRole::kOutput) {
  Op op{.kind = kind, .peer = peer, .step = step, .count = count};
  op.src = {src, offset};
  op.dst = {dst, offset};
  op.wireOffset = offset;
  return op;
}

// The schedule of a one-rank call: copy (when out of place) and finalize.
inline Schedule localOnlySchedule(const CollRequest& req) {
  Schedule s;
  if (!req.inPlace()) s.add(spanOp(OpKind::kCopy, -1, 0, 0, req.count, BufferRole::kInput));
  s.add(spanOp(OpKind::kFinalize, -1, 0, 0, req.count));
  return s;
}

// The step of an agreement message (never an algorithm's step).
constexpr uint32_t kAgreementStep = UINT32_MAX;

// SQZ_CHECK_MODE=full: before a call, each rank sends an empty message to the next rank and
// receives one from the previous. The headers carry the call's description, so ranks that
// disagree in a way the call's own messages would not show (each names itself the root of a
// reduce: both only receive) are told so: if any two ranks differ, two neighbours do.
inline Schedule agreementSchedule(int rank, int nranks) {
  Schedule s;
  s.add(spanOp(OpKind::kSend, (rank + 1) % nranks, kAgreementStep, 0, 0));
  s.add(spanOp(OpKind::kRecvFinal, (rank + nranks - 1) % nranks, kAgreementStep, 0, 0));
  return s;
}

}  // namespace squeeze
