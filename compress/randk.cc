// Random-k sparsification (seed 000's sparse communication with a random instead of a top-k
// choice; what is not sent stays in the error-feedback residual, "accumulate the unpruned part
// to the gradient"): per chunk, k = max(1, ceil(ratio * count)) indices are picked by a
// counter-based hash of (seed, ChunkInfo::call, chunk offset), NOT of the rank, so every rank and
// every hop picks the same indices for the same chunk of the same call: payloads add directly,
// combine is a scatter-add of k values, and a re-encoded partial sum carries the same k indices
// (each sent element is the exact sum of what the ranks contributed there).
//
// Selection (device/sparse.h, cpuRandomStrata): one index from each of k equal strata of the
// chunk, so the k indices are distinct and ascending; each element is picked with probability
// ~k/count. Values are sent as they are (not rescaled by count/k): error feedback carries the
// rest to later calls.
// Keys: ratio (default 0.01, in (0, 1]), seed (default 0).
// Payload: the k values only, f32, 4k bytes (the indices are implied); 4k <= 4 count always.
// Round trip: picked values are exact, the rest decode to 0.
// Device calls draw the indices into device scratch with the CUDA twin (the same indices) and
// gather, scatter and feed back with the CUDA kernels: the same payloads and residual.
#include <limits>
#include <vector>

#include "base/error.h"
#include "compress/codecs.h"
#include "compress/topk.h"
#include "device/handle_kernels.h"
#include "device/sparse.h"
#include "squeeze_config.h"

namespace squeeze {
namespace {

// randk's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kRandkId = 8;

class RandkCodec final : public Codec {
 public:
  RandkCodec(double ratio, uint64_t seed) : ratio_(ratio), seed_(seed) {}
  uint8_t id() const override { return kRandkId; }
  // Its k values, always: the indices are drawn from the seed, the call and the offset. (On the
  // caller's stream, ranks with different seeds are told by the call words' 24 bits of the
  // spec's hash: the payloads alone would decode at the wrong indices.)
  bool fixedPayload(const device::Context&) const override { return true; }
  bool setRatio(double ratio) override {
    ratio_ = ratio;
    return true;
  }
  size_t maxEncodedBytes(size_t count, DataType) const override {
    return 4 * keepCount(ratio_, count);
  }
  size_t encode(const void* src, size_t count, DataType, const ChunkInfo& at,
                void* payload) override {
    const size_t k = keepCount(ratio_, count);
    at.ctx->gather(static_cast<const float*>(src), pick(count, k, at), k,
               static_cast<float*>(payload));
    return 4 * k;
  }
  void decode(const void* payload, size_t bytes, size_t count, DataType, const ChunkInfo& at,
              void* dst) override {
    const size_t k = check(bytes, count, at);
    at.ctx->densify(pick(count, k, at), static_cast<const float*>(payload), k,
               static_cast<float*>(dst), count);
  }
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType, RedOp, const ChunkInfo& at) override {
    const size_t k = check(bytes, count, at);
    at.ctx->scatterAdd(static_cast<float*>(out), static_cast<const float*>(local),
               count, pick(count, k, at), static_cast<const float*>(payload), k);
  }
  size_t encodeFeedback(const void* src, size_t count, DataType, const ChunkInfo& at, void* payload,
                        float* residual, EncodeNorms* norms) override {
    const float* x = static_cast<const float*>(src);
    const size_t k = keepCount(ratio_, count);
    // The values and the feedback in one (on the host one pass over x and the residual). The
    // norms go straight to *norms: on a GPU they arrive when the context next waits.
    at.ctx->gatherFeedback(x, count, pick(count, k, at), k, static_cast<float*>(payload),
                           residual, norms ? &norms->inputSq : nullptr,
                           norms ? &norms->sentSq : nullptr);
    return 4 * k;
  }

 private:
  // The chunk's k indices, in the context's scratch (valid until its next use).
  const uint32_t* pick(size_t count, size_t k, const ChunkInfo& at) const {
    SQZ_ENFORCE(count <= std::numeric_limits<uint32_t>::max(), "randk chunk of ", count,
                " values is too large for 32-bit indices");
    auto* idx = reinterpret_cast<uint32_t*>(
        at.ctx->scratch(device::Context::Slot::kIndices, k * sizeof(uint32_t)));
    at.ctx->randomStrata(seed_, at.call, at.offset, count, k, idx);
    return idx;
  }
  size_t check(size_t bytes, size_t count, const ChunkInfo& at) const {
    const size_t k = keepCount(ratio_, count);
    if (bytes != 4 * k)
      raiseMalformed("randk", at, bytes, " bytes for a chunk of ", count, " values; expected ",
                     4 * k, " (", k, " values: is the other rank's ratio the same?)");
    return k;
  }
  double ratio_;
  uint64_t seed_;
};

std::unique_ptr<Codec> makeRandkCodec(const CodecSpec& spec) {
  const double ratio = spec.getRatio(0.01);
  const double seed = spec.getWhole("seed", 0, 0, 9007199254740992.0);
  return std::make_unique<RandkCodec>(ratio, static_cast<uint64_t>(seed));
}

}  // namespace

SQZ_CODEC_METHODS(randk) {
  addCodecMethod(chunkMethod<makeRandkCodec>(
      "randk", kRandkId, "ratio,seed",
      "k shared random indices per chunk; payloads add exactly", true));
}

}  // namespace squeeze
