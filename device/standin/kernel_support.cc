// The stand-in's kernels' launching (kernel_support.h): a gpu* entry point's twin enqueued on
// the stream through standin::launch, after the pointer checks a GPU launch makes.
#include "device/standin/kernel_support.h"

#include "device/standin/standin.h"

namespace squeeze::device::standin_kernels {

// Enqueues `body` as kernel `kernel` on `stream`. An argument a GPU could not reach is found
// here, at launch, as the real launch would be, but reported where a GPU reports it: the body
// becomes one that throws, so the stream fails (sticky) when it gets there.
void enqueue(GpuStream stream, const char* kernel, const std::vector<Arg>& args,
             std::function<void()> body) {
  for (const Arg& a : args) {
    if (!a.ptr || a.count == 0 || standin::isDeviceAccessible(a.ptr)) continue;
    body = [message = strCat(kernel, ": argument `", a.name, "` (", a.ptr,
                             ") is pageable host memory: a GPU kernel cannot ",
                             a.writes ? "write" : "read", " it")] {
      raise(ErrorCode::kCuda, message);
    };
    break;
  }
  cuda::check(standin::launch(stream, kernel, std::move(body)),
              strCat("launching ", kernel).c_str());
}

// The rest of a .cu entry point's launches, where the twin does the work in one: enqueued to
// do nothing, so the stand-in's counts are the GPU's (a CUB algorithm counts as one launch).
void launchRest(GpuStream stream, const std::vector<const char*>& kernels) {
  for (const char* kernel : kernels) enqueue(stream, kernel, {}, [] {});
}

// The deferred-sums form of quantize.cu's, sparse.cu's and handle_kernels.cu's norms: enqueues
// sum(&in, &sent) (each from 0) as `kernel`, then adds in and sent to deviceSums[0..1] on the
// stream; nothing waits.
void enqueueAddingSums(GpuStream stream, const char* kernel, std::vector<Arg> args,
                       double* deviceSums, std::function<void(double*, double*)> sum) {
  args.push_back({"deviceSums", deviceSums, 2});
  enqueue(stream, kernel, args, [=] {
    double in = 0, sent = 0;
    sum(&in, &sent);
    deviceSums[0] += in;
    deviceSums[1] += sent;
  });
}

// Copies a result the body left in device memory back to the host, on the stream.
void copyBack(void* host, const void* device, size_t bytes, GpuStream stream) {
  cuda::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync (a kernel's result)");
}

bool indicesBelow(const uint32_t* idx, size_t k, size_t n) {
  for (size_t j = 0; j < k; ++j)
    if (idx[j] >= n) return false;
  return true;
}

}  // namespace squeeze::device::standin_kernels
