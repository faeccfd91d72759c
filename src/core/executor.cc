// Executor (see executor.h). One call is a CallRun: its state, and one named step for each thing
// the loop does (post sends, post receives, finish transfers, run local ops, retire device work).
#include "core/executor.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <numeric>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "base/clock.h"
#include "base/error.h"
#include "base/logging.h"
#include "compress/codec.h"
#include "transports/shm/doorbell.h"

namespace squeeze {
namespace {

using device::Space;
using Mark = device::Context::Mark;

const char* opName(OpKind k) {
  switch (k) {
    case OpKind::kCopy:
      return "copy";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecvReduce:
      return "recv-reduce";
    case OpKind::kFinalize:
      return "finalize";
    case OpKind::kSendFinal:
      return "send-final";
    case OpKind::kRecvFinal:
      return "recv-final";
    case OpKind::kJoin:
      return "join";
  }
  return "?";
}

// A transfer handed to a connection; `buf` (a pooled buffer, or -1) is released when it is done.
struct Transfer {
  uint32_t op;
  TransferRequest req;
  int buf = -1;
};

// A payload to send once the context has reached `mark` (it made or copied the payload).
struct Outgoing {
  uint32_t op;
  WireHeader header;
  const char* from;
  int buf;  // released when the send is done (-1: none)
  Mark mark;
};

// An op whose device work finishes at `mark`, and the buffer that work reads (-1: none),
// released then: a connection may write a released buffer from its own stream or the host.
struct Landing {
  uint32_t op;
  Mark mark;
  int buf = -1;
};

struct PeerQueues {
  std::vector<uint32_t> sends, recvs;  // op indices in schedule order
  size_t nextSend = 0, nextRecv = 0;
  std::deque<Outgoing> preparing;           // in send order
  std::deque<Transfer> sending, receiving;  // deque: stable TransferRequest addresses
};

// A final payload (a finalized or received piece), kept in the context's memory so it can be
// forwarded unchanged and decoded once.
struct Final {
  int buf;
  size_t bytes, count;
};

class CallRun {
 public:
  CallRun(const CollRequest& req, const Schedule& sched, const WireHeader& base, CallEnv& env,
          uint64_t& payloadBytesSent)
      : req_(req),
        sched_(sched),
        base_(base),
        env_(env),
        ctx_(env.ctx),
        codec_(*req.codec),
        raw_(codec_.rawWire()),
        cc_(req.codecCall),
        esz_(dataTypeSize(req.dtype)),
        dev_(ctx_.onDevice()),
        ops_(sched.ops),
        payloadBytesSent_(payloadBytesSent) {}

  void execute() {
    setUp();
    Deadline idleDeadline = deadlineAfterMs(env_.timeoutMs);
    auto pause = std::chrono::microseconds(2);
    const auto spin = std::chrono::microseconds(env_.spinUs);
    // Set at the first idle pass since progress (the epoch: not set; a std::optional here drew
    // a false -Wmaybe-uninitialized from g++ 12).
    Clock::time_point spinUntil{};
    while (remaining_ > 0) {
      if (env_.aborted.load(std::memory_order_relaxed))
        raise(ErrorCode::kRemote, "rank ", env_.rank, ": ", describeCall(base_),
              " was interrupted: the communicator was aborted");
      const uint32_t bell = doorbell_ ? doorbell_->snapshot() : 0;
      bool moved = false;
      for (int p = 0; p < env_.nranks; ++p) moved |= postSends(p) | postRecvs(p);
      for (Connection* c : active_) moved |= c->progress();
      for (int p = 0; p < env_.nranks; ++p) moved |= finishSends(p) | finishRecvs(p);
      moved |= runLocals();
      moved |= retireDeviceWork();
      if (moved) {
        idleDeadline = deadlineAfterMs(env_.timeoutMs);
        pause = std::chrono::microseconds(2);
        spinUntil = {};
        continue;
      }
      if (remainingMs(idleDeadline) == 0) raiseStalled();
      if (deviceWorkPending()) {  // poll the context as a socket, briefly
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(200));
        continue;
      }
      // A sleep costs a futex or poll wake-up per message, tens of us where ranks share cores;
      // polling a little longer, yielding the core to whoever needs it, spares most of them.
      if (spin.count() > 0) {
        const auto now = Clock::now();
        if (spinUntil == Clock::time_point{}) spinUntil = now + spin;
        if (now < spinUntil) {
          std::this_thread::yield();
          continue;
        }
      }
      sleepOnConnections(bell, idleDeadline);
    }
  }

 private:
  using Clock = SteadyClock;

  // ---- set-up ----------------------------------------------------------------------------------

  void setUp() {
    ctx_.beginCall();
    bufs_[0] = static_cast<char*>(const_cast<void*>(req_.sendbuf));
    bufs_[1] = static_cast<char*>(req_.recvbuf);
    bufs_[2] = ctx_.scratch(device::Context::Slot::kSchedule, sched_.scratchElems * esz_);
    // Device calls: the peers whose connection reads only host memory (asked once per call).
    hostOnly_.assign(env_.nranks, 0);
    for (int q = 0; q < env_.nranks; ++q)
      if (dev_ && env_.conns[q] && !env_.conns[q]->readsDeviceMemory()) hostOnly_[q] = 1;
    done_.assign(ops_.size(), 0);
    remaining_ = ops_.size();
    planFusedSends();
    if (cc_)
      for (const Op& op : ops_)
        if (op.kind == OpKind::kSend || op.kind == OpKind::kSendFinal)
          cc_->denseBytes += op.count * esz_;
    peers_.resize(env_.nranks);
    for (uint32_t i = 0; i < ops_.size(); ++i) {
      switch (ops_[i].kind) {
        case OpKind::kSend:
        case OpKind::kSendFinal:
          peers_[ops_[i].peer].sends.push_back(i);
          break;
        case OpKind::kRecvReduce:
        case OpKind::kRecvFinal:
          peers_[ops_[i].peer].recvs.push_back(i);
          break;
        default:
          locals_.push_back(i);
      }
    }
    wholeSteps_ = dev_ && !raw_ && stepOrdered();
    recvWindow_.assign(env_.nranks, Executor::kRecvWindow);
    if (wholeSteps_)  // at least the most receives of one step from the peer
      for (int p = 0; p < env_.nranks; ++p) {
        const std::vector<uint32_t>& r = peers_[p].recvs;
        for (size_t a = 0, b = 0; a < r.size(); a = b) {
          while (b < r.size() && ops_[r[b]].step == ops_[r[a]].step) ++b;
          recvWindow_[p] = std::max(recvWindow_[p], b - a);
        }
      }
    for (int p = 0; p < env_.nranks; ++p)
      if (!peers_[p].sends.empty() || !peers_[p].recvs.empty()) {
        SQZ_ENFORCE(env_.conns[p] != nullptr, "no connection to rank ", p);
        active_.push_back(env_.conns[p].get());
      }
    WaitSources ws;
    for (Connection* c : active_) c->addWaitSources(ws);
    doorbell_ = ws.doorbell;
  }

  // Whether waiting for a step's receives from a peer before handing any on (wholeSteps_) can
  // never wait forever: every message op depends, through local ops, only on message ops of
  // earlier steps, and each peer's sends and receives come in step order. Then by induction
  // every rank's step s completes once the earlier steps have (ring, rhd). A double binary tree
  // interleaves its two trees' steps on one peer: one piece's wait would hold up the other tree.
  bool stepOrdered() const {
    auto message = [&](const Op& op) {
      return op.kind == OpKind::kSend || op.kind == OpKind::kSendFinal ||
             op.kind == OpKind::kRecvReduce || op.kind == OpKind::kRecvFinal;
    };
    // Per op: the latest step of the message ops it depends on, through local ops (-1: none).
    std::vector<int64_t> latest(ops_.size(), -1);
    std::vector<int64_t> lastSend(env_.nranks, -1), lastRecv(env_.nranks, -1);
    for (size_t i = 0; i < ops_.size(); ++i) {
      const Op& op = ops_[i];
      int64_t before = -1;
      for (uint32_t d : op.deps)
        if (d != kNoDep)
          before = std::max(before, message(ops_[d]) ? int64_t(ops_[d].step) : latest[d]);
      latest[i] = before;
      if (!message(op)) continue;
      if (before >= int64_t(op.step)) return false;
      const bool send = op.kind == OpKind::kSend || op.kind == OpKind::kSendFinal;
      int64_t& last = send ? lastSend[op.peer] : lastRecv[op.peer];
      if (int64_t(op.step) < last) return false;
      last = op.step;
    }
    return true;
  }

  // A send that only waits for a receive-reduce of the same span is encoded as soon as that
  // combine is enqueued, while the chunk is hot: the fused decode-reduce-encode.
  void planFusedSends() {
    if (raw_) return;
    fusedSend_.assign(ops_.size(), kNoDep);
    parked_.assign(ops_.size(), std::nullopt);
    for (uint32_t i = 0; i < ops_.size(); ++i) {
      const Op& op = ops_[i];
      if (op.kind != OpKind::kSend || op.deps[0] == kNoDep || op.deps[1] != kNoDep) continue;
      const Op& prod = ops_[op.deps[0]];
      if (prod.kind == OpKind::kRecvReduce && prod.dst.buf == op.src.buf &&
          prod.dst.offset == op.src.offset && prod.count == op.count &&
          op.src.buf != BufferRole::kUser)
        fusedSend_[op.deps[0]] = i;
    }
  }

  // ---- the steps -------------------------------------------------------------------------------

  // Takes peer p's next sends whose dependencies are done, has their payloads made (encoded,
  // staged), and posts those the context has finished, in order.
  bool postSends(int p) {
    PeerQueues& q = peers_[p];
    bool moved = false;
    std::vector<uint32_t> ready;
    while (q.nextSend < q.sends.size() && this->ready(ops_[q.sends[q.nextSend]]))
      ready.push_back(q.sends[q.nextSend++]);
    if (!ready.empty()) {
      preEncode(ready);
      const size_t first = q.preparing.size();
      const Mark m = batched(ready, [&](uint32_t i) { q.preparing.push_back(prepareSend(p, i)); });
      for (size_t j = first; j < q.preparing.size(); ++j) q.preparing[j].mark = m;
      moved = true;
    }
    while (!q.preparing.empty() && ctx_.reached(q.preparing.front().mark)) {
      Outgoing& o = q.preparing.front();
      q.sending.push_back(Transfer{o.op, {}, o.buf});
      env_.conns[p]->isend(o.header, o.from, &q.sending.back().req);
      if (cc_) cc_->wireBytes += o.header.payloadBytes;
      payloadBytesSent_ += o.header.payloadBytes;
      q.preparing.pop_front();
      moved = true;
    }
    return moved;
  }

  // Posts peer p's next receives, up to kRecvWindow in flight.
  bool postRecvs(int p) {
    PeerQueues& q = peers_[p];
    bool moved = false;
    while (q.nextRecv < q.recvs.size() && q.receiving.size() < recvWindow_[p]) {
      const uint32_t i = q.recvs[q.nextRecv];
      const Op& op = ops_[i];
      const size_t bytes = raw_ ? op.count * esz_ : codec_.maxEncodedBytes(op.count, req_.dtype);
      // A final piece lands where the call's result goes: its dependencies first (whole steps
      // land it from a payload buffer once they are done: finishRecvs).
      if (op.kind == OpKind::kRecvFinal && !ready(op) && !wholeSteps_) break;
      if (op.kind == OpKind::kRecvFinal && raw_ && !hostOnly_[p]) {
        q.receiving.push_back(Transfer{i, {}});
        env_.conns[p]->irecv(header(op, p), at(op.dst), bytes, &q.receiving.back().req);
      } else {  // into a payload buffer: to combine, to decode, or to copy to the GPU
        const int s = ctx_.acquire(bytes, wireSpace(p));
        q.receiving.push_back(Transfer{i, {}, s});
        env_.conns[p]->irecv(header(op, p), ctx_.data(s), bytes, &q.receiving.back().req);
      }
      ++q.nextRecv;
      moved = true;
    }
    return moved;
  }

  bool finishSends(int p) {
    PeerQueues& q = peers_[p];
    bool moved = false;
    while (!q.sending.empty() && q.sending.front().req.done) {
      if (q.sending.front().buf >= 0) ctx_.release(q.sending.front().buf);
      finish(q.sending.front().op);
      q.sending.pop_front();
      moved = true;
    }
    return moved;
  }

  // Hands each arrived payload, in order, to its op: combine, decode, or copy. On a device
  // call with a codec, a step's payloads from p go together, once all have arrived (one batch
  // of kernels for the step, not one per piece).
  bool finishRecvs(int p) {
    PeerQueues& q = peers_[p];
    bool moved = false;
    while (!q.receiving.empty() && q.receiving.front().req.done) {
      size_t take = 1;
      if (wholeSteps_) {
        const uint32_t step = ops_[q.receiving.front().op].step;
        while (take < q.receiving.size() && ops_[q.receiving[take].op].step == step) ++take;
        // The step's next receive is not posted yet but will be (the window has room for it):
        // wait for it.
        if (take == q.receiving.size() && q.nextRecv < q.recvs.size() &&
            ops_[q.recvs[q.nextRecv]].step == step)
          break;
        // Every payload is in, and what it lands on is free (a final piece's destination too:
        // postRecvs posts it early, into a payload buffer).
        bool all = true;
        for (size_t j = 0; j < take && all; ++j)
          all = q.receiving[j].req.done && ready(ops_[q.receiving[j].op]);
        if (!all) break;
      } else if (ops_[q.receiving.front().op].kind == OpKind::kRecvReduce &&
                 !ready(ops_[q.receiving.front().op])) {
        break;
      }
      std::vector<uint32_t> arrived(take);
      std::iota(arrived.begin(), arrived.end(), 0);
      batched(arrived, [&](uint32_t j) { landArrived(p, q.receiving[j]); });
      q.receiving.erase(q.receiving.begin(), q.receiving.begin() + take);
      moved = true;
    }
    return moved;
  }

  // An arrived payload's op: combine, decode, or copy.
  void landArrived(int p, Transfer& t) {
    const Op& op = ops_[t.op];
    const size_t bytes = raw_ ? op.count * esz_ : t.req.bytes;
    if (raw_ && t.req.bytes != bytes)
      raise(ErrorCode::kInvalidUsage, "rank ", p, " sent ", t.req.bytes, " bytes where rank ",
            env_.rank, " expected ", bytes, " in ", describeCall(base_));
    if (op.kind == OpKind::kRecvReduce) {
      combineArrived(t, bytes);
    } else if (raw_) {
      if (t.buf >= 0) {  // a device dst behind a host-memory connection
        ctx_.copy(at(op.dst), ctx_.data(t.buf), bytes);
        ctx_.release(t.buf);
      }
      landAfterDeviceWork(t.op);
    } else {  // a final payload: keep it for forwarding, decode it once
      Final f{toWorkSpace(t.buf, bytes), bytes, op.count};
      decodeFinal(op, f);
      finals_[op.wireOffset] = f;
      landAfterDeviceWork(t.op);
    }
  }

  // Runs the ready local ops, as one batch.
  bool runLocals() {
    std::vector<uint32_t> ready;
    for (auto it = locals_.begin(); it != locals_.end();) {
      if (this->ready(ops_[*it])) {
        ready.push_back(*it);
        it = locals_.erase(it);
      } else {
        ++it;
      }
    }
    if (ready.empty()) return false;
    preEncode(ready);
    batched(ready, [&](uint32_t i) { runLocal(i); });
    return true;
  }

  void runLocal(uint32_t i) {
    const Op& op = ops_[i];
    if (op.kind == OpKind::kCopy) {
      ctx_.copy(at(op.dst), at(op.src), op.count * esz_);
    } else if (op.kind == OpKind::kFinalize && !raw_) {
      // Encode once; this rank keeps the payload's values, as every other rank will.
      Final f{-1, 0, op.count};
      if (parked_[i]) {  // preEncode's
        f.buf = parked_[i]->first;
        f.bytes = parked_[i]->second;
        parked_[i].reset();
      } else {
        f.buf = encodeInto(op, op.dst, f.bytes);
      }
      decodeFinal(op, f);
      finals_[op.wireOffset] = f;
    } else if (op.kind == OpKind::kFinalize) {
      if (req_.op == RedOp::kAvg) ctx_.divide(at(op.dst), op.count, req_.dtype, env_.nranks);
    } else if (op.kind != OpKind::kJoin) {  // a join only waits for its dependencies
      raise(ErrorCode::kInternal, "op ", opName(op.kind), " is not a local op");
    }
    landAfterDeviceWork(i);
  }

  // Finishes the ops whose device work the context has reached.
  bool retireDeviceWork() {
    bool moved = false;
    while (!landing_.empty() && ctx_.reached(landing_.front().mark)) {
      if (landing_.front().buf >= 0) ctx_.release(landing_.front().buf);
      finish(landing_.front().op);
      landing_.pop_front();
      moved = true;
    }
    return moved;
  }

  // ---- payloads --------------------------------------------------------------------------------

  // Peer p's next send: its payload, made now (postSends sets the mark after which it may go).
  Outgoing prepareSend(int p, uint32_t i) {
    const Op& op = ops_[i];
    WireHeader h = header(op, env_.rank);
    int buf = -1;
    const char* from;
    if (raw_) {
      from = forWire(p, at(op.src), h.payloadBytes, buf);
    } else if (op.kind == OpKind::kSendFinal) {
      auto f = finals_.find(op.wireOffset);
      SQZ_ENFORCE(f != finals_.end() && f->second.count == op.count, "rank ", env_.rank,
                  ": no final payload for elements ", op.wireOffset, "+", op.count,
                  " (the schedule forwards a piece it never finalized or received)");
      h.payloadBytes = f->second.bytes;
      from = forWire(p, ctx_.data(f->second.buf), h.payloadBytes, buf);
    } else {
      if (parked_[i]) {  // encoded when its combine ran
        buf = parked_[i]->first;
        h.payloadBytes = parked_[i]->second;
      } else {
        size_t bytes = 0;
        buf = encodeInto(op, op.src, bytes);
        h.payloadBytes = bytes;
      }
      int staged = -1;
      from = forWire(p, ctx_.data(buf), h.payloadBytes, staged);
      if (staged >= 0) {
        ctx_.release(buf);  // the copy came from it, in the stream's order
        buf = staged;
      }
    }
    return Outgoing{i, h, from, buf, 0};  // its mark: the batch's (postSends)
  }

  // What connection p can send `bytes` at ptr (in the context's memory) from: ptr itself, or,
  // on a device call to a connection that reads only host memory, a host copy in a new buffer
  // (returned in staged).
  const char* forWire(int p, const char* ptr, size_t bytes, int& staged) {
    staged = -1;
    if (!dev_ || !hostOnly_[p] || bytes == 0) return ptr;
    staged = ctx_.acquire(bytes, Space::kHost);
    ctx_.copy(ctx_.data(staged), ptr, bytes);
    return ctx_.data(staged);
  }

  // A received payload in the context's own memory: buf itself, or (a host copy from a
  // host-memory connection on a device call) a device copy that replaces it.
  int toWorkSpace(int buf, size_t bytes) {
    if (ctx_.space(buf) == ctx_.workSpace()) return buf;
    const int moved = ctx_.acquire(bytes, ctx_.workSpace());
    ctx_.copy(ctx_.data(moved), ctx_.data(buf), bytes);
    ctx_.release(buf);  // the copy has taken a pageable source when it returns
    return moved;
  }

  // Encodes src of op, with error feedback, into a new payload buffer in the context's memory;
  // returns the buffer and sets bytes to the payload's size.
  int encodeInto(const Op& op, const Span& src, size_t& bytes) {
    auto t0 = Clock::now();
    const int buf = ctx_.acquire(codec_.maxEncodedBytes(op.count, req_.dtype), ctx_.workSpace());
    EncodeNorms norms;
    bytes = encodePiece(op, src, chunkAt(op), buf, norms);
    addNorms(norms);
    if (cc_) cc_->encodeSeconds += secondsSince(t0);
    return buf;
  }

  // The encode of one piece into payload buffer buf (acquired), with info's context (the
  // call's, or an encode pool worker's). Host calls take the piece's norms in `norms`, which
  // addNorms adds to the call's (a piece encoded on another thread has norms of its own); a
  // device call's arrive in the call's own when the context next waits (device::Feedback).
  size_t encodePiece(const Op& op, const Span& src, const ChunkInfo& info, int buf,
                     EncodeNorms& norms) {
    const size_t bound = codec_.maxEncodedBytes(op.count, req_.dtype);
    float* residual = cc_ && cc_->residual ? cc_->residual + op.wireOffset : nullptr;
    EncodeNorms* into = !cc_ ? nullptr : dev_ ? &cc_->norms : &norms;
    const size_t bytes = codec_.encodeFeedback(at(src), op.count, req_.dtype, info,
                                               ctx_.data(buf), residual, into);
    SQZ_ENFORCE(bytes <= bound, "codec ", codec_.name(), " wrote ", bytes, " bytes for ", op.count,
                " values, over its bound ", bound);
    return bytes;
  }
  void addNorms(const EncodeNorms& n) {
    if (!cc_ || dev_) return;
    cc_->norms.inputSq += n.inputSq;
    cc_->norms.sentSq += n.sentSq;
  }

  // With an encode pool (executor.h): encodes the items that need an encode, a send the fused
  // combine has not encoded (from its source) or a finalize (in place), on the pool's threads,
  // and parks the payloads for prepareSend and runLocal. Fewer than two: nothing to share.
  void preEncode(const std::vector<uint32_t>& items) {
    if (!env_.encodePool || raw_ || dev_) return;
    std::vector<uint32_t> todo;
    for (uint32_t i : items)
      if ((ops_[i].kind == OpKind::kSend || ops_[i].kind == OpKind::kFinalize) && !parked_[i])
        todo.push_back(i);
    if (todo.size() < 2) return;
    auto t0 = Clock::now();
    std::vector<int> bufs(todo.size(), -1);
    std::vector<size_t> bytes(todo.size(), 0);
    std::vector<EncodeNorms> norms(todo.size());
    for (size_t k = 0; k < todo.size(); ++k)
      bufs[k] = ctx_.acquire(codec_.maxEncodedBytes(ops_[todo[k]].count, req_.dtype),
                             ctx_.workSpace());
    try {
      env_.encodePool->run(todo.size(), [&](size_t k, device::Context& worker) {
        const Op& op = ops_[todo[k]];
        ChunkInfo info = chunkAt(op);
        info.ctx = &worker;  // the worker's scratch
        bytes[k] = encodePiece(op, op.kind == OpKind::kFinalize ? op.dst : op.src, info, bufs[k],
                               norms[k]);
      });
    } catch (...) {
      for (int b : bufs) ctx_.release(b);
      throw;
    }
    for (size_t k = 0; k < todo.size(); ++k) {
      addNorms(norms[k]);
      parked_[todo[k]] = std::make_pair(bufs[k], bytes[k]);
    }
    if (cc_) cc_->encodeSeconds += secondsSince(t0);
  }

  void decodeFinal(const Op& op, const Final& f) {
    auto t0 = Clock::now();
    codec_.decode(ctx_.data(f.buf), f.bytes, op.count, req_.dtype, chunkAt(op), at(op.dst));
    if (req_.op == RedOp::kAvg) ctx_.divide(at(op.dst), op.count, req_.dtype, env_.nranks);
    if (cc_) cc_->decodeSeconds += secondsSince(t0);
  }

  // out = local (op) payload, and the fused send's payload encoded at once.
  void combineArrived(Transfer& t, size_t bytes) {
    const Op& op = ops_[t.op];
    auto t0 = Clock::now();
    const int payload = toWorkSpace(t.buf, bytes);
    codec_.combine(at(op.dst), at(op.src), ctx_.data(payload), bytes, op.count, req_.dtype, req_.op,
                   chunkAt(op));
    if (cc_) cc_->combineSeconds += secondsSince(t0);
    if (!raw_ && fusedSend_[t.op] != kNoDep) {
      const uint32_t si = fusedSend_[t.op];
      size_t sentBytes = 0;
      const int buf = encodeInto(ops_[si], ops_[si].src, sentBytes);
      parked_[si] = std::make_pair(buf, sentBytes);
    }
    landAfterDeviceWork(t.op, payload);
  }

  // ---- bookkeeping -----------------------------------------------------------------------------

  bool ready(const Op& op) const {
    for (uint32_t d : op.deps)
      if (d != kNoDep && !done_[d]) return false;
    return true;
  }
  void finish(uint32_t i) {
    done_[i] = 1;
    --remaining_;
  }
  // Op i is done once the context has run what was enqueued for it (at once on the host); buf,
  // which that work reads, is released then.
  void landAfterDeviceWork(uint32_t i, int buf = -1) {
    if (!dev_) {
      if (buf >= 0) ctx_.release(buf);
      finish(i);
      return;
    }
    if (batching_)
      batchLanding_.push_back(Landing{i, 0, buf});
    else
      landing_.push_back(Landing{i, ctx_.mark(), buf});
  }

  // Runs each(item) for the items, the pieces of one step, as one batch of the context's work
  // (Context::beginBatch): on a GPU each kernel once for all of them, not once a piece. Returns
  // the mark after it, at which the ops the pieces landed are done.
  template <class Each>
  Mark batched(const std::vector<uint32_t>& items, Each&& each) {
    ctx_.beginBatch();
    batching_ = true;
    try {
      for (uint32_t item : items) {
        ctx_.nextPiece();
        each(item);
      }
    } catch (...) {
      batching_ = false;
      batchLanding_.clear();
      try {
        ctx_.endBatch();        // what the pieces enqueued, so buffers are released after it
      } catch (const Error&) {  // the first error is the one to report
      }
      throw;
    }
    batching_ = false;
    ctx_.endBatch();
    const Mark m = ctx_.mark();
    for (Landing& l : batchLanding_) {
      l.mark = m;
      landing_.push_back(l);
    }
    batchLanding_.clear();
    return m;
  }
  bool deviceWorkPending() const {
    if (!landing_.empty()) return true;
    for (const PeerQueues& q : peers_)
      if (!q.preparing.empty()) return true;
    return false;
  }

  char* at(const Span& span) const {
    char* base = span.buf == BufferRole::kUser ? sched_.userBuffers[span.user]
                                               : bufs_[static_cast<int>(span.buf)];
    return base + span.offset * esz_;
  }
  ChunkInfo chunkAt(const Op& op) const {
    // op.peer is the sender on receive ops: a malformed payload's error names it.
    ChunkInfo info{op.wireOffset, cc_ ? cc_->call : 0, env_.rank, op.peer};
    info.ctx = &ctx_;
    return info;
  }
  // Where payloads to and from peer p live: the context's memory, or host memory when p's
  // connection reads only that.
  Space wireSpace(int p) const { return dev_ && !hostOnly_[p] ? Space::kDevice : Space::kHost; }
  WireHeader header(const Op& op, int src) const {
    WireHeader h = base_;
    h.srcRank = src;
    h.step = op.step;
    h.offset = op.wireOffset;
    h.payloadBytes = op.count * esz_;
    if (req_.kind == CollKind::kSendRecv) {
      h.seq = op.step;
      h.count = op.count;
    }
    return h;
  }

  void sleepOnConnections(uint32_t bell, const Deadline& idleDeadline) {
    WaitSources ws;
    for (Connection* c : active_) c->addWaitSources(ws);
    SQZ_ENFORCE(!ws.fds.empty() || ws.doorbell, "rank ", env_.rank, ": ", describeCall(base_),
                " stalled with nothing to wait on (", remaining_, " ops left)");
    // Sliced so an abort from another thread is noticed promptly.
    waitForActivity(ws, bell, std::min(remainingMs(idleDeadline), 200));
  }

  [[noreturn]] void raiseStalled() const {
    std::string waiting;
    for (int p = 0; p < env_.nranks; ++p) {
      const PeerQueues& q = peers_[p];
      const size_t outSend = q.sends.size() - q.nextSend + q.preparing.size() + q.sending.size();
      const size_t outRecv = q.recvs.size() - q.nextRecv + q.receiving.size();
      if (outSend || outRecv)
        waiting += strCat(waiting.empty() ? "" : ", ", "rank ", p, " (", outSend, " sends, ",
                          outRecv, " receives left)");
    }
    if (deviceWorkPending())
      waiting +=
          strCat(waiting.empty() ? "" : ", ", "the GPU (", landing_.size(), " steps not finished)");
    raise(ErrorCode::kTimeout, "rank ", env_.rank, ": ", describeCall(base_),
          " made no progress"
          " for ",
          env_.timeoutMs, " ms (SQZ_TIMEOUT_MS) waiting on ", waiting,
          ". A peer is stuck, dead, or making a different call.");
  }

  const CollRequest& req_;
  const Schedule& sched_;
  const WireHeader& base_;
  CallEnv& env_;
  device::Context& ctx_;
  Codec& codec_;
  // raw: payloads are the values, sent from and received into the buffers. Otherwise every
  // send is encoded, every receive lands in a payload buffer, and final payloads are kept per
  // piece (finals_) so they can be forwarded unchanged and decoded once.
  const bool raw_;
  CodecCall* const cc_;
  const size_t esz_;
  const bool dev_;
  const std::vector<Op>& ops_;
  uint64_t& payloadBytesSent_;

  char* bufs_[3] = {};  // by BufferRole: input, output, scratch
  std::vector<uint8_t> hostOnly_;
  std::vector<uint8_t> done_;
  size_t remaining_ = 0;
  std::vector<uint32_t> fusedSend_;
  std::vector<std::optional<std::pair<int, size_t>>> parked_;  // fused sends' payloads
  std::vector<PeerQueues> peers_;
  std::vector<uint32_t> locals_;
  std::vector<Connection*> active_;
  Doorbell* doorbell_ = nullptr;
  std::unordered_map<size_t, Final> finals_;  // by wire offset
  std::deque<Landing> landing_;
  // A device call with a codec: a step's receives from a peer are posted and handed on
  // together (finishRecvs); recvWindow_ is each peer's receive window.
  bool wholeSteps_ = false;
  std::vector<size_t> recvWindow_;
  bool batching_ = false;  // in batched(): landings wait for its mark
  std::vector<Landing> batchLanding_;
};

}  // namespace

void Executor::run(const CollRequest& req, const Schedule& sched, const WireHeader& base,
                   CallEnv& env) {
  CallRun(req, sched, base, env, payloadBytesSent_).execute();
}

}  // namespace squeeze
