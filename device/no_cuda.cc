// A build without CUDA: the device backends exist as names so that the communicator and the
// API need not ask, but they cannot be made, and say why. Nothing else in them ever runs.
#include <string>

#include "base/strings.h"
#include "device/call_queue.h"
#include "device/context.h"
#include "device/stream_collectives.h"

namespace squeeze::device {
namespace {

[[noreturn]] void refuse(const std::string& who) {
  raise(ErrorCode::kInvalidUsage, who,
        "a call on device buffers, but this build of Squeeze has "
        "no CUDA support (rebuild with the CUDA toolkit installed).");
}

}  // namespace

struct CallQueue::Cuda {};

void* HostCopies::at(const void*) const { return nullptr; }
CallQueue::CallQueue(int device, uint64_t, int rank, size_t, int,
                     std::function<void(const Error&)> fail)
    : device_(device), rank_(rank), timeoutMs_(0), stagingBytes_(0), fail_(std::move(fail)) {
  refuse(strCat("rank ", rank_, ": "));
}
CallQueue::~CallQueue() = default;
void CallQueue::enqueue(GpuStream, const std::vector<DeviceSpan>&,
                        std::function<void(const HostCopies&)>, std::string) {
  refuse(strCat("rank ", rank_, ": "));
}
void CallQueue::copyOnStream(GpuStream, void*, const void*, size_t, const std::string&) {
  refuse(strCat("rank ", rank_, ": "));
}
bool CallQueue::onProgressThread() const { return false; }
void CallQueue::drain() {}
void CallQueue::abort() {}
void CallQueue::stopThread() {}

struct StreamCollectives::Cuda {};

bool StreamCollectives::available(std::string* why) {
  if (why) *why = "this build of Squeeze has no CUDA support";
  return false;
}
StreamCollectives::StreamCollectives(int device, int rank, int nranks, size_t capacity, int,
                                     std::function<void(const Error&)>)
    : device_(device), rank_(rank), nranks_(nranks), capacity_(capacity), timeoutMs_(0) {
  refuse(strCat("rank ", rank_, ": "));
}
StreamCollectives::~StreamCollectives() = default;
WindowExport StreamCollectives::exportWindow() const { return {}; }
void StreamCollectives::connect(const std::vector<WindowExport>&, Peers) {}
bool StreamCollectives::runs(CollKind) { return false; }
void StreamCollectives::enqueue(GpuStream, const CollRequest&, const std::string&) {
  refuse(strCat("rank ", rank_, ": "));
}
void StreamCollectives::enqueueSendRecv(GpuStream, const std::vector<Message>&,
                                        const std::string&) {
  refuse(strCat("rank ", rank_, ": "));
}
void StreamCollectives::release() {}
void StreamCollectives::stopWatcher() {}

std::unique_ptr<Context> makeCudaContext(int, GpuStream) { refuse(""); }
std::unique_ptr<Context> makeFollowingCudaContext(int) { refuse(""); }
std::unique_ptr<Context> makeCodecContext(int) { refuse(""); }
void parkCodecContext(std::unique_ptr<Context>) {}

}  // namespace squeeze::device
