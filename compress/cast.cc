// Cast codecs, fp16 and bf16: each value travels as 16 bits (round to nearest even); combine
// widens, adds in float32 and the next hop narrows again (DESIGN.md's table: "widen, reduce,
// narrow"). Payload: count 16-bit values, 2 bytes each, so the ratio is exactly 2.
// Round-trip bound: |x - D(C(x))| <= 2^-11 |x| for fp16 (normal range, |x| < 65504; beyond it
// the value becomes infinity) and <= 2^-8 |x| for bf16. A device call runs the CUDA twins of the
// kernels (device/cast.h), which give the same bits.
#include "base/error.h"
#include "compress/codecs.h"
#include "device/cast.h"

namespace squeeze {
namespace {

// fp16's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kFp16Id = 1;
// bf16's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kBf16Id = 2;

class CastCodec final : public Codec {
 public:
  CastCodec(device::Narrow kind, uint8_t id) : kind_(kind), id_(id) {}
  uint8_t id() const override { return id_; }
  size_t maxEncodedBytes(size_t count, DataType) const override { return count * 2; }
  bool fixedPayload(const device::Context&) const override { return true; }
  size_t encode(const void* src, size_t count, DataType, const ChunkInfo& at,
                void* payload) override {
    at.ctx->narrow(kind_, static_cast<const float*>(src),
               static_cast<uint16_t*>(payload), count);
    return count * 2;
  }
  void decode(const void* payload, size_t bytes, size_t count, DataType, const ChunkInfo& at,
              void* dst) override {
    checkPayloadBytes(name(), at, bytes, count * 2, count);
    at.ctx->widen(kind_, static_cast<const uint16_t*>(payload),
               static_cast<float*>(dst), count);
  }
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType, RedOp, const ChunkInfo& at) override {
    checkPayloadBytes(name(), at, bytes, count * 2, count);
    at.ctx->widenAdd(kind_, static_cast<float*>(out),
               static_cast<const float*>(local), static_cast<const uint16_t*>(payload), count);
  }
  // The generic encode, decode, feedback pass, in one pass on a GPU (Context::castFeedback).
  size_t encodeFeedback(const void* src, size_t count, DataType, const ChunkInfo& at, void* payload,
                        float* residual, EncodeNorms* norms) override {
    at.ctx->castFeedback(kind_, static_cast<const float*>(src), static_cast<uint16_t*>(payload),
                         count, residual, norms ? &norms->inputSq : nullptr,
                         norms ? &norms->sentSq : nullptr);
    return count * 2;
  }

 private:
  device::Narrow kind_;
  uint8_t id_;
};

std::unique_ptr<Codec> makeFp16Codec(const CodecSpec&) {
  return std::make_unique<CastCodec>(device::Narrow::kHalf, kFp16Id);
}
std::unique_ptr<Codec> makeBf16Codec(const CodecSpec&) {
  return std::make_unique<CastCodec>(device::Narrow::kBfloat16, kBf16Id);
}

}  // namespace

SQZ_CODEC_METHODS(cast) {
  addCodecMethod(chunkMethod<makeFp16Codec>(
      "fp16", kFp16Id, "",
      "IEEE half on the wire; widen, add, narrow", true));
  addCodecMethod(chunkMethod<makeBf16Codec>(
      "bf16", kBf16Id, "",
      "bfloat16 on the wire; widen, add, narrow", true));
}

}  // namespace squeeze
