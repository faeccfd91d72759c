// Dense codec: the payload is the values; combine is the context's reduction (on the CPU, or on
// the GPU for a device call).
#include <cstring>

#include "base/error.h"
#include "compress/codecs.h"
#include "device/reduce.h"
#include "squeeze_config.h"

namespace squeeze {
namespace {

class DenseCodec final : public Codec {
 public:
  uint8_t id() const override { return uint8_t(CodecId::kDense); }
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
};

}  // namespace

Codec& denseCodec() {
  static DenseCodec codec;
  return codec;
}

std::unique_ptr<Codec> makeDenseCodec(const CodecSpec&) { return std::make_unique<DenseCodec>(); }

}  // namespace squeeze
