// Loads every Squeeze kernel into the current device's context before any caller's stream can
// be held waiting for a call (launch.cuh: each kernel file registers its module here).
//
// Why: since CUDA 12.2 the runtime loads kernels lazily, on first launch, and loading one may
// need the whole context to synchronize. A call on device buffers holds the caller's stream
// (cuStreamWaitValue32 on the call's ticket, device/call_queue.h) until the progress thread has
// run it; a first launch on that thread would then wait for the held stream, which waits for
// the call: every rank's first device call hung so on an H100 (gpu-runs/2026-11-26-h100). So
// gpuPrepareThread, which runs where waiting for the device is allowed, loads each registered
// module's functions (cuModuleEnumerateFunctions, cuFuncLoad; CUDA 12.4). cuBLAS's kernels are
// its own and are not covered (device/cuda/linalg.cu).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <set>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "device/cuda/driver_entry.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"

namespace squeeze::device {
namespace {

struct KernelModule {
  const void* anchor;  // a kernel of the module, as the host sees it (its stub's address)
  const char* file;
};

std::vector<KernelModule>& kernelModules() {
  static std::vector<KernelModule> modules;
  return modules;
}

std::mutex& modulesMutex() {
  static std::mutex mu;
  return mu;
}

using FuncGetModuleFn = CUresult (*)(CUmodule*, CUfunction);
using ModuleGetFunctionCountFn = CUresult (*)(unsigned int*, CUmodule);
using ModuleEnumerateFunctionsFn = CUresult (*)(CUfunction*, unsigned int, CUmodule);
using FuncLoadFn = CUresult (*)(CUfunction);
using ModuleGetLoadingModeFn = CUresult (*)(CUmoduleLoadingMode*);

void checkDriver(CUresult rc, const char* call, const char* file) {
  if (rc != CUDA_SUCCESS)
    raise(ErrorCode::kCuda, call, " failed (CUresult ", static_cast<int>(rc),
          ") while loading the kernels of ", file);
}

}  // namespace

bool registerKernelModule(const void* anchor, const char* file) {
  std::lock_guard<std::mutex> lock(modulesMutex());
  kernelModules().push_back({anchor, file});
  return true;
}

void loadKernelModules() {
  static std::set<int> loaded;  // devices whose context has every module loaded
  std::lock_guard<std::mutex> lock(modulesMutex());
  const int dev = cuda::currentDevice();
  if (loaded.count(dev)) return;
  static const auto mode =
      cuda::driverEntry<ModuleGetLoadingModeFn>("cuModuleGetLoadingMode", 11070);
  CUmoduleLoadingMode loading = CU_MODULE_LAZY_LOADING;
  if (mode && mode(&loading) == CUDA_SUCCESS && loading == CU_MODULE_EAGER_LOADING) {
    loaded.insert(dev);
    return;
  }
  static const auto getModule = cuda::driverEntry<FuncGetModuleFn>("cuFuncGetModule", 11000);
  static const auto count =
      cuda::driverEntry<ModuleGetFunctionCountFn>("cuModuleGetFunctionCount", 12040);
  static const auto enumerate =
      cuda::driverEntry<ModuleEnumerateFunctionsFn>("cuModuleEnumerateFunctions", 12040);
  static const auto load = cuda::driverEntry<FuncLoadFn>("cuFuncLoad", 12040);
  if (!getModule || !count || !enumerate || !load) {
    loaded.insert(dev);
    SQZ_WARN(kDevice,
             "this CUDA driver cannot load kernels ahead of use (cuFuncLoad needs 12.4):"
             " a call on device buffers may hang the first time it runs a kernel; set "
             "CUDA_MODULE_LOADING=EAGER in the environment to avoid it");
    return;
  }
  size_t functions = 0;
  for (const KernelModule& m : kernelModules()) {
    cudaFunction_t anchor = nullptr;
    cuda::check(cudaGetFuncBySymbol(&anchor, m.anchor),
                strCat("cudaGetFuncBySymbol for the kernels of ", m.file).c_str());
    CUmodule module = nullptr;
    checkDriver(getModule(&module, reinterpret_cast<CUfunction>(anchor)), "cuFuncGetModule",
                m.file);
    unsigned n = 0;
    checkDriver(count(&n, module), "cuModuleGetFunctionCount", m.file);
    std::vector<CUfunction> all(n);
    checkDriver(enumerate(all.data(), n, module), "cuModuleEnumerateFunctions", m.file);
    for (CUfunction f : all) checkDriver(load(f), "cuFuncLoad", m.file);
    functions += n;
  }
  loaded.insert(dev);
  SQZ_DEBUG(kDevice, "loaded ", functions, " kernels of ", kernelModules().size(),
            " files on device ", dev);
}

}  // namespace squeeze::device
