// int8 codec: each block of `block` values (key block, default 256) travels as one float32
// scale = max|v| / 127 and one signed byte per value, code = round-to-nearest-even(v / scale);
// combine dequantizes and adds into float32, and the next hop quantizes the partial sum again
// (DESIGN.md's table: "dequantize, add, requantize"). Deterministic: no randomness. What the
// rounding drops goes to the error-feedback residual (on by default), fused into the encode.
//
// Payload (native byte order, any alignment):
//   uint32 block, uint32 0            the sender's settings, checked against the receiver's
//   float32 scale[ceil(count/block)]
//   int8 code[count]
// so it is 8 + 4 * ceil(count / block) + count bytes: a ratio of 4 / (1 + 4 / block), 3.94 at
// the default block.
// Round-trip bound, per element of a block with scale = max|v| / 127:
//   |x - D(C(x))| <= scale / 2, plus float rounding (of v / scale and code * scale) of at most
//   2^-22 max|v| + 2^-140. A block holding inf or NaN decodes to non-finite values.
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "compress/codecs.h"
#include "device/quantize.h"

namespace squeeze {
namespace {

constexpr size_t kHeaderBytes = 8;

class Int8Codec final : public Codec {
 public:
  explicit Int8Codec(size_t block) : block_(block) {}
  uint8_t id() const override { return 3; }
  const char* name() const override { return "int8"; }
  size_t maxEncodedBytes(size_t count, DataType) const override { return bytesFor(count); }

  size_t encode(const void* src, size_t count, DataType, const ChunkInfo& at,
                void* payload) override {
    return write(src, count, at, payload, nullptr);
  }
  // The fused error feedback (device::Feedback): one pass instead of encode + decode + update.
  size_t encodeFeedback(const void* src, size_t count, DataType, const ChunkInfo& at, void* payload,
                        float* residual, EncodeNorms* norms) override {
    device::Feedback feedback{residual};
    const size_t bytes = write(src, count, at, payload, &feedback);
    if (norms) {
      norms->inputSq += feedback.inputSq;
      norms->sentSq += feedback.sentSq;
    }
    return bytes;
  }
  void decode(const void* payload, size_t bytes, size_t count, DataType, const ChunkInfo&,
              void* dst) override {
    check(payload, bytes, count);
    const auto* p = static_cast<const unsigned char*>(payload);
    device::cpuInt8Decode(p + kHeaderBytes, p + codesAt(count), count, block_,
                          static_cast<float*>(dst));
  }
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType, RedOp, const ChunkInfo&) override {
    check(payload, bytes, count);
    const auto* p = static_cast<const unsigned char*>(payload);
    device::cpuInt8DecodeAdd(static_cast<float*>(out), static_cast<const float*>(local),
                             p + kHeaderBytes, p + codesAt(count), count, block_);
  }

 private:
  size_t write(const void* src, size_t count, const ChunkInfo&, void* payload,
               device::Feedback* feedback) const {
    auto* p = static_cast<unsigned char*>(payload);
    const uint32_t header[2] = {static_cast<uint32_t>(block_), 0};
    std::memcpy(p, header, kHeaderBytes);
    device::cpuInt8Encode(static_cast<const float*>(src), count, block_, p + kHeaderBytes,
                          p + codesAt(count), feedback);
    return bytesFor(count);
  }
  size_t codesAt(size_t count) const {
    return kHeaderBytes + 4 * device::blockCount(count, block_);
  }
  size_t bytesFor(size_t count) const { return codesAt(count) + count; }
  void check(const void* payload, size_t bytes, size_t count) const {
    if (bytes != bytesFor(count))
      raise(ErrorCode::kRemote, "int8 payload of ", bytes, " bytes for ", count,
            " values; expected ", bytesFor(count));
    uint32_t header[2];
    std::memcpy(header, payload, kHeaderBytes);
    if (header[0] != block_ || header[1] != 0)
      raise(ErrorCode::kRemote, "int8 payload encoded with block=", header[0],
            " where this rank uses block=", block_,
            "; every rank must create the codec with "
            "the same spec");
  }
  size_t block_;
};

}  // namespace

std::unique_ptr<Codec> makeInt8Codec(const CodecSpec& spec) {
  const double block = spec.get("block", 256, 1, 1 << 24);
  if (block != std::floor(block))
    raise(ErrorCode::kInvalidArgument, "codec int8: block = ", block,
          " is not a whole number of values; write e.g. block=256.");
  return std::make_unique<Int8Codec>(static_cast<size_t>(block));
}

}  // namespace squeeze
