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
#include "compress/block_quant.h"
#include "compress/codecs.h"

namespace squeeze {
namespace {

// int8's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kInt8Id = 3;

class Int8Codec final : public BlockQuantCodec {
 public:
  explicit Int8Codec(size_t block) : BlockQuantCodec(kInt8Id, block, 0, nullptr, 1) {}

 protected:
  device::QuantSetting quantSetting(const ChunkInfo&) const override {
    return {device::QuantKind::kInt8, block_};
  }
  size_t codeBytes(size_t n) const override { return n; }
};

std::unique_ptr<Codec> makeInt8Codec(const CodecSpec& spec) {
  return std::make_unique<Int8Codec>(static_cast<size_t>(spec.getWhole("block", 256, 1, 1 << 24)));
}

}  // namespace

SQZ_CODEC_METHODS(int8) {
  addCodecMethod(chunkMethod<makeInt8Codec>(
      "int8", kInt8Id, "block",
      "int8 codes with a max|v|/127 scale per block; dequantize, add, requantize", true));
}

}  // namespace squeeze
