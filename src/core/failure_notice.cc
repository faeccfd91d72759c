// Failure notices over the control sockets (see failure_notice.h).
#include "core/failure_notice.h"

#include <poll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace squeeze {
namespace {

constexpr uint32_t kNoticeMagic = 0x4e5a5153;  // "SQZN" little-endian

struct NoticeHeader {
  uint32_t magic = kNoticeMagic;
  int32_t code = 0;
  uint32_t length = 0;
};

}  // namespace

void sendFailureNotice(Socket& control, const Error& why) {
  if (!control.valid()) return;
  const std::string text(why.what(), std::min(std::strlen(why.what()), kMaxNoticeText));
  NoticeHeader h;
  h.code = static_cast<int32_t>(why.code());
  h.length = static_cast<uint32_t>(text.size());
  iovec iov[2] = {{&h, sizeof h}, {const_cast<char*>(text.data()), text.size()}};
  try {
    // A control socket carries nothing else after setup: its buffer is empty, and takes the
    // whole notice in one write. A partial one is cut off by the shutdown that follows, and the
    // reader drops it.
    control.writeSome(iov, 2, "sending a failure notice");
  } catch (const Error&) {
    // the peer is gone: nobody to tell
  }
}

std::optional<Error> readFailureNotice(std::vector<Socket>& controls, int myRank,
                                       Deadline deadline) {
  std::optional<Error> first;
  std::vector<bool> done(controls.size(), false);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<size_t> ranks;
    for (size_t r = 0; r < controls.size(); ++r) {
      if (done[r] || !controls[r].valid() || static_cast<int>(r) == myRank) continue;
      fds.push_back(pollfd{controls[r].fd(), POLLIN, 0});
      ranks.push_back(r);
    }
    if (fds.empty()) return first;
    const int rc = ::poll(fds.data(), fds.size(), remainingMs(deadline));
    if (rc < 0 && errno != EINTR) return first;
    if (rc <= 0 && Clock::now() >= deadline) return first;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const size_t r = ranks[i];
      done[r] = true;  // one notice per peer; EOF or garbage ends it too
      try {
        NoticeHeader h;
        // The writer sent it in one piece: what is there now is all there will be.
        const Deadline soon = std::min(deadline, deadlineAfterMs(50));
        controls[r].recvAll(&h, sizeof h, soon, "reading a failure notice");
        if (h.magic != kNoticeMagic || h.length > kMaxNoticeText) continue;
        std::string text(h.length, '\0');
        controls[r].recvAll(text.data(), text.size(), soon, "reading a failure notice");
        const auto code = static_cast<ErrorCode>(h.code);
        Error notice(code == ErrorCode::kInvalidUsage ? code : ErrorCode::kRemote,
                     strCat("rank ", r, " stopped the communicator: ", text));
        if (code != ErrorCode::kRemote) return notice;
        if (!first) first = notice;
      } catch (const Error&) {
        // closed without a notice, or cut off: nothing to learn from this peer
      }
    }
  }
}

}  // namespace squeeze
