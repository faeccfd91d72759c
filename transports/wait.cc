// waitForActivity: the one place an executor sleeps. Sockets are polled; the shm doorbell is a
// futex. With both kinds at once the poll is sliced into 1 ms waits between doorbell checks.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "base/error.h"
#include "transports/shm/doorbell.h"
#include "transports/transport.h"

namespace squeeze {

void Doorbell::ring() {
  seq_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq_), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
}

void Doorbell::wait(uint32_t seen, int timeoutMs) {
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  if (seq_.load(std::memory_order_seq_cst) == seen) {
    timespec ts{timeoutMs / 1000, (timeoutMs % 1000) * 1000000L};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq_), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
}

void waitForActivity(WaitSources& sources, uint32_t doorbellSnapshot, int timeoutMs) {
  if (timeoutMs <= 0) return;
  if (!sources.doorbell) {
    if (sources.fds.empty()) return;
    int rc = ::poll(sources.fds.data(), sources.fds.size(), timeoutMs);
    if (rc < 0 && errno != EINTR) throw SysError("poll()", errno);
    return;
  }
  if (sources.fds.empty()) {
    sources.doorbell->wait(doorbellSnapshot, timeoutMs);
    return;
  }
  const int slice = std::min(timeoutMs, 1);
  if (sources.doorbell->snapshot() != doorbellSnapshot) return;
  int rc = ::poll(sources.fds.data(), sources.fds.size(), slice);
  if (rc < 0 && errno != EINTR) throw SysError("poll()", errno);
}

}  // namespace squeeze
