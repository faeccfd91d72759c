// Dense codec: the payload is the values; combine is the context's reduction (on the CPU, or on
// the GPU for a device call).
#include <cstring>

#include "base/error.h"
#include "compress/codecs.h"
#include "device/reduce.h"
#include "squeeze_config.h"

namespace squeeze {
namespace {

// dense's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kDenseId = 0;

class DenseCodec final : public Codec {
 public:
  uint8_t id() const override { return kDenseId; }
  bool rawWire() const override { return true; }
  size_t maxEncodedBytes(size_t count, DataType dtype) const override {
    return count * dataTypeSize(dtype);
  }
  size_t encode(const void* src, size_t count, DataType dtype, const ChunkInfo& at,
                void* payload) override {
    size_t bytes = count * dataTypeSize(dtype);
    copyPayload(payload, src, bytes, at);
    return bytes;
  }
  void decode(const void* payload, size_t bytes, size_t count, DataType dtype,
              const ChunkInfo& at, void* dst) override {
    checkPayloadBytes("dense", at, bytes, count * dataTypeSize(dtype), count);
    copyPayload(dst, payload, bytes, at);
  }
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType dtype, RedOp op, const ChunkInfo& at) override {
    checkPayloadBytes("dense", at, bytes, count * dataTypeSize(dtype), count);
    at.ctx->reduce(dtype, op, out, local, payload, count);
  }
  // The generic encode, decode and feedback pass in one pass over src (Context::copyFeedback):
  // the payload is the values, so what it drops is x - x, kept bit for bit as the generic does.
  size_t encodeFeedback(const void* src, size_t count, DataType dtype, const ChunkInfo& at,
                        void* payload, float* residual, EncodeNorms* norms) override {
    if (dtype != DataType::kFloat32)
      return Codec::encodeFeedback(src, count, dtype, at, payload, residual, norms);
    at.ctx->copyFeedback(static_cast<const float*>(src), static_cast<float*>(payload), count,
                         residual, norms ? &norms->inputSq : nullptr,
                         norms ? &norms->sentSq : nullptr);
    return count * sizeof(float);
  }
};

}  // namespace

Codec& denseCodec() {
  static DenseCodec codec;
  return codec;
}

namespace {

std::unique_ptr<Codec> makeDenseCodec(const CodecSpec&) { return std::make_unique<DenseCodec>(); }

}  // namespace

SQZ_CODEC_METHODS(dense) {
  addCodecMethod(chunkMethod<makeDenseCodec>(
      "dense", kDenseId, "",
      "the values themselves: exactly sqzAllReduce", false));
}

}  // namespace squeeze
