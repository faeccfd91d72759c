// The context of a communicator's compressed calls on its callers' streams (device/context.h:
// makeCodecContext), and where it waits once its communicator is gone. Freeing it (its pinned
// slots, kernel scratch, cuBLAS handle) makes calls that may wait for the whole device (cudaFree,
// cudaFreeHost, cublasDestroy), which a communicator's destroy must not make: a stream in this
// process may be held by a peer's call. So a parked context is freed by the next set-up, where
// waiting is allowed, once the work it enqueued has run.
#include <memory>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "device/context.h"

namespace squeeze::device {
namespace {

std::mutex& parkedMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<std::unique_ptr<Context>>& parked() {
  static auto* contexts = new std::vector<std::unique_ptr<Context>>;  // never destroyed: exit
  return *contexts;                                                    // runs no CUDA call
}

// Its last work has run (a failed kernel has run too).
bool through(Context& ctx) {
  try {
    return ctx.reached(ctx.marked());
  } catch (const Error&) {
    return true;
  }
}

}  // namespace

std::unique_ptr<Context> makeCodecContext(int device) {
  {
    std::lock_guard<std::mutex> lock(parkedMutex());
    std::erase_if(parked(), [](const std::unique_ptr<Context>& c) { return through(*c); });
  }
  std::unique_ptr<Context> ctx = makeFollowingCudaContext(device);
  ctx->prepareSlots();
  ctx->wait("preparing the context of compressed calls on device buffers");
  return ctx;
}

void parkCodecContext(std::unique_ptr<Context> ctx) {
  if (!ctx) return;
  std::lock_guard<std::mutex> lock(parkedMutex());
  parked().push_back(std::move(ctx));
}

}  // namespace squeeze::device
