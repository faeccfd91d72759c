// Cross-memory attach for the shm transport's single-copy path (see cma.h).
#include "transports/shm/cma.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/error.h"
#include "base/strings.h"
#include "transports/transport.h"

namespace squeeze {
namespace {

constexpr uint32_t kOfferMagic = 0x414d4353;   // "SCMA"
constexpr uint32_t kResultMagic = 0x524d4353;  // "SCMR"
constexpr uint32_t kOfferVersion = 1;
// The largest threshold a peer may announce (SQZ_SHM_SINGLE_COPY_BYTES' own maximum is 1 TiB).
constexpr uint64_t kMaxThreshold = uint64_t{1} << 40;
// ProbeResult::err values besides 0 (read it) and an errno.
constexpr int32_t kNotTried = -1;  // this side's setting is 0: it never reads the peer
constexpr int32_t kMismatch = -2;  // the read worked but found another value: not the peer

// What each side announces: where its probe word is, what it holds, and its setting.
struct ProbeOffer {
  uint32_t magic;
  uint32_t version;
  int32_t pid;
  uint32_t reserved;
  uint64_t addr;
  uint64_t value;
  uint64_t threshold;
};

// What each side found when it read the other's probe word.
struct ProbeResult {
  uint32_t magic;
  int32_t err;
};

std::atomic<int> gFailProbeOfRank{-1};
std::atomic<bool> gFailCrossReadable{false};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string describeProbe(int32_t err, int readerRank, int ownerRank) {
  if (err == kNotTried) return strCat("rank ", readerRank, " has SQZ_SHM_SINGLE_COPY_BYTES=0");
  if (err == kMismatch)
    return strCat("rank ", readerRank, " read another process than rank ", ownerRank, " at rank ",
                  ownerRank, "'s pid (another pid namespace?)");
  return strCat("rank ", readerRank, " cannot read rank ", ownerRank,
                "'s memory with process_vm_readv: ", std::strerror(err), " (", crossReadHint(err),
                ")");
}

}  // namespace

ssize_t readPeerMemory(pid_t pid, void* local, uint64_t remote, size_t n) {
  iovec l{local, n};
  iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(remote)), n};
  const ssize_t got = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
  return got < 0 ? -errno : got;
}

bool crossReadable(const void* p, size_t n) {
  if (n == 0) return true;
  if (gFailCrossReadable.load(std::memory_order_relaxed)) return false;
  const auto* b = static_cast<const uint8_t*>(p);
  uint8_t sink[2];
  iovec l{sink, 2};
  iovec r[2] = {{const_cast<uint8_t*>(b), 1}, {const_cast<uint8_t*>(b + n - 1), 1}};
  return ::process_vm_readv(::getpid(), &l, 1, r, 2, 0) == 2;
}

std::string crossReadHint(int err) {
  switch (err) {
    case EPERM:
      return "the kernel forbids it: yama's kernel.yama.ptrace_scope is above 0, the ranks run "
             "as different users, or a container lacks CAP_SYS_PTRACE";
    case ESRCH:
      return "no such process: the peer exited, or runs in another pid namespace";
    case ENOSYS:
      return "process_vm_readv is not available (an old kernel or a seccomp filter)";
    case EFAULT:
      return "the address is not readable by another process (memory mapped by a device driver, "
             "or already freed)";
    default:
      return "set SQZ_SHM_SINGLE_COPY_BYTES=0 to copy every message through the ring";
  }
}

void setSingleCopyTestHooks(int failProbeOfRank, bool failCrossReadable) {
  gFailProbeOfRank.store(failProbeOfRank);
  gFailCrossReadable.store(failCrossReadable);
}

SingleCopyPlan negotiateSingleCopy(PeerLink& link, int myRank, int peerRank, size_t myThreshold) {
  // The probe word lives on this stack frame, which outlives the peer's read: the peer reads it
  // before it sends its result, and this function returns only after receiving that result.
  std::atomic<uint64_t> probe{0};
  const uint64_t addr = reinterpret_cast<uintptr_t>(&probe);
  const uint64_t value = splitmix64(
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      (addr << 7) ^ (uint64_t(::getpid()) << 32) ^ uint64_t(myRank));
  probe.store(value, std::memory_order_seq_cst);

  ProbeOffer mine{};
  mine.magic = kOfferMagic;
  mine.version = kOfferVersion;
  mine.pid = static_cast<int32_t>(::getpid());
  mine.addr = addr;
  mine.value = value;
  mine.threshold = myThreshold;
  link.sendBytes(&mine, sizeof mine);
  ProbeOffer theirs{};
  link.recvBytes(&theirs, sizeof theirs);
  if (theirs.magic != kOfferMagic || theirs.version != kOfferVersion || theirs.pid <= 0 ||
      theirs.threshold > kMaxThreshold)
    raise(ErrorCode::kRemote, "rank ", peerRank, " sent a malformed shm single-copy offer (magic ",
          theirs.magic, ", version ", theirs.version, ", pid ", theirs.pid, ", threshold ",
          theirs.threshold, "); are both ranks running the same Squeeze build?");

  // This side reads the peer only if both would use the direction peer -> this rank.
  ProbeResult found{kResultMagic, kNotTried};
  if (myThreshold != 0 && theirs.threshold != 0) {
    uint64_t seen = 0;
    const ssize_t got = gFailProbeOfRank.load() == myRank
                            ? -EPERM
                            : readPeerMemory(theirs.pid, &seen, theirs.addr, sizeof seen);
    found.err = got == sizeof seen ? (seen == theirs.value ? 0 : kMismatch)
                                   : (got < 0 ? static_cast<int32_t>(-got) : EFAULT);
  }
  link.sendBytes(&found, sizeof found);
  ProbeResult peerFound{};
  link.recvBytes(&peerFound, sizeof peerFound);
  if (peerFound.magic != kResultMagic)
    raise(ErrorCode::kRemote, "rank ", peerRank, " sent a malformed shm single-copy probe result");
  // Keeps the word (and its store) alive until the peer is done with it.
  (void)probe.load(std::memory_order_seq_cst);

  SingleCopyPlan plan;
  plan.peerPid = theirs.pid;
  const size_t agreed = std::max<uint64_t>(myThreshold, theirs.threshold);
  if (myThreshold == 0 || theirs.threshold == 0) {
    const int off = myThreshold == 0 ? myRank : peerRank;
    plan.inWhy = plan.outWhy = strCat("rank ", off, " has SQZ_SHM_SINGLE_COPY_BYTES=0");
    return plan;
  }
  if (found.err == 0)
    plan.inThreshold = agreed;
  else
    plan.inWhy = describeProbe(found.err, myRank, peerRank);
  if (peerFound.err == 0)
    plan.outThreshold = agreed;
  else
    plan.outWhy = describeProbe(peerFound.err, peerRank, myRank);
  return plan;
}

}  // namespace squeeze
