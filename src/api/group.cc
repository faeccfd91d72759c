// The C API's point-to-point calls and the groups that batch them: sqzSend and sqzRecv run at
// once outside a group; between sqzGroupStart and the outermost sqzGroupEnd (per thread,
// nesting) they are queued per communicator and run there, each communicator's as one unit.
#include <vector>

#include "api/api_checks.h"

using namespace squeeze;
using namespace squeeze::api;

namespace {

// This thread's open groups: queued send/recv calls per communicator, in first-use order, with
// where their buffers are (a group runs at once on host buffers, or is enqueued as one unit on
// its stream for device buffers).
struct GroupCalls {
  sqzComm* comm;
  std::vector<P2pCall> calls;
  bool device;
  void* stream;
};
thread_local int tlsGroupDepth = 0;
thread_local std::vector<GroupCalls> tlsGroup;

void queueP2p(sqzComm_t comm, bool isSend, void* buf, size_t count, sqzDataType_t datatype,
              int peer, void* stream, const char* fn) {
  checkCommon(comm, count, count, datatype, fn);
  if (count > 0 && !buf) raise(ErrorCode::kInvalidArgument, fn, ": buffer is NULL with count ", count, ".");
  if (peer < 0 || peer >= comm->impl->size())
    raise(ErrorCode::kInvalidArgument, fn, ": peer ", peer, " is out of range for ",
          comm->impl->size(), " ranks.");
  P2pCall call{isSend, peer, buf, count * dataTypeSize(static_cast<DataType>(datatype))};
  const bool device = onDevice(comm, {{isSend ? "sendbuff" : "recvbuff", buf, call.bytes}},
                               stream, fn);
  if (tlsGroupDepth == 0) return dispatch(comm, std::vector<P2pCall>{call}, device, stream);
  for (GroupCalls& g : tlsGroup)
    if (g.comm == comm) {
      if (device != g.device || (device && stream != g.stream))
        raise(ErrorCode::kInvalidArgument, fn, ": this group already holds ",
              g.device ? "device" : "host", " sends or receives on this communicator",
              g.device ? " on another stream" : "", "; a group's calls on one communicator "
              "must all be host memory, or all device memory on one stream.");
      g.calls.push_back(call);
      return;
    }
  tlsGroup.push_back({comm, {call}, device, stream});
}

}  // namespace

extern "C" {

sqzResult_t sqzSend(const void* sendbuff, size_t count, sqzDataType_t datatype, int peer,
                    sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    queueP2p(comm, true, const_cast<void*>(sendbuff), count, datatype, peer, stream, "sqzSend");
  });
}

sqzResult_t sqzRecv(void* recvbuff, size_t count, sqzDataType_t datatype, int peer,
                    sqzComm_t comm, void* stream) {
  return apiGuard(comm, [&] {
    queueP2p(comm, false, recvbuff, count, datatype, peer, stream, "sqzRecv");
  });
}

sqzResult_t sqzGroupStart(void) {
  return apiGuard(nullptr, [&] { ++tlsGroupDepth; });
}

sqzResult_t sqzGroupEnd(void) {
  if (tlsGroupDepth == 0)
    return apiGuard(nullptr, [&] {
      raise(ErrorCode::kInvalidUsage, "sqzGroupEnd without a matching sqzGroupStart.");
    });
  if (--tlsGroupDepth > 0) return sqzSuccess;
  auto group = std::move(tlsGroup);
  tlsGroup.clear();
  sqzResult_t first = sqzSuccess;
  for (GroupCalls& g : group) {
    sqzResult_t rc = apiGuard(g.comm, [&] {
      checkComm(g.comm, "sqzGroupEnd");
      dispatch(g.comm, g.calls, g.device, g.stream);
    });
    if (first == sqzSuccess) first = rc;
  }
  return first;
}

}  // extern "C"
