// A build without CUDA: the device backends exist as names so that the communicator and the
// API need not ask, but they cannot be made, and say why. Nothing else in them ever runs.
#include <string>

#include "base/strings.h"
#include "device/call_queue.h"
#include "device/context.h"

namespace squeeze::device {
namespace {

[[noreturn]] void refuse(const std::string& who) {
  raise(ErrorCode::kInvalidUsage, who,
        "a call on device buffers, but this build of Squeeze has "
        "no CUDA support (rebuild with the CUDA toolkit installed).");
}

}  // namespace

struct CallQueue::Cuda {};

CallQueue::CallQueue(int device, int rank, std::function<void(const Error&)> fail,
                     std::function<void(GpuStream)>)
    : device_(device), rank_(rank), fail_(std::move(fail)) {
  refuse(strCat("rank ", rank_, ": "));
}
CallQueue::~CallQueue() = default;
GpuStream CallQueue::stream() const { return nullptr; }
void CallQueue::enqueue(GpuStream, std::function<void()>, std::string) {
  refuse(strCat("rank ", rank_, ": "));
}
void CallQueue::copyOnStream(GpuStream, void*, const void*, size_t, const std::string&) {
  refuse(strCat("rank ", rank_, ": "));
}
bool CallQueue::onProgressThread() const { return false; }
void CallQueue::drain() {}
void CallQueue::abort() {}
void CallQueue::stopThread() {}

std::unique_ptr<Context> makeCudaContext(int, GpuStream) { refuse(""); }

}  // namespace squeeze::device
