// The argument checks the C API's families of calls share (communicator, datatype, operator,
// counts, buffers, and whether the buffers are host or device memory), the hand-off that runs a
// checked call now or enqueues it on its stream, and whether a communicator handle is still
// alive. Each check raises InvalidArgument with a sentence naming the call (`fn`); apiGuard turns
// it into the call's result.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "algorithms/algorithm.h"
#include "api/api_guard.h"
#include "base/types.h"
#include "squeeze/squeeze.h"

namespace squeeze::api {

// Counts above this are negative numbers cast to size_t, or more memory than exists.
constexpr size_t kMaxCount = size_t(1) << 56;

sqzComm* checkComm(sqzComm_t comm, const char* fn);
void checkType(sqzDataType_t t, const char* fn);
void checkOp(sqzRedOp_t op, const char* fn);
void checkCount(size_t count, const char* fn);
// The checks every data call makes: a live comm, a sane count (and total, for calls that move
// nranks blocks), a datatype.
void checkCommon(sqzComm_t comm, size_t count, size_t total, sqzDataType_t datatype,
                 const char* fn);
void checkBuffers(const void* sendbuff, const void* recvbuff, size_t count, const char* fn);

// One buffer of a data call: what it is called in the API and the bytes the call touches.
struct BufferArg {
  const char* name;
  const void* ptr;
  size_t bytes;
};

// Refuses send and receive buffers that overlap in any layout but the call's one in-place layout
// (sendbuff == recvbuff + inPlaceOffset bytes; `inPlace` says it in the API's words): the call
// would read what it has already written, and return success with wrong data. Nothing is sent.
// A buffer that is null or 0 bytes long overlaps nothing. AlltoAll has no in-place layout
// (inPlace null).
void checkOverlap(const BufferArg& send, const BufferArg& recv, std::ptrdiff_t inPlaceOffset,
                  const char* inPlace, const char* fn);

// Whether a call's buffers are device memory (the call is enqueued on `stream`) or host memory
// (it runs now; stream must be NULL). Buffers the call does not touch (null, or 0 bytes) do not
// count. Refuses, before anything is enqueued, every mix the call cannot run with.
bool onDevice(sqzComm_t comm, std::initializer_list<BufferArg> buffers, void* stream,
              const char* fn);

// Runs a checked call now (host buffers) or enqueues it on the stream (device buffers).
void dispatch(sqzComm_t comm, const CollRequest& req, bool device, void* stream);
void dispatch(sqzComm_t comm, const std::vector<P2pCall>& calls, bool device, void* stream);

// Whether the handle is a communicator not yet destroyed or aborted (comm.cc keeps the set), so
// a codec can tell whether the one it was made on still is: sqzCodecDestroy after
// sqzCommDestroy must not touch the freed handle.
bool commIsLive(const sqzComm* comm);

// Makes every live codec made on `from` (or moved to it) a codec of `to`, with its state as it
// is (codec.cc keeps the set): sqzCommShrink's and sqzCommGrow's survivors carry on with theirs.
void moveCodecs(const sqzComm* from, sqzComm* to);

}  // namespace squeeze::api
