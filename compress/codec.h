// The chunk codec: what a chunk looks like on the wire and what "combine" means. The executor
// calls it at each step of a schedule; algorithms never see it (DESIGN.md, "Layers").
//
// A chunk is `count` consecutive elements of the tensor starting at element `at.offset`. Calls:
//   encode        a partial or final result -> payload (what travels)
//   decode        payload -> values (once per rank, for final payloads)
//   combine       out = local (op) decode(payload), fused in one pass (out may alias local)
//   encodeFeedback  encode, and add what the payload drops (x - decode(encode(x))) to the
//                 error-feedback residual of the same elements: the one error-feedback mechanism
//                 every codec shares (DESIGN.md, "Nothing is lost, only delayed - globally").
// Decoders see bytes from the network: they check the payload's size and every index before
// use and raise ErrorCode::kRemote on a malformed payload (raiseMalformed, below); they never
// read or write out of bounds (tests/fuzz/fuzz_codec.cc checks this for every codec).
//
// Lossy codecs take float32 and sum/avg (CodecHandle checks before a call starts); avg's
// division happens after decode, so they only ever add.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/error.h"
#include "base/types.h"
#include "base/wire.h"
#include "device/context.h"

namespace squeeze {

// Where a chunk sits, which call it belongs to, and where its bytes are and its work runs.
struct ChunkInfo {
  size_t offset = 0;  // element offset of the chunk in the tensor
  uint64_t call = 0;  // the codec's call number: the same on every rank (shared random seeds)
  int rank = 0;       // this rank (per-rank random streams, e.g. stochastic rounding)
  int peer = -1;      // decode/combine: the rank the payload came from (-1: not known), for errors
  // The call's execution context: values and payloads are in its memory, and the codec's
  // kernels, copies and reads go through it (the calling thread's host context by default).
  device::Context* ctx = &device::hostContext();
};

// Raises kRemote for a payload from the network that does not parse: "rank P sent a malformed
// <codec> payload to rank R: <what>" ("a peer" when at.peer is not known). Every decoder says it
// this way, so a corrupt or hostile peer is named the same whatever the codec.
template <class... Args>
[[noreturn]] void raiseMalformed(const char* codec, const ChunkInfo& at, const Args&... what) {
  raise(ErrorCode::kRemote, at.peer >= 0 ? strCat("rank ", at.peer) : std::string("a peer"),
        " sent a malformed ", codec, " payload to rank ", at.rank, ": ", what...);
}

// The check of a payload whose size follows from the chunk alone (casts, quantizers, randk,
// dense): bytes must be `expected`, computed by the receiver from its own count.
inline void checkPayloadBytes(const char* codec, const ChunkInfo& at, size_t bytes, size_t expected,
                              size_t count) {
  if (bytes != expected)
    raiseMalformed(codec, at, bytes, " bytes for a chunk of ", count, " values; expected ",
                   expected);
}

// Moving payload bytes between the call's memory and the host: every codec's way is its
// context's copy (dst = src; src may be a host local, e.g. a header the host wrote into the
// payload) and read (host dst = src, then a wait, so the host may check what it read from the
// network at once). Both do nothing for bytes == 0 (an empty chunk's pointers may be null).
inline void copyPayload(void* dst, const void* src, size_t bytes, const ChunkInfo& at) {
  at.ctx->copy(dst, src, bytes);
}
inline void readPayload(void* dst, const void* src, size_t bytes, const ChunkInfo& at) {
  at.ctx->read(dst, src, bytes);
}

// Squared norms an encode saw: |x|^2 of its input and |decode(payload)|^2, for the gain. On a
// CUDA context an encode's may arrive only when the context next waits (device::Feedback).
using EncodeNorms = device::Norms;

class Codec {
 public:
  virtual ~Codec() = default;
  // Carried in every message header (a method's wire id, codecs.h): ranks that use different
  // codecs are told so.
  virtual uint8_t id() const = 0;
  // The id's name ("topk"): what errors and statistics call the codec.
  const char* name() const { return codecIdName(id()); }
  // True when a chunk's payload is exactly its values: the executor then sends straight from
  // and receives straight into the caller's buffers, with no encode or decode pass.
  virtual bool rawWire() const { return false; }
  // True when encodeFeedback's payload on ctx is always maxEncodedBytes(count) bytes (the casts
  // and the block quantizers everywhere; top-k on a GPU, which pads to k entries): a device
  // call's payloads can then be gathered on the caller's stream without the host learning their
  // sizes (CodecHandle::enqueueOnStream).
  virtual bool fixedPayload(const device::Context& ctx) const {
    (void)ctx;
    return false;
  }
  // An upper bound on encode's output for count values.
  virtual size_t maxEncodedBytes(size_t count, DataType dtype) const = 0;
  // Writes the payload for src[0..count); returns its size (<= maxEncodedBytes).
  virtual size_t encode(const void* src, size_t count, DataType dtype, const ChunkInfo& at,
                        void* payload) = 0;
  // dst[0..count) = the values the payload carries.
  virtual void decode(const void* payload, size_t bytes, size_t count, DataType dtype,
                      const ChunkInfo& at, void* dst) = 0;
  // out[i] = local[i] (op) value carried by the payload, fused (out may alias local).
  virtual void combine(void* out, const void* local, const void* payload, size_t bytes,
                       size_t count, DataType dtype, RedOp op, const ChunkInfo& at) = 0;

  // Sparsifiers (topk, randk): the fraction of values sent from the next call on; false for a
  // codec without that knob. Adaptive methods (GraVAC, Accordion) turn it between calls.
  virtual bool setRatio(double ratio) {
    (void)ratio;
    return false;
  }

  // encode, then residual[i] += src[i] - decode(payload)[i] when residual is not null, and the
  // norms for the gain. The default decodes into a scratch buffer; a codec may fuse it.
  // The pieces of one call may encode concurrently (SQZ_ENCODE_THREADS, core/encode_pool.h), each
  // with its own ChunkInfo::ctx: an encode writes no codec member, only its payload, its
  // residual range, *norms and its context's scratch.
  virtual size_t encodeFeedback(const void* src, size_t count, DataType dtype,
                                const ChunkInfo& at, void* payload, float* residual,
                                EncodeNorms* norms);
};

// The process-wide stateless dense codec, used when the caller gives none.
Codec& denseCodec();

// One compressed call's view of its codec handle, for the executor (null for plain calls).
struct CodecCall {
  uint64_t call = 0;         // ChunkInfo::call
  float* residual = nullptr; // error-feedback residual, indexed by element; null: off
  // Accumulated by the executor over the call.
  uint64_t wireBytes = 0;    // payload bytes this rank sent
  uint64_t denseBytes = 0;   // what the same sends would have been uncompressed
  EncodeNorms norms;
  double encodeSeconds = 0, combineSeconds = 0, decodeSeconds = 0;
};

}  // namespace squeeze
