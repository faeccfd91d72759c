// QSGD codec (Alistarh et al.): per block of `block` values (key block, default 512) the L2
// norm travels as float32, and each value as sign * l with l = floor(|v| / norm * s + u) (<= s),
// u uniform in [0, 1), s = levels (key levels, default 16, 1..127). The rounding is stochastic
// and unbiased, E[D(C(x))] = x; u comes from the counter hash of (seed, call, rank, global
// element index) (device/quantize.h; key seed, default 0), so every hop of every rank draws its
// own, reproducible stream. Combine dequantizes and adds into float32; the next hop re-encodes.
// Error feedback (on by default) is fused into the encode.
//
// Payload (native byte order, any alignment):
//   uint32 block, uint32 levels      the sender's settings, checked against the receiver's
//   float32 norm[ceil(count/block)]
//   codes: sign * l in two's complement, 4 bits per value when 2s + 1 <= 16 (s <= 7), else 8;
//          block after block, each padded to a whole byte (low nibble first)
// At the default (s = 16, 8 bits, block 512) the ratio is 4 / (1 + 4/512) = 3.97; at s <= 7 it
// is 7.9.
// Round-trip bound: |x - D(C(x))| <= norm / s per element (l is floor or ceil of |v| / norm * s),
// plus float rounding of at most 2^-22 norm; a norm beyond FLT_MAX travels as FLT_MAX (still
// >= max|v|, so the bound and unbiasedness hold). A block holding inf or NaN decodes to
// unspecified (but defined) values.
#include "compress/block_quant.h"
#include "compress/codecs.h"

namespace squeeze {
namespace {

// qsgd's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kQsgdId = 4;

class QsgdCodec final : public BlockQuantCodec {
 public:
  QsgdCodec(size_t block, int levels, uint64_t seed)
      : BlockQuantCodec(kQsgdId, block, static_cast<uint32_t>(levels), "levels", 1),
        levels_(levels), bits_(2 * levels + 1 <= 16 ? 4 : 8), seed_(seed) {}

 protected:
  device::QuantSetting quantSetting(const ChunkInfo& at) const override {
    return {device::QuantKind::kQsgd, block_, levels_, bits_,
            device::counterKey(seed_, at.call, at.rank)};
  }
  size_t codeBytes(size_t n) const override { return device::packedChunkBytes(n, block_, bits_); }

 private:
  int levels_;
  int bits_;
  uint64_t seed_;
};

std::unique_ptr<Codec> makeQsgdCodec(const CodecSpec& spec) {
  return std::make_unique<QsgdCodec>(static_cast<size_t>(spec.getWhole("block", 512, 1, 1 << 24)),
                                     static_cast<int>(spec.getWhole("levels", 16, 1, 127)),
                                     static_cast<uint64_t>(spec.getWhole("seed", 0, 0, 0x1p53)));
}

}  // namespace

SQZ_CODEC_METHODS(qsgd) {
  addCodecMethod(chunkMethod<makeQsgdCodec>(
      "qsgd", kQsgdId, "levels,block,seed",
      "QSGD: unbiased stochastic rounding to s levels of the block's L2 norm", true));
}

}  // namespace squeeze
