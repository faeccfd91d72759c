// The argument checks of api_checks.h, and the hand-off of a checked call to the communicator.
#include "api/api_checks.h"

#include <cstdint>

#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include "device/cuda/runtime.h"
#endif

namespace squeeze::api {

sqzComm* checkComm(sqzComm_t comm, const char* fn) {
  if (!comm)
    raise(ErrorCode::kInvalidArgument, fn, ": comm is NULL; create one with sqzCommInitRank.");
  if (comm->magic != kCommMagic || !comm->impl)
    raise(ErrorCode::kInvalidArgument, fn, ": comm is not a live communicator (destroyed, or "
          "not from sqzCommInitRank).");
  return comm;
}

void checkType(sqzDataType_t t, const char* fn) {
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= sqzNumTypes)
    raise(ErrorCode::kInvalidArgument, fn, ": datatype ", static_cast<int>(t),
          " is not a sqzDataType_t (use sqzInt8 .. sqzBfloat16).");
}

void checkOp(sqzRedOp_t op, const char* fn) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= sqzNumOps)
    raise(ErrorCode::kInvalidArgument, fn, ": op ", static_cast<int>(op),
          " is not a sqzRedOp_t (use sqzSum, sqzProd, sqzMax, sqzMin or sqzAvg).");
}

void checkCount(size_t count, const char* fn) {
  if (count > kMaxCount)
    raise(ErrorCode::kInvalidArgument, fn, ": count ", count, " (", static_cast<long long>(count),
          " as a signed number) is not a valid element count; was a negative value passed?");
}

void checkCommon(sqzComm_t comm, size_t count, size_t total, sqzDataType_t datatype,
                 const char* fn) {
  checkComm(comm, fn);
  checkCount(count, fn);
  checkCount(total, fn);
  checkType(datatype, fn);
}

void checkBuffers(const void* sendbuff, const void* recvbuff, size_t count, const char* fn) {
  if (count > 0 && (!sendbuff || !recvbuff))
    raise(ErrorCode::kInvalidArgument, fn, ": ", !sendbuff ? "sendbuff" : "recvbuff",
          " is NULL with count ", count, ".");
}

void checkOverlap(const BufferArg& send, const BufferArg& recv, std::ptrdiff_t inPlaceOffset,
                  const char* inPlace, const char* fn) {
  if (!send.ptr || !recv.ptr || send.bytes == 0 || recv.bytes == 0) return;
  const auto s = reinterpret_cast<uintptr_t>(send.ptr);
  const auto r = reinterpret_cast<uintptr_t>(recv.ptr);
  if (s >= r + recv.bytes || r >= s + send.bytes) return;  // disjoint
  if (inPlace && s == r + static_cast<uintptr_t>(inPlaceOffset)) return;
  raise(ErrorCode::kInvalidArgument, fn, ": ", send.name, " (", send.bytes, " bytes) and ",
        recv.name, " (", recv.bytes, " bytes) overlap: ", send.name, " starts ",
        s >= r ? strCat(s - r, " bytes after ") : strCat(r - s, " bytes before "), recv.name, "; ",
        inPlace ? strCat("the only overlap defined is in place (", inPlace, "), so pass that "
                         "or buffers that do not overlap.")
                : std::string("this call cannot run in place: pass buffers that do not overlap."),
        " Nothing was sent or written.");
}

bool onDevice(sqzComm_t comm, std::initializer_list<BufferArg> buffers, void* stream,
              const char* fn) {
#if SQZ_HAVE_CUDA
  const BufferArg* first = nullptr;  // the first buffer the call touches
  const BufferArg* checked = nullptr;  // the last one asked about
  bool device = false;
  for (const BufferArg& b : buffers) {
    if (!b.ptr || b.bytes == 0) continue;
    // In place: the driver was just asked about this pointer, for as many bytes or more.
    if (checked && b.ptr == checked->ptr && b.bytes <= checked->bytes) continue;
    checked = &b;
    const cuda::PointerInfo info = cuda::pointerInfo(b.ptr);
    if (first && info.device != device)
      raise(ErrorCode::kInvalidArgument, fn, ": ", first->name, " is ",
            device ? "device" : "host", " memory but ", b.name, " is ",
            info.device ? "device" : "host", " memory; a call's buffers must all be on the "
            "communicator's GPU, or all in host memory.");
    if (!first) first = &b;
    device = info.device;
    if (!info.device) continue;
    const int commDevice = comm->impl->config().device;
    if (info.ordinal != commDevice)
      raise(ErrorCode::kInvalidArgument, fn, ": ", b.name, " is memory of GPU ", info.ordinal,
            " but the communicator runs on GPU ", commDevice, " (the device current at "
            "sqzCommInitRank, or sqzConfig_t.device); pass buffers of that GPU.");
    const size_t room = cuda::bytesToAllocationEnd(b.ptr);
    if (room < b.bytes)
      raise(ErrorCode::kInvalidArgument, fn, ": ", b.name, " has ", room, " bytes from the "
            "pointer to the end of its allocation; the call needs ", b.bytes, ".");
  }
  // A call that touches no memory (count 0) with a stream is a device call that moves nothing:
  // it is enqueued to keep its place in the order of calls, as NCCL does.
  if (!first && stream && comm->impl->config().device >= 0) device = true;
  if (!device) {
    if (stream)
      raise(ErrorCode::kInvalidArgument, fn, ": stream is set but the buffers are host memory; "
            "pass stream NULL for host buffers (the call then returns when it is done), or "
            "device buffers.");
    return false;
  }
  const int streamDevice = cuda::streamDevice(static_cast<cudaStream_t>(stream));
  if (streamDevice != comm->impl->config().device)
    raise(ErrorCode::kInvalidArgument, fn, ": the stream belongs to GPU ", streamDevice,
          " but the communicator and its buffers are on GPU ", comm->impl->config().device,
          "; pass a stream of that GPU.");
  // A device call's stream program waits for words that count calls: recorded into a graph, a
  // replay would find them already reached and copy out stale data.
  if (cuda::streamCapturing(static_cast<cudaStream_t>(stream)))
    raise(ErrorCode::kInvalidUsage, fn, ": the stream is capturing a CUDA graph, and Squeeze's "
          "device calls cannot be captured (a replay would not wait for the peers and would "
          "return stale data). Nothing was enqueued; make the call outside the capture "
          "(PyTorch: leave the collective out of the graphed region).");
  return true;
#else
  (void)comm;
  (void)buffers;
  if (stream)
    raise(ErrorCode::kInvalidArgument, fn, ": stream must be NULL: this build of Squeeze has no "
          "CUDA support (host memory only; rebuild with the CUDA toolkit for device buffers).");
  return false;
#endif
}

void dispatch(sqzComm_t comm, const CollRequest& req, bool device, void* stream) {
  if (device)
    comm->impl->enqueueCollective(req, stream);
  else
    comm->impl->collective(req);
}
void dispatch(sqzComm_t comm, const std::vector<P2pCall>& calls, bool device, void* stream) {
  if (device)
    comm->impl->enqueueSendRecv(calls, stream);
  else
    comm->impl->sendRecv(calls);
}

}  // namespace squeeze::api
