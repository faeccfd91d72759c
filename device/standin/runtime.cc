// The CUDA stand-in's runtime (standin.h): the process state, the emulated devices and their
// properties, per-thread current device and last error, sticky device errors, and the driver
// entry points handed out by cudaGetDriverEntryPointByVersion. Streams and events are in
// streams.cc, memory in memory.cc, error names in errors.cc, the counters in counters.cc.
#include <pthread.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "device/standin/internal.h"

namespace squeeze::standin {

namespace detail {

namespace {

std::atomic<State*> gState{nullptr};

// A fork()ed child has only the forking thread: the parent's stream workers and callback
// threads are gone, and their locks may be held forever. The child starts over with a fresh
// emulated runtime (real CUDA refuses to run in such a child; the stand-in's tests fork).
const int kAtFork =
    pthread_atfork(nullptr, nullptr, [] { gState.store(nullptr, std::memory_order_release); });

long envLong(const char* name, long fallback, long lo, long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end || n < lo || n > hi) {
    std::fprintf(stderr, "sqz-cuda-standin: ignoring %s=%s (not a number in [%ld, %ld])\n", name, v,
                 lo, hi);
    return fallback;
  }
  return n;
}

// Nothing here starts a thread: a State that loses the race in state() is simply deleted.
State* newState() {
  auto* s = new State;
  s->deviceCount = static_cast<int>(envLong("SQZ_STANDIN_DEVICES", 1, 0, 64));
  s->hangMs = envLong("SQZ_STANDIN_HANG_MS", 20000, 0, 1L << 40);
  // As CUDA: the number of hardware work queues (connections) each device's streams share,
  // read when the device is initialized (all of them at once here).
  const int connections =
      s->deviceCount > 0 ? static_cast<int>(envLong("CUDA_DEVICE_MAX_CONNECTIONS", 8, 1, 32)) : 8;
  for (int i = 0; i < s->deviceCount; ++i) {
    auto d = std::make_unique<Device>();
    d->ordinal = i;
    d->maxConnections = connections;
    d->workQueues = newWorkQueues(connections);
    d->peerEnabled.assign(s->deviceCount, false);
    d->legacy = newStream(*d, StreamKind::kLegacy, true, 0);
    s->devices.push_back(std::move(d));
  }
  return s;
}

thread_local int tlsDevice = 0;
thread_local bool tlsDeviceThread = false;
thread_local cudaError_t tlsLastError = cudaSuccess;

}  // namespace

State& state() {
  State* s = gState.load(std::memory_order_acquire);
  if (s) return *s;
  (void)kAtFork;
  State* fresh = newState();
  if (gState.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *s;
}

State* peekState() { return gState.load(std::memory_order_acquire); }

int& currentOrdinal() { return tlsDevice; }

cudaError_t fail(cudaError_t rc) {
  if (rc != cudaSuccess && rc != cudaErrorNotReady) tlsLastError = rc;
  return rc;
}

Device* deviceAt(int ordinal) {
  State& st = state();
  if (ordinal < 0 || ordinal >= st.deviceCount) return nullptr;
  return st.devices[ordinal].get();
}

cudaError_t currentDevice(Device** out) {
  if (state().deviceCount == 0) return cudaErrorNoDevice;
  Device* d = deviceAt(tlsDevice);
  if (!d) return cudaErrorInvalidDevice;
  *out = d;
  return cudaSuccess;
}

cudaError_t stickyError(const Device& d) {
  return static_cast<cudaError_t>(d.sticky.load(std::memory_order_acquire));
}

void failDevice(Device& d, cudaError_t rc, const std::string& what) {
  int expected = cudaSuccess;
  if (!d.sticky.compare_exchange_strong(expected, rc)) return;  // the first failure is the news
  std::fprintf(stderr,
               "sqz-cuda-standin: device %d: %s; every later call on the device returns %s (a "
               "sticky error, as after a faulting kernel on a GPU)\n",
               d.ordinal, what.c_str(), errorName(rc));
}

void markDeviceThread() { tlsDeviceThread = true; }

bool isDeviceThread() { return tlsDeviceThread; }

cudaError_t refuseOnDevice(const char* call) {
  if (!tlsDeviceThread) return cudaSuccess;
  std::fprintf(stderr,
               "sqz-cuda-standin: %s called from a stream's work (a kernel or host function): "
               "CUDA forbids this; it would wait for the stream that runs it "
               "(cudaErrorNotPermitted)\n",
               call);
  return cudaErrorNotPermitted;
}

}  // namespace detail

}  // namespace squeeze::standin

using namespace squeeze::standin::detail;

namespace {

// What the emulated GPU says about itself: a Hopper-class device (compute capability 9.0) with 4
// multiprocessors (the CPU runs its kernels) and the host's memory.
void fillProperties(cudaDeviceProp* p, int ordinal) {
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "Squeeze CUDA stand-in (emulated GPU %d)", ordinal);
  for (int i = 0; i < 16; ++i) p->uuid.bytes[i] = static_cast<char>(0x5a ^ (i * 17) ^ ordinal);
  struct sysinfo si {};
  sysinfo(&si);
  p->totalGlobalMem = static_cast<size_t>(si.totalram) * si.mem_unit;
  p->sharedMemPerBlock = 48 << 10;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = SIZE_MAX;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->totalConstMem = 64 << 10;
  p->major = 9;
  p->minor = 0;
  p->textureAlignment = 512;
  p->texturePitchAlignment = 32;
  p->multiProcessorCount = 4;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->pciBusID = ordinal;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = p->localL1CacheSupported = 1;
  p->sharedMemPerMultiprocessor = 228 << 10;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 0;  // the stand-in has no cudaMallocManaged
  p->pageableMemoryAccess = 0;
  p->computePreemptionSupported = 1;
  p->canUseHostPointerForRegisteredMem = 1;
  p->cooperativeLaunch = 1;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->maxBlocksPerMultiProcessor = 32;
  p->hostRegisterSupported = 1;
  p->memoryPoolsSupported = 1;
  p->ipcEventSupported = 0;  // no cudaIpcGetEventHandle
  p->clusterLaunch = 1;
  p->deviceNumaId = -1;
  p->hostNumaId = -1;
}

int attribute(cudaDeviceAttr attr, const cudaDeviceProp& p) {
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      return p.maxThreadsPerBlock;
    case cudaDevAttrMaxBlockDimX:
      return p.maxThreadsDim[0];
    case cudaDevAttrMaxBlockDimY:
      return p.maxThreadsDim[1];
    case cudaDevAttrMaxBlockDimZ:
      return p.maxThreadsDim[2];
    case cudaDevAttrMaxGridDimX:
      return p.maxGridSize[0];
    case cudaDevAttrMaxGridDimY:
      return p.maxGridSize[1];
    case cudaDevAttrMaxGridDimZ:
      return p.maxGridSize[2];
    case cudaDevAttrMaxSharedMemoryPerBlock:
      return static_cast<int>(p.sharedMemPerBlock);
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      return static_cast<int>(p.sharedMemPerBlockOptin);
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      return static_cast<int>(p.sharedMemPerMultiprocessor);
    case cudaDevAttrTotalConstantMemory:
      return static_cast<int>(p.totalConstMem);
    case cudaDevAttrWarpSize:
      return p.warpSize;
    case cudaDevAttrMaxRegistersPerBlock:
      return p.regsPerBlock;
    case cudaDevAttrMaxRegistersPerMultiprocessor:
      return p.regsPerMultiprocessor;
    case cudaDevAttrMultiProcessorCount:
      return p.multiProcessorCount;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      return p.maxThreadsPerMultiProcessor;
    case cudaDevAttrMaxBlocksPerMultiprocessor:
      return p.maxBlocksPerMultiProcessor;
    case cudaDevAttrComputeCapabilityMajor:
      return p.major;
    case cudaDevAttrComputeCapabilityMinor:
      return p.minor;
    case cudaDevAttrPciBusId:
      return p.pciBusID;
    case cudaDevAttrPciDeviceId:
      return p.pciDeviceID;
    case cudaDevAttrPciDomainId:
      return p.pciDomainID;
    case cudaDevAttrL2CacheSize:
      return p.l2CacheSize;
    case cudaDevAttrGlobalMemoryBusWidth:
      return p.memoryBusWidth;
    case cudaDevAttrAsyncEngineCount:
      return p.asyncEngineCount;
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrCanMapHostMemory:
    case cudaDevAttrConcurrentKernels:
    case cudaDevAttrStreamPrioritiesSupported:
    case cudaDevAttrGlobalL1CacheSupported:
    case cudaDevAttrLocalL1CacheSupported:
    case cudaDevAttrComputePreemptionSupported:
    case cudaDevAttrCanUseHostPointerForRegisteredMem:
    case cudaDevAttrCooperativeLaunch:
    case cudaDevAttrHostRegisterSupported:
    case cudaDevAttrMemoryPoolsSupported:
    case cudaDevAttrClusterLaunch:
      return 1;
    default:
      return 0;  // everything the stand-in does not model: absent
  }
}

// The stand-in's bus ids: device N is "0000:0N:00.0" (hex) in every process, so two processes
// given one emulated GPU agree that they share it.
bool parseBusId(const char* id, unsigned* bus) {
  unsigned domain = 0, b = 0, dev = 0, fn = 0;
  char tail = 0;
  if (std::sscanf(id, "%x:%x:%x.%x%c", &domain, &b, &dev, &fn, &tail) == 4 ||
      (domain = 0, std::sscanf(id, "%x:%x.%x%c", &b, &dev, &fn, &tail) == 3)) {
    *bus = b;
    return domain == 0 && dev == 0 && fn == 0;
  }
  return false;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  const ApiCall api(__func__);
  if (!count) return fail(cudaErrorInvalidValue);
  *count = state().deviceCount;
  return *count == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  const ApiCall api(__func__);
  if (!device) return fail(cudaErrorInvalidValue);
  if (state().deviceCount == 0) return fail(cudaErrorNoDevice);
  *device = currentOrdinal();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  const ApiCall api(__func__);
  if (state().deviceCount == 0) return fail(cudaErrorNoDevice);
  if (!deviceAt(device)) return fail(cudaErrorInvalidDevice);
  currentOrdinal() = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  const ApiCall api(__func__);
  if (!prop) return fail(cudaErrorInvalidValue);
  if (!deviceAt(device)) return fail(cudaErrorInvalidDevice);
  fillProperties(prop, device);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  const ApiCall api(__func__);
  if (!value) return fail(cudaErrorInvalidValue);
  if (!deviceAt(device)) return fail(cudaErrorInvalidDevice);
  cudaDeviceProp p;
  fillProperties(&p, device);
  *value = attribute(attr, p);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  const ApiCall api(__func__);
  if (!pciBusId || len <= 0) return fail(cudaErrorInvalidValue);
  if (!deviceAt(device)) return fail(cudaErrorInvalidDevice);
  std::snprintf(pciBusId, static_cast<size_t>(len), "%04x:%02x:%02x.0", 0, device, 0);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  const ApiCall api(__func__);
  if (!device || !pciBusId) return fail(cudaErrorInvalidValue);
  unsigned bus = 0;
  if (!parseBusId(pciBusId, &bus)) return fail(cudaErrorInvalidValue);
  if (bus >= static_cast<unsigned>(state().deviceCount)) return fail(cudaErrorInvalidDevice);
  *device = static_cast<int>(bus);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  const ApiCall api(__func__);
  if (!canAccessPeer) return fail(cudaErrorInvalidValue);
  if (!deviceAt(device) || !deviceAt(peerDevice)) return fail(cudaErrorInvalidDevice);
  *canAccessPeer = device != peerDevice;  // as CUDA: a device is not its own peer
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  const ApiCall api(__func__);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  if (flags != 0) return fail(cudaErrorInvalidValue);
  if (!deviceAt(peerDevice) || peerDevice == d->ordinal) return fail(cudaErrorInvalidDevice);
  std::lock_guard<std::mutex> lock(d->mu);
  if (d->peerEnabled[peerDevice]) return fail(cudaErrorPeerAccessAlreadyEnabled);
  d->peerEnabled[peerDevice] = true;
  return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  const ApiCall api(__func__);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  if (!deviceAt(peerDevice) || peerDevice == d->ordinal) return fail(cudaErrorInvalidDevice);
  std::lock_guard<std::mutex> lock(d->mu);
  if (!d->peerEnabled[peerDevice]) return fail(cudaErrorPeerAccessNotEnabled);
  d->peerEnabled[peerDevice] = false;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const ApiCall api(__func__);
  if (!free || !total) return fail(cudaErrorInvalidValue);
  Device* d = nullptr;
  if (cudaError_t rc = currentDevice(&d)) return fail(rc);
  struct sysinfo si {};
  sysinfo(&si);
  *total = static_cast<size_t>(si.totalram) * si.mem_unit;
  *free = static_cast<size_t>(si.freeram) * si.mem_unit;
  return cudaSuccess;
}

// The last error of this thread; a sticky error of the current device stays, as on a GPU.
cudaError_t cudaGetLastError(void) {
  const ApiCall api(__func__);
  cudaError_t rc = tlsLastError;
  tlsLastError = cudaSuccess;
  Device* d = nullptr;
  if (rc == cudaSuccess && currentDevice(&d) == cudaSuccess) rc = stickyError(*d);
  return rc;
}

cudaError_t cudaPeekAtLastError(void) {
  const ApiCall api(__func__);
  cudaError_t rc = tlsLastError;
  Device* d = nullptr;
  if (rc == cudaSuccess && currentDevice(&d) == cudaSuccess) rc = stickyError(*d);
  return rc;
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  const ApiCall api(__func__);
  if (!driverVersion) return fail(cudaErrorInvalidValue);
  *driverVersion = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  const ApiCall api(__func__);
  if (!runtimeVersion) return fail(cudaErrorInvalidValue);
  *runtimeVersion = CUDART_VERSION;
  return cudaSuccess;
}

// The driver functions Squeeze looks up (device/cuda/runtime.cc); anything else is not found,
// as cuGetProcAddress says of a symbol it does not have.
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  const ApiCall api(__func__);
  if (!symbol || !funcPtr) return fail(cudaErrorInvalidValue);
  if (flags &
      ~static_cast<unsigned long long>(cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream))
    return fail(cudaErrorInvalidValue);
  *funcPtr = nullptr;
  auto status = cudaDriverEntryPointSymbolNotFound;
  void* fn = nullptr;
  unsigned since = 0;
  if (!std::strcmp(symbol, "cuStreamWaitValue32")) {
    fn = streamWaitValue32Entry();
    since = 8000;
  } else if (!std::strcmp(symbol, "cuStreamWriteValue32")) {
    fn = streamWriteValue32Entry();
    since = 8000;
  } else if (!std::strcmp(symbol, "cuMemGetAddressRange")) {
    fn = memGetAddressRangeEntry();
    since = 3020;  // the _v2 signature (size_t sizes)
  }
  if (fn) {
    status = cudaVersion >= since ? cudaDriverEntryPointSuccess
                                  : cudaDriverEntryPointVersionNotSufficent;
    if (status == cudaDriverEntryPointSuccess) *funcPtr = fn;
  }
  if (driverStatus) *driverStatus = status;
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  const ApiCall api(__func__);
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

}  // extern "C"
