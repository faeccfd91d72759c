// Executor (see executor.h).
#include "core/executor.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <cstring>
#include <deque>

#include "base/clock.h"
#include "base/error.h"
#include "base/logging.h"
#include "compress/codec.h"
#include "device/reduce.h"
#include "transports/shm/doorbell.h"

namespace squeeze {
namespace {

struct Pending {
  uint32_t op;
  TransferRequest req;
  int scratch = -1;  // a CallMemory buffer released when the transfer is done
};

struct PeerQueues {
  std::vector<uint32_t> sends, recvs;  // op indices in schedule order
  size_t nextSend = 0, nextRecv = 0;
  std::deque<Pending> sending, receiving;  // deque: stable TransferRequest addresses
};

const char* opName(OpKind k) {
  switch (k) {
    case OpKind::kCopy: return "copy";
    case OpKind::kSend: return "send";
    case OpKind::kRecvReduce: return "recv-reduce";
    case OpKind::kFinalize: return "finalize";
    case OpKind::kSendFinal: return "send-final";
    case OpKind::kRecvFinal: return "recv-final";
    case OpKind::kJoin: return "join";
  }
  return "?";
}

}  // namespace

void Executor::run(const CollRequest& req, const Schedule& sched, const WireHeader& base,
                   ExecContext& ctx) {
  Codec& codec = *req.codec;
  // raw: payloads are the values, sent from and received into the buffers. Otherwise every
  // send is encoded, every receive lands in a payload buffer, and final payloads are kept per
  // piece (finals) so they can be forwarded unchanged and decoded once.
  const bool raw = codec.rawWire();
  CodecCall* const cc = req.codecCall;
  const size_t esz = dataTypeSize(req.dtype);
  mem_.begin(ctx.stream);
  const bool dev = mem_.onDevice();
  char* const bufs[] = {static_cast<char*>(const_cast<void*>(req.sendbuf)),
                        static_cast<char*>(req.recvbuf), mem_.work(sched.scratchElems * esz)};
  // Device calls: the peers whose connection reads only host memory (asked once per call).
  std::vector<uint8_t> hostOnly(dev ? ctx.nranks : 0, 0);
  bool anyHostOnly = false;
  for (size_t q = 0; q < hostOnly.size(); ++q)
    if (ctx.conns[q] && !ctx.conns[q]->readsDeviceMemory()) {
      hostOnly[q] = 1;
      anyHostOnly = true;
    }
  // Whether `bytes` of device memory to or from peer p go through a pinned buffer.
  auto staged = [&](int p, size_t bytes) { return dev && bytes > 0 && hostOnly[p]; };
  // Where a payload to or from peer p lives: host memory for host calls; for device calls
  // device memory when p's connection reads it, else pinned host memory. Payloads with no one
  // peer (a finalized piece, forwarded to any) go where every connection reads them.
  auto spaceFor = [&](int p) {
    if (!dev) return Space::kHost;
    return (p >= 0 ? hostOnly[p] : anyHostOnly) ? Space::kPinned : Space::kDevice;
  };
  auto at = [&](const Span& span) {
    char* base = span.buf == BufferRole::kUser ? sched.userBuffers[span.user]
                                               : bufs[static_cast<int>(span.buf)];
    return base + span.offset * esz;
  };
  const auto& ops = sched.ops;
  std::vector<uint8_t> done(ops.size(), 0);
  size_t remaining = ops.size();
  auto ready = [&](const Op& op) {
    for (uint32_t d : op.deps)
      if (d != kNoDep && !done[d]) return false;
    return true;
  };
  auto finish = [&](uint32_t i) {
    done[i] = 1;
    --remaining;
  };

  auto chunkAt = [&](const Op& op) {
    // op.peer is the sender on receive ops: a malformed payload's error names it.
    return ChunkInfo{op.wireOffset, cc ? cc->call : 0, ctx.rank, op.peer, ctx.stream};
  };
  using Clock = SteadyClock;
  // Encodes src of op, with error feedback, into a new payload buffer in `space`; returns the
  // buffer and sets bytes to the payload's size.
  auto encodeInto = [&](const Op& op, const Span& src, Space space, size_t& bytes) {
    auto t0 = Clock::now();
    const size_t bound = codec.maxEncodedBytes(op.count, req.dtype);
    const int buf = mem_.acquire(bound, space);
    float* residual = cc && cc->residual ? cc->residual + op.wireOffset : nullptr;
    bytes = codec.encodeFeedback(at(src), op.count, req.dtype, chunkAt(op), mem_.data(buf),
                                 residual, cc ? &cc->norms : nullptr);
    mem_.synchronize("encoding a payload on the GPU");
    SQZ_ENFORCE(bytes <= bound, "codec ", codec.name(), " wrote ", bytes, " bytes for ",
                op.count, " values, over its bound ", bound);
    if (cc) cc->encodeSeconds += secondsSince(t0);
    return buf;
  };
  // What connection p can send from: ptr itself, or (a device span to a connection that reads
  // only host memory) a pinned copy in a new buffer, returned in staged (-1: none).
  auto sendable = [&](int p, const char* ptr, size_t bytes, bool deviceMemory, int& pinned) {
    pinned = -1;
    if (!deviceMemory || !staged(p, bytes)) return ptr;
    pinned = mem_.acquire(bytes, Space::kPinned);
    mem_.copy(mem_.data(pinned), ptr, bytes);
    mem_.synchronize("staging a device buffer for sending");
    return static_cast<const char*>(mem_.data(pinned));
  };
  // Final payloads by wire offset: every final message carries one finalized piece.
  struct Final {
    int buf;
    size_t bytes, count;
  };
  std::unordered_map<size_t, Final> finals;
  auto decodeFinal = [&](const Op& op, const Final& f) {
    auto t0 = Clock::now();
    codec.decode(mem_.data(f.buf), f.bytes, op.count, req.dtype, chunkAt(op), at(op.dst));
    if (req.op == RedOp::kAvg) mem_.divide(at(op.dst), op.count, req.dtype, ctx.nranks);
    mem_.synchronize("decoding a payload on the GPU");
    if (cc) cc->decodeSeconds += secondsSince(t0);
  };
  // A send that only waits for a receive-reduce of the same span is encoded as soon as that
  // combine finishes, while the chunk is hot: the fused decode-reduce-encode.
  std::vector<uint32_t> fusedSend(raw ? 0 : ops.size(), kNoDep);
  std::vector<int> parked(raw ? 0 : ops.size(), -1);
  std::vector<size_t> parkedBytes(raw ? 0 : ops.size(), 0);
  if (!raw)
    for (uint32_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.kind != OpKind::kSend || op.deps[0] == kNoDep || op.deps[1] != kNoDep) continue;
      const Op& prod = ops[op.deps[0]];
      if (prod.kind == OpKind::kRecvReduce && prod.dst.buf == op.src.buf &&
          prod.dst.offset == op.src.offset && prod.count == op.count && op.src.buf != BufferRole::kUser)
        fusedSend[op.deps[0]] = i;
    }
  if (cc)
    for (const Op& op : ops)
      if (op.kind == OpKind::kSend || op.kind == OpKind::kSendFinal) cc->denseBytes += op.count * esz;

  std::vector<PeerQueues> peers(ctx.nranks);
  std::vector<uint32_t> locals;
  for (uint32_t i = 0; i < ops.size(); ++i) {
    switch (ops[i].kind) {
      case OpKind::kSend: case OpKind::kSendFinal: peers[ops[i].peer].sends.push_back(i); break;
      case OpKind::kRecvReduce: case OpKind::kRecvFinal: peers[ops[i].peer].recvs.push_back(i); break;
      default: locals.push_back(i);
    }
  }
  std::vector<Connection*> active;
  for (int p = 0; p < ctx.nranks; ++p)
    if (!peers[p].sends.empty() || !peers[p].recvs.empty()) {
      SQZ_ENFORCE(ctx.conns[p] != nullptr, "no connection to rank ", p);
      active.push_back(ctx.conns[p].get());
    }
  WaitSources ws;
  for (Connection* c : active) c->addWaitSources(ws);
  Doorbell* const doorbell = ws.doorbell;

  auto header = [&](const Op& op, int src) {
    WireHeader h = base;
    h.srcRank = src;
    h.step = op.step;
    h.offset = op.wireOffset;
    h.payloadBytes = op.count * esz;
    if (req.kind == CollKind::kSendRecv) {
      h.seq = op.step;
      h.count = op.count;
    }
    return h;
  };

  Deadline idleDeadline = deadlineAfterMs(ctx.timeoutMs);
  while (remaining > 0) {
    if (ctx.aborted.load(std::memory_order_relaxed))
      raise(ErrorCode::kRemote, "rank ", ctx.rank, ": ", describeCall(base),
            " was interrupted: the communicator was aborted");
    const uint32_t bell = doorbell ? doorbell->snapshot() : 0;
    bool moved = false;

    for (int p = 0; p < ctx.nranks; ++p) {
      PeerQueues& q = peers[p];
      while (q.nextSend < q.sends.size() && ready(ops[q.sends[q.nextSend]])) {
        const uint32_t i = q.sends[q.nextSend++];
        const Op& op = ops[i];
        WireHeader h = header(op, ctx.rank);
        if (raw) {
          int pinned;
          const char* from = sendable(p, at(op.src), h.payloadBytes, dev, pinned);
          q.sending.push_back(Pending{i, {}, pinned});
          ctx.conns[p]->isend(h, from, &q.sending.back().req);
        } else if (op.kind == OpKind::kSendFinal) {
          auto f = finals.find(op.wireOffset);
          SQZ_ENFORCE(f != finals.end() && f->second.count == op.count, "rank ", ctx.rank,
                      ": no final payload for elements ", op.wireOffset, "+", op.count,
                      " (the schedule forwards a piece it never finalized or received)");
          h.payloadBytes = f->second.bytes;
          int pinned;
          const char* from = sendable(p, mem_.data(f->second.buf), h.payloadBytes,
                                      mem_.space(f->second.buf) == Space::kDevice, pinned);
          q.sending.push_back(Pending{i, {}, pinned});
          ctx.conns[p]->isend(h, from, &q.sending.back().req);
        } else {
          int buf = parked[i];
          if (buf >= 0) {
            h.payloadBytes = parkedBytes[i];
          } else {
            size_t bytes;
            buf = encodeInto(op, op.src, spaceFor(p), bytes);
            h.payloadBytes = bytes;
          }
          q.sending.push_back(Pending{i, {}, buf});
          ctx.conns[p]->isend(h, mem_.data(buf), &q.sending.back().req);
        }
        if (cc) cc->wireBytes += h.payloadBytes;
        payloadBytesSent_ += h.payloadBytes;
        moved = true;
      }
      while (q.nextRecv < q.recvs.size() && q.receiving.size() < kRecvWindow) {
        const uint32_t i = q.recvs[q.nextRecv];
        const Op& op = ops[i];
        const size_t bytes = raw ? op.count * esz : codec.maxEncodedBytes(op.count, req.dtype);
        if (op.kind == OpKind::kRecvFinal && raw && !staged(p, bytes)) {
          if (!ready(op)) break;
          q.receiving.push_back(Pending{i, {}});
          ctx.conns[p]->irecv(header(op, p), at(op.dst), bytes, &q.receiving.back().req);
        } else {
          // Into a payload buffer: to combine, to decode, or (raw, device dst, host-only
          // connection) to copy to the GPU on arrival.
          if (op.kind == OpKind::kRecvFinal && !ready(op)) break;
          int s = mem_.acquire(bytes, spaceFor(p));
          q.receiving.push_back(Pending{i, {}, s});
          ctx.conns[p]->irecv(header(op, p), mem_.data(s), bytes, &q.receiving.back().req);
        }
        ++q.nextRecv;
        moved = true;
      }
    }

    for (Connection* c : active) moved |= c->progress();

    for (int p = 0; p < ctx.nranks; ++p) {
      PeerQueues& q = peers[p];
      while (!q.sending.empty() && q.sending.front().req.done) {
        if (q.sending.front().scratch >= 0) mem_.release(q.sending.front().scratch);
        finish(q.sending.front().op);
        q.sending.pop_front();
        moved = true;
      }
      while (!q.receiving.empty() && q.receiving.front().req.done) {
        Pending& pend = q.receiving.front();
        const Op& op = ops[pend.op];
        const size_t bytes = raw ? op.count * esz : pend.req.bytes;
        if (raw && pend.req.bytes != bytes)
          raise(ErrorCode::kInvalidUsage, "rank ", p, " sent ", pend.req.bytes, " bytes where rank ",
                ctx.rank, " expected ", bytes, " in ", describeCall(base));
        if (op.kind == OpKind::kRecvReduce) {
          if (!ready(op)) break;
          auto t0 = Clock::now();
          codec.combine(at(op.dst), at(op.src), mem_.data(pend.scratch), bytes, op.count,
                        req.dtype, req.op, chunkAt(op));
          mem_.synchronize("combining a payload on the GPU");
          if (cc) cc->combineSeconds += secondsSince(t0);
          mem_.release(pend.scratch);
          if (!raw && fusedSend[pend.op] != kNoDep) {
            const uint32_t si = fusedSend[pend.op];
            parked[si] = encodeInto(ops[si], ops[si].src, spaceFor(ops[si].peer), parkedBytes[si]);
          }
        } else if (raw) {
          if (pend.scratch >= 0) {  // staged: a device dst behind a host-memory connection
            mem_.copy(at(op.dst), mem_.data(pend.scratch), bytes);
            mem_.synchronize("copying a received piece to the GPU");
            mem_.release(pend.scratch);
          }
        } else {  // a final payload: keep it for forwarding, decode it once
          Final f{pend.scratch, bytes, op.count};
          decodeFinal(op, f);
          finals[op.wireOffset] = f;
        }
        finish(pend.op);
        q.receiving.pop_front();
        moved = true;
      }
    }

    for (auto it = locals.begin(); it != locals.end();) {
      const Op& op = ops[*it];
      if (!ready(op)) {
        ++it;
        continue;
      }
      if (op.kind == OpKind::kCopy) {
        mem_.copy(at(op.dst), at(op.src), op.count * esz);
        mem_.synchronize("a local copy on the GPU");
      } else if (op.kind == OpKind::kJoin) {
        // nothing to do: its dependencies are done
      } else if (op.kind == OpKind::kFinalize && !raw) {
        // Encode once; this rank keeps the payload's values, as every other rank will.
        Final f{-1, 0, op.count};
        f.buf = encodeInto(op, op.dst, spaceFor(-1), f.bytes);
        decodeFinal(op, f);
        finals[op.wireOffset] = f;
      } else if (op.kind == OpKind::kFinalize) {
        if (req.op == RedOp::kAvg) {
          mem_.divide(at(op.dst), op.count, req.dtype, ctx.nranks);
          mem_.synchronize("avg's division on the GPU");
        }
      } else {
        raise(ErrorCode::kInternal, "op ", opName(op.kind), " is not a local op");
      }
      finish(*it);
      it = locals.erase(it);
      moved = true;
    }

    if (moved) {
      idleDeadline = deadlineAfterMs(ctx.timeoutMs);
      continue;
    }
    if (remainingMs(idleDeadline) == 0) {
      std::string waiting;
      for (int p = 0; p < ctx.nranks; ++p) {
        const PeerQueues& q = peers[p];
        size_t outSend = q.sends.size() - q.nextSend + q.sending.size();
        size_t outRecv = q.recvs.size() - q.nextRecv + q.receiving.size();
        if (outSend || outRecv)
          waiting += strCat(waiting.empty() ? "" : ", ", "rank ", p, " (", outSend, " sends, ",
                            outRecv, " receives left)");
      }
      raise(ErrorCode::kTimeout, "rank ", ctx.rank, ": ", describeCall(base), " made no progress"
            " for ", ctx.timeoutMs, " ms (SQZ_TIMEOUT_MS) waiting on ", waiting,
            ". A peer is stuck, dead, or making a different call.");
    }
    ws.fds.clear();
    for (Connection* c : active) c->addWaitSources(ws);
    SQZ_ENFORCE(!ws.fds.empty() || ws.doorbell, "rank ", ctx.rank, ": ", describeCall(base),
                " stalled with nothing to wait on (", remaining, " ops left)");
    // Sliced so an abort from another thread is noticed promptly.
    waitForActivity(ws, bell, std::min(remainingMs(idleDeadline), 200));
  }
}

}  // namespace squeeze
