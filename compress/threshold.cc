// Threshold sparsification (seed 000's sparse communication with a fixed cut instead of a fixed
// k): every value with |v| >= threshold travels as an (index, value) pair, the rest stays in the
// error-feedback residual ("accumulate the unpruned part to the gradient"). Reduced in flight
// like topk: combine scatter-adds into the dense local chunk and each hop re-applies the
// threshold to its partial sum; what a hop drops goes to that hop's residual.
//
// Key: threshold (required, > 0). Zeros are never sent. NaN counts as above any threshold.
// Payload: topk.h's sparse format (8-byte header, u32 indices, f32 values), or dense (header +
// count floats) when that is not larger, so maxEncodedBytes = 4 count + 8 (the dense size plus
// the header): unlike topk the volume is not bounded by a k, only by the chunk.
// Round trip: sent values are exact, the rest decode to 0: |x - D(C(x))| < threshold per value.
// Device calls select with the CUDA twin (device/sparse.h), straight into the payload: the same
// indices, the same payloads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/error.h"
#include "compress/codecs.h"
#include "compress/topk.h"
#include "device/sparse.h"
#include "squeeze_config.h"

namespace squeeze {
namespace {

// threshold's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kThresholdId = 9;

class ThresholdCodec final : public Codec {
 public:
  explicit ThresholdCodec(double threshold) {
    // The smallest float >= threshold, as a magnitude key: |x| >= threshold exactly, in keys.
    float t = static_cast<float>(threshold);
    if (double(t) < threshold) t = std::nextafter(t, std::numeric_limits<float>::infinity());
    minKey_ = std::max<uint32_t>(1, device::magnitudeKey(t));
  }
  uint8_t id() const override { return kThresholdId; }
  size_t maxEncodedBytes(size_t count, DataType) const override {
    return sparse::kHeaderBytes + 4 * count;
  }
  size_t encode(const void* src, size_t count, DataType, const ChunkInfo& at,
                void* payload) override {
    return write(static_cast<const float*>(src), count, at, payload).bytes;
  }
  void decode(const void* payload, size_t bytes, size_t count, DataType, const ChunkInfo& at,
              void* dst) override {
    sparse::decode(sparse::parse(name(), at, payload, bytes, count, count), count,
                   static_cast<float*>(dst), at);
  }
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType, RedOp, const ChunkInfo& at) override {
    sparse::combine(sparse::parse(name(), at, payload, bytes, count, count), count,
                    static_cast<const float*>(local), static_cast<float*>(out), at);
  }
  size_t encodeFeedback(const void* src, size_t count, DataType, const ChunkInfo& at,
                        void* payload, float* residual, EncodeNorms* norms) override {
    const float* x = static_cast<const float*>(src);
    Feedback fb{residual, norms};
    const sparse::Encoded e = write(x, count, at, payload, &fb);
    if (e.view.dense) sparse::feedback(e.view, x, count, residual, norms, at);
    return e.bytes;
  }

 private:
  struct Feedback {
    float* residual;
    EncodeNorms* norms;
  };
  // feedback: where a sparse payload's error feedback goes (done with the selection: on the host
  // one pass over x and the residual); a dense payload's is the caller's.
  sparse::Encoded write(const float* x, size_t count, const ChunkInfo& at, void* payload,
                        const Feedback* feedback = nullptr) const {
    // Sparse while 8m < 4 count: at most (count - 1) / 2 pairs, which fit the bound.
    if (count > 0 && count <= std::numeric_limits<uint32_t>::max()) {
      const size_t cap = (count - 1) / 2;
      // Scratch for cap indices and the CPU kernel's slack.
      auto* idx = reinterpret_cast<uint32_t*>(at.ctx->scratch(
          device::Context::Slot::kIndices, (cap + device::kSelectSlack) * sizeof(uint32_t)));
      const size_t m =
          feedback ? at.ctx->selectAtLeastFeedback(
                         x, count, minKey_, idx, cap, feedback->residual,
                         feedback->norms ? &feedback->norms->inputSq : nullptr,
                         feedback->norms ? &feedback->norms->sentSq : nullptr)
                   : at.ctx->selectAtLeast(x, count, minKey_, idx, cap);
      if (m != static_cast<size_t>(-1)) {
        copyPayload(sparse::indexArea(payload), idx, m * sizeof(uint32_t), at);
        return sparse::finishSparse(x, m, payload, at);
      }
    }
    return sparse::writeDense(x, count, payload, at);
  }

  uint32_t minKey_;
};

std::unique_ptr<Codec> makeThresholdCodec(const CodecSpec& spec) {
  if (!spec.threshold)
    raise(ErrorCode::kInvalidArgument,
          "codec threshold needs its threshold: values with |v| >= "
          "threshold are sent, e.g. threshold:threshold=0.01.");
  const double t = spec.get("threshold", 0, 0, std::numeric_limits<float>::max());
  if (!(t > 0))
    raise(ErrorCode::kInvalidArgument, "codec threshold: threshold must be above 0 (got ", t,
          "); values with |v| >= threshold are sent.");
  return std::make_unique<ThresholdCodec>(t);
}

}  // namespace

SQZ_CODEC_METHODS(threshold) {
  addCodecMethod(chunkMethod<makeThresholdCodec>(
      "threshold", kThresholdId, "threshold",
      "every value with |v| >= threshold", true));
}

}  // namespace squeeze
