// The direct all-reduce (see direct_allreduce.h).
#include "core/direct_allreduce.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "base/schedule.h"
#include "base/strings.h"
#include "device/reduce.h"
#include "transports/shm/window.h"

namespace squeeze {
namespace {

const char* counterStep(WindowCounter c) {
  switch (c) {
    case WindowCounter::kPublished:
      return "copy its input into its window";
    case WindowCounter::kReduced:
      return "reduce its part";
    case WindowCounter::kConsumed:
      return "finish reading the previous round on this buffer set";
  }
  return "?";
}

}  // namespace

DirectAllReduce::DirectAllReduce(std::shared_ptr<ShmWindow> window) : window_(std::move(window)) {}

void DirectAllReduce::shutdown() { window_->shutdown(); }

void DirectAllReduce::run(const CollRequest& req, const WireHeader& base, int timeoutMs, int spinUs,
                          const std::atomic<bool>& aborted) {
  ShmWindow& w = *window_;
  const int P = w.nranks(), me = w.rank();
  const size_t esz = dataTypeSize(req.dtype);
  const size_t roundElems = w.capacity() / esz;
  const device::ReduceFn reduce = device::cpuReduceFn(req.dtype, req.op);
  const auto* in = static_cast<const char*>(req.sendbuf);
  auto* out = static_cast<char*>(req.recvbuf);
  const WindowWait how{timeoutMs, spinUs, &aborted};
  uint32_t step = 0;  // the round within this call, carried in the set's header

  auto waitFor = [&](int p, WindowCounter c, uint64_t value) {
    const WaitResult r = w.waitFor(p, c, value, how);
    if (r == WaitResult::kReady) return;
    const std::string what = strCat("rank ", me, ": ", describeCall(base), " (direct, round ", step,
                                    ") waited for rank ", p, " to ", counterStep(c));
    switch (r) {
      case WaitResult::kAborted:
        raise(ErrorCode::kRemote, what, " and was interrupted: the communicator was aborted");
      case WaitResult::kPeerClosed:
        raise(ErrorCode::kRemote, what, ", but rank ", p,
              " shut its shared-memory window down (it failed or left the communicator)");
      case WaitResult::kPeerGone:
        raise(ErrorCode::kRemote, what, ", but rank ", p,
              " exited or was killed (its process closed the liveness socket)");
      default:
        raise(ErrorCode::kTimeout, what, "; nothing moved for ", timeoutMs,
              " ms (SQZ_TIMEOUT_MS). A peer is stuck, dead, or making a different call.");
    }
  };

  for (size_t lo = 0; lo < req.count; lo += roundElems, ++step) {
    const size_t n = std::min(roundElems, req.count - lo);
    const uint64_t t = ++round_;
    const int set = static_cast<int>(t % 2);
    auto part = [&](int q) { return partStart(n, P, q); };
    // 1. This set's buffers are free once every peer is past round t - 2.
    if (t > 2)
      for (int p = 0; p < P; ++p)
        if (p != me) waitFor(p, WindowCounter::kConsumed, t - 2);
    // 2. The parts the other ranks own, and what call they belong to.
    uint8_t* mine = w.input(me, set);
    for (int q = 0; q < P; ++q) {
      if (q == me) continue;
      const size_t bytes = (part(q + 1) - part(q)) * esz;
      std::memcpy(mine + part(q) * esz, in + (lo + part(q)) * esz, bytes);
      bytesPublished_ += bytes;
    }
    WireHeader h = base;
    h.srcRank = me;
    h.step = step;
    h.offset = lo;
    h.payloadBytes = n * esz;
    *w.header(me, set) = h;
    w.publish(WindowCounter::kPublished, t);
    // 3. Reduce this rank's part, in rank order.
    const size_t a = part(me), count = part(me + 1) - a;
    for (int p = 0; p < P; ++p) {
      if (p == me) continue;
      waitFor(p, WindowCounter::kPublished, t);
      WireHeader expected = h;
      expected.srcRank = p;
      checkHeader(expected, *w.header(p, set), h.payloadBytes, me);
    }
    auto source = [&](int p) -> const void* {
      if (p == me) return in + (lo + a) * esz;
      return w.input(p, set) + a * esz;
    };
    uint8_t* res = w.result(me, set);
    if (count > 0) {
      reduce(res, source(0), source(1), count);
      for (int p = 2; p < P; ++p) reduce(res, res, source(p), count);
      if (req.op == RedOp::kAvg) device::cpuDivide(res, count, req.dtype, P);
      std::memcpy(out + (lo + a) * esz, res, count * esz);
    }
    bytesPublished_ += count * esz;
    w.publish(WindowCounter::kReduced, t);
    // 4. Every other part's result, from its owner. Starting after this rank spreads the ranks
    // over the owners.
    for (int k = 1; k < P; ++k) {
      const int q = (me + k) % P;
      waitFor(q, WindowCounter::kReduced, t);
      std::memcpy(out + (lo + part(q)) * esz, w.result(q, set), (part(q + 1) - part(q)) * esz);
    }
    w.publish(WindowCounter::kConsumed, t);
  }
}

}  // namespace squeeze
