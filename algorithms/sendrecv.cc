// Grouped point-to-point: the sends and receives one rank queued between sqzGroupStart and
// sqzGroupEnd become one schedule, all posted at once, so any order of matching calls across
// ranks completes (nothing waits for anything but its own message). Messages between two ranks
// match in the order they were queued (as in NCCL and MPI); each carries its number in that
// pair's sequence, and its size, so a receive of another size is a clear error.
#include "algorithms/algorithm.h"
#include "common/error.h"

namespace squeeze {

Schedule buildSendRecv(const std::vector<P2pCall>& calls, int rank, std::vector<uint64_t>& sentTo,
                       std::vector<uint64_t>& recvdFrom) {
  Schedule sched;
  // Sends to self pair with receives from self in order: a copy.
  std::vector<uint32_t> selfSends, selfRecvs;
  for (const P2pCall& c : calls) {
    const uint32_t user = static_cast<uint32_t>(sched.userBuffers.size());
    sched.userBuffers.push_back(static_cast<char*>(c.buffer));
    if (c.peer == rank) {
      (c.isSend ? selfSends : selfRecvs).push_back(user);
      continue;
    }
    uint64_t& seq = c.isSend ? sentTo[c.peer] : recvdFrom[c.peer];
    Op op{.kind = c.isSend ? OpKind::kSendFinal : OpKind::kRecvFinal, .peer = c.peer,
          .step = static_cast<uint32_t>(seq++), .count = c.bytes};
    op.src = op.dst = Span{BufferRole::kUser, 0, user};
    sched.add(op);
  }
  if (selfSends.size() != selfRecvs.size())
    raise(ErrorCode::kInvalidUsage, "rank ", rank, " queued ", selfSends.size(),
          " sends to itself but ", selfRecvs.size(), " receives from itself in one group");
  for (size_t i = 0; i < selfSends.size(); ++i) {
    const size_t sendBytes = calls[selfSends[i]].bytes, recvBytes = calls[selfRecvs[i]].bytes;
    if (sendBytes != recvBytes)
      raise(ErrorCode::kInvalidUsage, "rank ", rank, " sends ", sendBytes, " bytes to itself but"
            " receives ", recvBytes, "; a send and its receive must have the same size.");
    Op op{.kind = OpKind::kCopy, .count = sendBytes};
    op.src = Span{BufferRole::kUser, 0, selfSends[i]};
    op.dst = Span{BufferRole::kUser, 0, selfRecvs[i]};
    sched.add(op);
  }
  return sched;
}

}  // namespace squeeze
