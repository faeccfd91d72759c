// The CUDA stand-in's memory (standin.h): device allocations are memfd mappings (so an IPC
// handle can name the memfd and another process can map it), pinned and registered host memory
// are tracked ranges, and every range is in one table that pointer attributes, copies' bounds
// checks, cuMemGetAddressRange and the kernels' pointer checks read.
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "device/standin/internal.h"

namespace squeeze::standin::detail {

namespace {

// What a cudaIpcMemHandle_t carries: enough for another process to open the memfd through
// /proc/<pid>/fd/<fd> and to check that it is still the same allocation.
struct IpcHandle {
  char magic[8];
  uint64_t pid;
  int64_t fd;
  uint64_t size;
  uint64_t mapLen;
  uint64_t offset;  // of the pointer the handle was made from (informational: open maps the base)
  uint64_t serial;
  uint64_t inode;
};
static_assert(sizeof(IpcHandle) <= sizeof(cudaIpcMemHandle_t));
constexpr char kIpcMagic[8] = "SQZIPC1";

size_t pageRound(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

// One memfd per allocation: a process with many allocations may pass the soft fd limit, which is
// raised to the hard one then (real device memory does not cost descriptors).
int newMemfd() {
  int fd = memfd_create("sqz-cuda-standin", MFD_CLOEXEC);
  if (fd < 0 && errno == EMFILE) {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
      lim.rlim_cur = lim.rlim_max;
      setrlimit(RLIMIT_NOFILE, &lim);
      fd = memfd_create("sqz-cuda-standin", MFD_CLOEXEC);
    }
  }
  return fd;
}

void insertRegion(Region r) {
  State& st = state();
  std::unique_lock<std::shared_mutex> lock(st.memMu);
  if (r.kind == RegionKind::kDevice) r.serial = st.nextSerial++;
  st.regions[r.base] = r;
}

// Removes the region starting at `p` if its kind is `kind` (and its serial `serial`, when not 0).
bool takeRegion(const void* p, RegionKind kind, uint64_t serial, Region* out) {
  State& st = state();
  std::unique_lock<std::shared_mutex> lock(st.memMu);
  auto it = st.regions.find(reinterpret_cast<uintptr_t>(p));
  if (it == st.regions.end() || it->second.kind != kind) return false;
  if (serial && it->second.serial != serial) return false;
  *out = it->second;
  st.regions.erase(it);
  return true;
}

void release(const Region& r) {
  if (r.mapLen) munmap(reinterpret_cast<void*>(r.base), r.mapLen);
  if (r.fd >= 0) close(r.fd);
}

bool overlapsAny(uintptr_t base, size_t size) {
  State& st = state();
  std::shared_lock<std::shared_mutex> lock(st.memMu);
  auto it = st.regions.lower_bound(base + size);
  if (it == st.regions.begin()) return false;
  --it;
  return it->second.base + it->second.size > base;
}

cudaError_t allocDevice(Device& d, size_t size, void** out) {
  const size_t len = pageRound(size);
  const int fd = newMemfd();
  if (fd < 0) return cudaErrorMemoryAllocation;
  struct stat st {};
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(len)) == 0 && fstat(fd, &st) == 0)
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  Region r;
  r.base = reinterpret_cast<uintptr_t>(p);
  r.size = size;
  r.mapLen = len;
  r.kind = RegionKind::kDevice;
  r.device = d.ordinal;
  r.fd = fd;
  r.inode = st.st_ino;
  insertRegion(r);
  count(Count::kAllocations);
  *out = p;
  return cudaSuccess;
}

bool isDevice(const Region& r) {
  return r.kind == RegionKind::kDevice || r.kind == RegionKind::kIpc;
}

// A copy may not run past the end of device memory; other memory is host memory (pageable when
// untracked), which unified addressing lets a copy read or write as it is.
bool inBounds(const void* p, size_t n) {
  Region r;
  if (!findRegion(p, &r) || !isDevice(r)) return true;
  return reinterpret_cast<uintptr_t>(p) - r.base + n <= r.size;
}

bool pageable(const void* p) {
  Region r;
  return !findRegion(p, &r);
}

// The copy's kinds beyond Count::kCopies (submit counts that): device to host, pageable.
void countCopyKinds(const void* dst, const void* src) {
  if (isDeviceMemory(src) && !isDeviceMemory(dst)) count(Count::kDeviceToHostCopies);
  if (pageable(dst) || pageable(src)) count(Count::kPageableCopies);
}

// The checks every copy makes, and its stream (`stream` null: the current device's legacy stream
// of a synchronous copy).
cudaError_t prepareCopy(void* dst, const void* src, size_t dstExtent, size_t srcExtent,
                        cudaMemcpyKind kind, cudaStream_t stream, bool sync,
                        std::shared_ptr<Stream>* s) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  if (!dst || !src) return cudaErrorInvalidValue;
  cudaError_t rc;
  *s = resolveStream(sync ? nullptr : stream, &rc);
  if (!*s) return rc;
  if ((rc = stickyError(*(*s)->device))) return rc;
  if (!inBounds(dst, dstExtent) || !inBounds(src, srcExtent)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// The copy or set as an item on `s`; a synchronous one then waits for the whole device, an
// asynchronous one touching pageable memory for its stream (as CUDA stages pageable memory).
// A copy or memset as CUDA documents its synchronization ("API synchronization behavior"): an
// asynchronous one is an item on its stream, and the host waits only when it touches pageable
// memory; a synchronous one is an item on the legacy default stream (which waits for the
// device's blocking streams, not for non-blocking ones) that the host waits for, except a copy
// between two device buffers and a memset of device memory, which return at once.
cudaError_t submit(const std::shared_ptr<Stream>& s, const char* what, bool hostWait, bool sync,
                   std::function<void()> body) {
  if (hostWait)
    if (cudaError_t rc = refuseOnDevice(what)) return rc;
  count(Count::kCopies);
  Item item;
  item.what = what;
  item.run = [body = std::move(body)](Stream&) { body(); };
  const uint64_t seq = enqueue(s, std::move(item));
  if (hostWait) return waitWatched(s, seq, what, sync);
  return cudaSuccess;
}

cudaError_t copyBytes(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                      cudaStream_t stream, bool sync) {
  if (n == 0) return cudaSuccess;
  std::shared_ptr<Stream> s;
  if (cudaError_t rc = prepareCopy(dst, src, n, n, kind, stream, sync, &s)) return rc;
  const bool deviceToDevice = isDeviceMemory(dst) && isDeviceMemory(src);
  const bool touchesPageable = pageable(dst) || pageable(src);
  countCopyKinds(dst, src);
  if (sync)
    return submit(s, "cudaMemcpy", !deviceToDevice, true, [=] { std::memmove(dst, src, n); });
  return submit(s,
                touchesPageable ? "cudaMemcpyAsync with pageable host memory" : "cudaMemcpyAsync",
                touchesPageable, false, [=] { std::memmove(dst, src, n); });
}

cudaError_t setBytes(void* p, int value, size_t n, cudaStream_t stream, bool sync) {
  if (n == 0) return cudaSuccess;
  Region r;
  if (!p || !findRegion(p, &r)) return cudaErrorInvalidValue;  // a GPU cannot write pageable memory
  std::shared_ptr<Stream> s;
  if (cudaError_t rc = prepareCopy(p, p, n, n, cudaMemcpyDefault, stream, sync, &s)) return rc;
  return submit(s, sync ? "cudaMemset" : "cudaMemsetAsync", sync && !isDevice(r), sync,
                [=] { std::memset(p, value, n); });
}

CUresult CUDAAPI memGetAddressRange(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  const ApiCall api(__func__);
  count(Count::kPointerQueries);
  Region r;
  if (!findRegion(reinterpret_cast<const void*>(dptr), &r) || !isDevice(r))
    return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = r.base;
  if (psize) *psize = r.size;
  return CUDA_SUCCESS;
}

}  // namespace

void* memGetAddressRangeEntry() { return reinterpret_cast<void*>(&memGetAddressRange); }

bool findRegion(const void* p, Region* out) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  State& st = state();
  std::shared_lock<std::shared_mutex> lock(st.memMu);
  auto it = st.regions.upper_bound(a);
  if (it == st.regions.begin()) return false;
  --it;
  if (a >= it->second.base + it->second.size) return false;
  *out = it->second;
  return true;
}

}  // namespace squeeze::standin::detail

namespace squeeze::standin {

bool isDeviceMemory(const void* p) {
  detail::Region r;
  return detail::findRegion(p, &r) && detail::isDevice(r);
}

bool isDeviceAccessible(const void* p) {
  detail::Region r;
  return detail::findRegion(p, &r);
}

}  // namespace squeeze::standin

using namespace squeeze::standin::detail;

namespace {

cudaError_t hostAlloc(void** pHost, size_t size, unsigned int flags, const char* call) {
  constexpr unsigned kKnown =
      cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if (!pHost || (flags & ~kKnown)) return fail(cudaErrorInvalidValue);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  if (size == 0) {
    *pHost = nullptr;
    return cudaSuccess;
  }
  if (cudaError_t rc = syncDevice(*d, call)) return fail(rc);
  const size_t len = pageRound(size);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  Region r;
  r.base = reinterpret_cast<uintptr_t>(p);
  r.size = size;
  r.mapLen = len;
  r.kind = RegionKind::kPinned;
  r.device = d->ordinal;
  insertRegion(r);
  count(Count::kAllocations);
  *pHost = p;
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  const ApiCall api(__func__);
  if (!devPtr) return fail(cudaErrorInvalidValue);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  if (size == 0) {  // as CUDA: success, and no allocation
    *devPtr = nullptr;
    return cudaSuccess;
  }
  if (cudaError_t rc = syncDevice(*d, "cudaMalloc")) return fail(rc);
  return fail(allocDevice(*d, size, devPtr));
}

cudaError_t cudaFree(void* devPtr) {
  const ApiCall api(__func__);
  if (!devPtr) return cudaSuccess;
  Region r;
  if (!findRegion(devPtr, &r) || r.kind != RegionKind::kDevice ||
      r.base != reinterpret_cast<uintptr_t>(devPtr))
    return fail(cudaErrorInvalidValue);
  Device* d = deviceAt(r.device);
  if (cudaError_t rc = syncDevice(*d, "cudaFree")) return fail(rc);
  if (!takeRegion(devPtr, RegionKind::kDevice, r.serial, &r)) return fail(cudaErrorInvalidValue);
  release(r);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  const ApiCall api(__func__);
  if (!devPtr) return fail(cudaErrorInvalidValue);
  cudaError_t rc;
  auto s = resolveStream(hStream, &rc);
  if (!s) return fail(rc);
  if ((rc = stickyError(*s->device))) return fail(rc);
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  // Stream-ordered: usable by work enqueued after this on the stream, so mapping it now is
  // early enough, and nothing waits.
  return fail(allocDevice(*s->device, size, devPtr));
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  const ApiCall api(__func__);
  cudaError_t rc;
  auto s = resolveStream(hStream, &rc);
  if (!s) return fail(rc);
  if (!devPtr) return cudaSuccess;
  Region r;
  if (!findRegion(devPtr, &r) || r.kind != RegionKind::kDevice ||
      r.base != reinterpret_cast<uintptr_t>(devPtr))
    return fail(cudaErrorInvalidValue);
  if ((rc = stickyError(*s->device))) return fail(rc);
  Item item;
  item.what = "cudaFreeAsync";
  item.runsAfterFailure = true;
  item.run = [devPtr, serial = r.serial](Stream&) {
    Region taken;
    if (takeRegion(devPtr, RegionKind::kDevice, serial, &taken)) release(taken);
  };
  enqueue(s, std::move(item));  // the memory goes when the stream gets there; nothing waits
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  const ApiCall api(__func__);
  return hostAlloc(pHost, size, flags, "cudaHostAlloc");
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  const ApiCall api(__func__);
  return hostAlloc(ptr, size, 0, "cudaMallocHost");
}

cudaError_t cudaFreeHost(void* ptr) {
  const ApiCall api(__func__);
  if (!ptr) return cudaSuccess;
  Region r;
  if (!findRegion(ptr, &r) || r.kind != RegionKind::kPinned ||
      r.base != reinterpret_cast<uintptr_t>(ptr))
    return fail(cudaErrorInvalidValue);
  if (cudaError_t rc = syncDevice(*deviceAt(r.device), "cudaFreeHost")) return fail(rc);
  if (!takeRegion(ptr, RegionKind::kPinned, 0, &r)) return fail(cudaErrorInvalidValue);
  release(r);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  const ApiCall api(__func__);
  constexpr unsigned kKnown = cudaHostRegisterPortable | cudaHostRegisterMapped |
                              cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;
  if (!ptr || size == 0 || (flags & ~kKnown)) return fail(cudaErrorInvalidValue);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  const auto base = reinterpret_cast<uintptr_t>(ptr);
  if (overlapsAny(base, size)) return fail(cudaErrorHostMemoryAlreadyRegistered);
  if (cudaError_t rc = syncDevice(*d, "cudaHostRegister")) return fail(rc);
  Region r;
  r.base = base;
  r.size = size;
  r.kind = RegionKind::kRegistered;
  r.device = d->ordinal;
  insertRegion(r);
  count(Count::kAllocations);
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  const ApiCall api(__func__);
  Region r;
  if (!ptr || !findRegion(ptr, &r) || r.kind != RegionKind::kRegistered ||
      r.base != reinterpret_cast<uintptr_t>(ptr))
    return fail(cudaErrorHostMemoryNotRegistered);
  if (cudaError_t rc = syncDevice(*deviceAt(r.device), "cudaHostUnregister")) return fail(rc);
  if (!takeRegion(ptr, RegionKind::kRegistered, 0, &r))
    return fail(cudaErrorHostMemoryNotRegistered);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  const ApiCall api(__func__);
  if (!pDevice || flags != 0) return fail(cudaErrorInvalidValue);
  Region r;
  if (!findRegion(pHost, &r) || isDevice(r)) return fail(cudaErrorInvalidValue);
  *pDevice = pHost;  // unified addressing: the device sees pinned memory at its host address
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  const ApiCall api(__func__);
  count(Count::kPointerQueries);
  if (!attributes) return fail(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof(*attributes));
  Region r;
  if (!findRegion(ptr, &r)) {  // as CUDA 11+: memory CUDA does not know is no error
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = cudaInvalidDeviceId;
    attributes->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  attributes->device = r.device;
  attributes->devicePointer = const_cast<void*>(ptr);
  if (isDevice(r)) {
    attributes->type = cudaMemoryTypeDevice;
  } else {
    attributes->type = cudaMemoryTypeHost;
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  const ApiCall api(__func__);
  return fail(copyBytes(dst, src, count, kind, nullptr, true));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  const ApiCall api(__func__);
  return fail(copyBytes(dst, src, count, kind, stream, false));
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  const ApiCall api(__func__);
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidPitchValue);
  if (width == 0 || height == 0) return cudaSuccess;
  std::shared_ptr<Stream> s;
  const size_t dstExtent = (height - 1) * dpitch + width, srcExtent = (height - 1) * spitch + width;
  if (cudaError_t rc = prepareCopy(dst, src, dstExtent, srcExtent, kind, stream, false, &s))
    return fail(rc);
  auto* d = static_cast<char*>(dst);
  auto* from = static_cast<const char*>(src);
  countCopyKinds(dst, src);
  return fail(submit(s, "cudaMemcpy2DAsync", pageable(dst) || pageable(src), false, [=] {
    for (size_t row = 0; row < height; ++row)
      std::memmove(d + row * dpitch, from + row * spitch, width);
  }));
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  const ApiCall api(__func__);
  return fail(setBytes(devPtr, value, count, nullptr, true));
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  const ApiCall api(__func__);
  return fail(setBytes(devPtr, value, count, stream, false));
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  const ApiCall api(__func__);
  Region r;
  if (!handle || !devPtr || !findRegion(devPtr, &r) || r.kind != RegionKind::kDevice)
    return fail(cudaErrorInvalidValue);
  IpcHandle h{};
  std::memcpy(h.magic, kIpcMagic, sizeof(h.magic));
  h.pid = static_cast<uint64_t>(getpid());
  h.fd = r.fd;
  h.size = r.size;
  h.mapLen = r.mapLen;
  h.offset = reinterpret_cast<uintptr_t>(devPtr) - r.base;
  h.serial = r.serial;
  h.inode = r.inode;
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle, &h, sizeof(h));
  return cudaSuccess;
}

// Maps the exporter's whole allocation and returns its base, as CUDA does (the handle names an
// allocation; an exporter that passed an interior pointer gets its base back, not the pointer).
cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  const ApiCall api(__func__);
  if (!devPtr || flags != cudaIpcMemLazyEnablePeerAccess) return fail(cudaErrorInvalidValue);
  IpcHandle h;
  std::memcpy(&h, &handle, sizeof(h));
  if (std::memcmp(h.magic, kIpcMagic, sizeof(h.magic)) != 0 || h.size == 0)
    return fail(cudaErrorInvalidResourceHandle);
  // As CUDA: a process cannot open its own handle ("invalid device context").
  if (h.pid == static_cast<uint64_t>(getpid())) return fail(cudaErrorDeviceUninitialized);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  State& st = state();
  {
    std::unique_lock<std::shared_mutex> lock(st.memMu);
    for (auto& [base, r] : st.regions) {
      if (r.kind == RegionKind::kIpc && r.ipcPid == h.pid && r.serial == h.serial &&
          r.inode == h.inode) {
        ++r.ipcRefs;  // opened before: the same mapping, counted
        *devPtr = reinterpret_cast<void*>(base);
        return cudaSuccess;
      }
    }
  }
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return fail(cudaErrorMapBufferObjectFailed);  // the exporter is gone, or freed it
  struct stat sb {};
  if (fstat(fd, &sb) != 0 || static_cast<uint64_t>(sb.st_ino) != h.inode ||
      static_cast<uint64_t>(sb.st_size) < h.mapLen) {
    close(fd);
    return fail(cudaErrorInvalidResourceHandle);  // that descriptor is something else now
  }
  void* p = mmap(nullptr, h.mapLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return fail(cudaErrorMapBufferObjectFailed);
  Region r;
  r.base = reinterpret_cast<uintptr_t>(p);
  r.size = h.size;
  r.mapLen = h.mapLen;
  r.kind = RegionKind::kIpc;
  r.device = d->ordinal;
  r.serial = h.serial;
  r.inode = h.inode;
  r.ipcRefs = 1;
  r.ipcPid = h.pid;
  insertRegion(r);
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  const ApiCall api(__func__);
  State& st = state();
  Region r;
  {
    std::unique_lock<std::shared_mutex> lock(st.memMu);
    auto it = st.regions.find(reinterpret_cast<uintptr_t>(devPtr));
    if (!devPtr || it == st.regions.end() || it->second.kind != RegionKind::kIpc)
      return fail(cudaErrorInvalidValue);
    if (--it->second.ipcRefs > 0) return cudaSuccess;
    r = it->second;
    st.regions.erase(it);
  }
  release(r);
  return cudaSuccess;
}

}  // extern "C"
