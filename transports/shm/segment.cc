// POSIX shared-memory segments (see segment.h).
#include "transports/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/error.h"
#include "base/fd.h"
#include "base/strings.h"

namespace squeeze {
namespace {

// MAP_POPULATE maps every page now: the pages are reserved already (posix_fallocate), but each
// process would otherwise take a fault on each page it first touches. A ring is touched in
// message order, so the first ~64 calls of 64 KiB paid for it (3x their settled time).
Mapping mapFd(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) throw SysError(strCat("mmap of shared-memory segment ", name), errno);
  return Mapping(p, bytes);
}

}  // namespace

std::string segmentPrefix(uint64_t commHash) {
  return strCat("/sqz-", toHex(&commHash, sizeof commHash), "-");
}

Mapping::~Mapping() {
  if (addr_) ::munmap(addr_, len_);
}

void NameGuard::unlink() {
  if (!name_.empty()) ::shm_unlink(name_.c_str());
  name_.clear();
}

Mapping createSegment(const std::string& name, size_t bytes) {
  Fd fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    const int err = errno;
    throw SysError(
        strCat("shm_open(", name, ", O_CREAT|O_EXCL)",
               err == EEXIST ? " (a stale segment of a communicator with the same id?)" : ""),
        err);
  }
  NameGuard guard(name);
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    throw SysError(strCat("ftruncate of shared-memory segment ", name, " to ", bytes, " bytes"),
                   errno);
  // Reserve the pages now: on a full /dev/shm this fails cleanly instead of a SIGBUS later.
  if (int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); err != 0) {
    if (err != EINVAL && err != EOPNOTSUPP)
      throw SysError(strCat("reserving ", formatBytes(bytes), " in /dev/shm for ", name,
                            " (make /dev/shm larger, lower SQZ_SHM_BUFFER_BYTES or "
                            "SQZ_SHM_DIRECT_BYTES, or set SQZ_TRANSPORT=tcp)"),
                     err);
  }
  Mapping m = mapFd(fd.get(), bytes, name);
  guard.release();  // the caller owns the name from here
  return m;
}

Mapping openSegment(const std::string& name, size_t minBytes, int peerRank, size_t mapBytes) {
  Fd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (fd.get() < 0)
    throw SysError(strCat("shm_open(", name, ") of rank ", peerRank,
                          "'s shared-memory segment (is the peer on another host or in another "
                          "/dev/shm namespace? then set SQZ_TRANSPORT=tcp)"),
                   errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw SysError(strCat("fstat of ", name), errno);
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < minBytes)
    raise(ErrorCode::kRemote, "rank ", peerRank, "'s shared-memory segment ", name, " has ", bytes,
          " bytes where at least ", minBytes, " were expected");
  return mapFd(fd.get(), mapBytes ? mapBytes : bytes, name);
}

}  // namespace squeeze
