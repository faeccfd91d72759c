// Grouped point-to-point: the sends and receives one rank queued between sqzGroupStart and
// sqzGroupEnd become one schedule, all posted at once, so any order of matching calls across
// ranks completes (nothing waits for anything but its own message). Messages between two ranks
// match in the order they were queued (as in NCCL and MPI); each carries its number in that
// pair's sequence, and its size, so a receive of another size is a clear error.
#include "algorithms/algorithm.h"
#include "base/error.h"

namespace squeeze {

void checkSendsToSelf(const std::vector<P2pCall>& calls, int rank) {
  std::vector<size_t> sends, recvs;  // bytes, in queue order
  for (const P2pCall& c : calls)
    if (c.peer == rank) (c.isSend ? sends : recvs).push_back(c.bytes);
  if (sends.size() != recvs.size())
    raise(ErrorCode::kInvalidUsage, "rank ", rank, " queued ", sends.size(),
          " sends to itself but ", recvs.size(), " receives from itself in one group");
  for (size_t k = 0; k < sends.size(); ++k)
    if (sends[k] != recvs[k])
      raise(ErrorCode::kInvalidUsage, "rank ", rank, " sends ", sends[k], " bytes to itself but"
            " receives ", recvs[k], "; a send and its receive must have the same size.");
}

Schedule buildSendRecv(const std::vector<P2pCall>& calls, int rank, std::vector<uint64_t>& sentTo,
                       std::vector<uint64_t>& recvdFrom) {
  Schedule sched;
  auto overlaps = [](const P2pCall& a, const P2pCall& b) {
    const char* a0 = static_cast<const char*>(a.buffer);
    const char* b0 = static_cast<const char*>(b.buffer);
    return a.bytes && b.bytes && a0 < b0 + b.bytes && b0 < a0 + a.bytes;
  };
  for (const P2pCall& c : calls) sched.userBuffers.push_back(static_cast<char*>(c.buffer));
  auto user = [](size_t i) { return Span{BufferRole::kUser, 0, static_cast<uint32_t>(i)}; };

  // Readers: the ops that read a send buffer (network sends, copies to self), by call index.
  std::vector<std::pair<size_t, uint32_t>> readers;
  std::vector<size_t> selfSends, selfRecvs;
  for (size_t i = 0; i < calls.size(); ++i) {
    const P2pCall& c = calls[i];
    if (c.peer == rank) {
      (c.isSend ? selfSends : selfRecvs).push_back(i);
    } else if (c.isSend) {
      Op op{.kind = OpKind::kSendFinal, .peer = c.peer,
            .step = static_cast<uint32_t>(sentTo[c.peer]++), .count = c.bytes};
      op.src = user(i);
      readers.push_back({i, sched.add(op)});
    }
  }
  checkSendsToSelf(calls, rank);
  // The readers of memory that `c` overwrites: it must wait for them.
  auto readersOf = [&](const P2pCall& c) {
    std::vector<uint32_t> ids;
    for (auto [i, id] : readers)
      if (overlaps(calls[i], c)) ids.push_back(id);
    return ids;
  };
  for (size_t k = 0; k < selfSends.size(); ++k) {
    const P2pCall& s = calls[selfSends[k]];
    const P2pCall& r = calls[selfRecvs[k]];
    Op op{.kind = OpKind::kCopy, .count = s.bytes};
    op.src = user(selfSends[k]);
    op.dst = user(selfRecvs[k]);
    op.deps[0] = sched.joinAll(readersOf(r));
    readers.push_back({selfSends[k], sched.add(op)});
  }
  // A receive into memory a send of this group still reads lands in scratch first and is
  // copied in once those sends are done (in-place send/recv, as nccl-tests runs it).
  for (size_t i = 0; i < calls.size(); ++i) {
    const P2pCall& c = calls[i];
    if (c.isSend || c.peer == rank) continue;
    Op op{.kind = OpKind::kRecvFinal, .peer = c.peer,
          .step = static_cast<uint32_t>(recvdFrom[c.peer]++), .count = c.bytes};
    op.dst = user(i);
    std::vector<uint32_t> before = readersOf(c);
    if (before.empty()) {
      sched.add(op);
      continue;
    }
    op.dst = Span{BufferRole::kScratch, sched.scratchElems};
    Op copy{.kind = OpKind::kCopy, .count = c.bytes};
    copy.src = op.dst;
    copy.dst = user(i);
    sched.scratchElems += c.bytes;
    copy.deps[0] = sched.add(op);
    copy.deps[1] = sched.joinAll(before);
    sched.add(copy);
  }
  return sched;
}

}  // namespace squeeze
