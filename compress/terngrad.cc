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
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "compress/codecs.h"
#include "device/quantize.h"

namespace squeeze {
namespace {

constexpr size_t kHeaderBytes = 8;

class TerngradCodec final : public Codec {
 public:
  TerngradCodec(size_t block, uint64_t seed) : block_(block), seed_(seed) {}
  uint8_t id() const override { return 6; }
  const char* name() const override { return "terngrad"; }
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
    device::cpuTerngradDecode(p + kHeaderBytes, p + codesAt(count), count, block_,
                              static_cast<float*>(dst));
  }
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType, RedOp, const ChunkInfo&) override {
    check(payload, bytes, count);
    const auto* p = static_cast<const unsigned char*>(payload);
    device::cpuTerngradDecodeAdd(static_cast<float*>(out), static_cast<const float*>(local),
                                 p + kHeaderBytes, p + codesAt(count), count, block_);
  }

 private:
  size_t write(const void* src, size_t count, const ChunkInfo& at, void* payload,
               device::Feedback* feedback) const {
    auto* p = static_cast<unsigned char*>(payload);
    const uint32_t header[2] = {static_cast<uint32_t>(block_), 0};
    std::memcpy(p, header, kHeaderBytes);
    device::cpuTerngradEncode(static_cast<const float*>(src), count, block_,
                              device::counterKey(seed_, at.call, at.rank), at.offset,
                              p + kHeaderBytes, p + codesAt(count), feedback);
    return bytesFor(count);
  }
  size_t codesAt(size_t count) const {
    return kHeaderBytes + 4 * device::blockCount(count, block_);
  }
  size_t bytesFor(size_t count) const {
    return codesAt(count) + device::packedChunkBytes(count, block_, 2);
  }
  void check(const void* payload, size_t bytes, size_t count) const {
    if (bytes != bytesFor(count))
      raise(ErrorCode::kRemote, "terngrad payload of ", bytes, " bytes for ", count,
            " values; expected ", bytesFor(count));
    uint32_t header[2];
    std::memcpy(header, payload, kHeaderBytes);
    if (header[0] != block_ || header[1] != 0)
      raise(ErrorCode::kRemote, "terngrad payload encoded with block=", header[0],
            " where this rank uses block=", block_,
            "; every rank must create the codec with "
            "the same spec");
  }
  size_t block_;
  uint64_t seed_;
};

double wholeKey(const CodecSpec& spec, const char* key, double def, double lo, double hi) {
  const double v = spec.get(key, def, lo, hi);
  if (v != std::floor(v))
    raise(ErrorCode::kInvalidArgument, "codec terngrad: ", key, " = ", v,
          " is not a whole number; write e.g. ", key, "=", def, ".");
  return v;
}

}  // namespace

std::unique_ptr<Codec> makeTerngradCodec(const CodecSpec& spec) {
  return std::make_unique<TerngradCodec>(
      static_cast<size_t>(wholeKey(spec, "block", 256, 1, 1 << 24)),
      static_cast<uint64_t>(wholeKey(spec, "seed", 0, 0, 0x1p53)));
}

}  // namespace squeeze
