// 1-bit SGD codec (Seide et al.; seed 000: "(1) Column-wise scaling factor (2) Accumulate
// quantization error"). (1): the tensor is cut into columns of `block` values (key block,
// default 256); each value travels as its sign bit, and each column as two float32
// reconstruction values, the mean of its non-negative values and the mean of its negative
// values (the sides are split by the sign bit, so -0 counts as negative; 0 for an empty side);
// decode gives each value its side's mean. (2): the quantization error is carried
// to the next call by the error feedback every lossy codec gets (compress/feedback.cc, on by
// default), which also takes what each hop's re-quantization of a partial sum drops.
// Deterministic: no randomness.
//
// Payload (native byte order, any alignment):
//   uint32 block, uint32 0                  the sender's settings, checked against the receiver's
//   float32 {mean of the non-negative, mean of the negative}[ceil(count/block)]
//   bits: the sign bits (1: negative), block after block, each padded to a whole byte (low bit
//         first)
// so a full block of 256 values is 40 bytes instead of 1024: a ratio of 25.6.
// Round-trip bound, per block: D(C(x)) is the least-squares fit of x by one constant per sign
// side (the orthogonal projection onto the two side indicators), so |x - D(C(x))|_2 <= |x|_2
// (indeed |x - D|_2^2 = |x|_2^2 - |D|_2^2); and per element |x - D(C(x))| <= max|v| of the
// block, since a value and its side's mean share a sign and neither exceeds max|v|. Both hold
// up to the rounding of the means (summed in double, rounded once to float: relative 2^-24).
// A side holding inf or NaN decodes to non-finite values.
#include "compress/block_quant.h"
#include "compress/codecs.h"

namespace squeeze {
namespace {

// onebit's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kOnebitId = 5;

class OnebitCodec final : public BlockQuantCodec {
 public:
  explicit OnebitCodec(size_t block) : BlockQuantCodec(kOnebitId, block, 0, nullptr, 2) {}

 protected:
  device::QuantSetting quantSetting(const ChunkInfo&) const override {
    return {device::QuantKind::kOnebit, block_};
  }
  size_t codeBytes(size_t n) const override { return device::packedChunkBytes(n, block_, 1); }
};

std::unique_ptr<Codec> makeOnebitCodec(const CodecSpec& spec) {
  return std::make_unique<OnebitCodec>(
      static_cast<size_t>(spec.getWhole("block", 256, 1, 1 << 24)));
}

}  // namespace

SQZ_CODEC_METHODS(onebit) {
  addCodecMethod(chunkMethod<makeOnebitCodec>(
      "onebit", kOnebitId, "block",
      "1-bit SGD: sign bits with the two side means per column (block)", true));
}

}  // namespace squeeze
