// TernGrad codec (Wen et al.): per block of `block` values (key block, default 256) the scale
// s = max|v| travels as float32, and each value as one of {0, +s, -s}: s * sign(v) * b with
// b ~ Bernoulli(|v| / s), so E[D(C(x))] = x. The draws come from the counter hash of (seed,
// call, rank, global element index) (device/quantize.h; key seed, default 0). Combine
// dequantizes and adds into float32; the next hop re-encodes the partial sum (its scale is the
// partial sum's max, so the ternary levels adapt per hop). Error feedback (on by default) is
// fused into the encode.
//
// Payload (native byte order, any alignment):
//   uint32 block, uint32 0            the sender's settings, checked against the receiver's
//   float32 s[ceil(count/block)]
//   codes: 2 bits per value (0: 0, 1: +s, 3: -s; 2 is never written and decodes as 0), block
//          after block, each padded to a whole byte (low bits first)
// so a full block of 256 values is 68 bytes instead of 1024: a ratio of 15.06.
// Round-trip bound: |x - D(C(x))| <= s per element (the value and its code share a sign and
// |v| <= s); unbiased up to the 2^-24 grid of the draws (bias <= 2^-24 s). A block holding inf
// or NaN decodes to zeros or non-finite values.
#include "compress/block_quant.h"
#include "compress/codecs.h"

namespace squeeze {
namespace {

// terngrad's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kTerngradId = 6;

class TerngradCodec final : public BlockQuantCodec {
 public:
  TerngradCodec(size_t block, uint64_t seed)
      : BlockQuantCodec(kTerngradId, block, 0, nullptr, 1), seed_(seed) {}

 protected:
  device::QuantSetting quantSetting(const ChunkInfo& at) const override {
    return {device::QuantKind::kTerngrad, block_, 0, 0,
            device::counterKey(seed_, at.call, at.rank)};
  }
  size_t codeBytes(size_t n) const override { return device::packedChunkBytes(n, block_, 2); }

 private:
  uint64_t seed_;
};

std::unique_ptr<Codec> makeTerngradCodec(const CodecSpec& spec) {
  return std::make_unique<TerngradCodec>(
      static_cast<size_t>(spec.getWhole("block", 256, 1, 1 << 24)),
      static_cast<uint64_t>(spec.getWhole("seed", 0, 0, 0x1p53)));
}

}  // namespace

SQZ_CODEC_METHODS(terngrad) {
  addCodecMethod(chunkMethod<makeTerngradCodec>(
      "terngrad", kTerngradId, "block,seed",
      "TernGrad: unbiased {0, +s, -s} with s = max|v| per block", true));
}

}  // namespace squeeze
