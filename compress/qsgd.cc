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
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "compress/codecs.h"
#include "device/quantize.h"

namespace squeeze {
namespace {

constexpr size_t kHeaderBytes = 8;

class QsgdCodec final : public Codec {
 public:
  QsgdCodec(size_t block, int levels, uint64_t seed)
      : block_(block), levels_(levels), bits_(2 * levels + 1 <= 16 ? 4 : 8), seed_(seed) {}
  uint8_t id() const override { return 4; }
  const char* name() const override { return "qsgd"; }
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
    device::cpuQsgdDecode(p + kHeaderBytes, p + codesAt(count), count, block_, levels_, bits_,
                          static_cast<float*>(dst));
  }
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType, RedOp, const ChunkInfo&) override {
    check(payload, bytes, count);
    const auto* p = static_cast<const unsigned char*>(payload);
    device::cpuQsgdDecodeAdd(static_cast<float*>(out), static_cast<const float*>(local),
                             p + kHeaderBytes, p + codesAt(count), count, block_, levels_, bits_);
  }

 private:
  size_t write(const void* src, size_t count, const ChunkInfo& at, void* payload,
               device::Feedback* feedback) const {
    auto* p = static_cast<unsigned char*>(payload);
    const uint32_t header[2] = {static_cast<uint32_t>(block_), static_cast<uint32_t>(levels_)};
    std::memcpy(p, header, kHeaderBytes);
    device::cpuQsgdEncode(static_cast<const float*>(src), count, block_, levels_, bits_,
                          device::counterKey(seed_, at.call, at.rank), at.offset, p + kHeaderBytes,
                          p + codesAt(count), feedback);
    return bytesFor(count);
  }
  size_t codesAt(size_t count) const {
    return kHeaderBytes + 4 * device::blockCount(count, block_);
  }
  size_t bytesFor(size_t count) const {
    return codesAt(count) + device::packedChunkBytes(count, block_, bits_);
  }
  void check(const void* payload, size_t bytes, size_t count) const {
    if (bytes != bytesFor(count))
      raise(ErrorCode::kRemote, "qsgd payload of ", bytes, " bytes for ", count,
            " values; expected ", bytesFor(count));
    uint32_t header[2];
    std::memcpy(header, payload, kHeaderBytes);
    if (header[0] != block_ || header[1] != static_cast<uint32_t>(levels_))
      raise(ErrorCode::kRemote, "qsgd payload encoded with block=", header[0],
            ", levels=", header[1], " where this rank uses block=", block_, ", levels=", levels_,
            "; every rank must create the codec with the same spec");
  }
  size_t block_;
  int levels_;
  int bits_;
  uint64_t seed_;
};

double wholeKey(const CodecSpec& spec, const char* key, double def, double lo, double hi) {
  const double v = spec.get(key, def, lo, hi);
  if (v != std::floor(v))
    raise(ErrorCode::kInvalidArgument, "codec qsgd: ", key, " = ", v,
          " is not a whole number; write e.g. ", key, "=", def, ".");
  return v;
}

}  // namespace

std::unique_ptr<Codec> makeQsgdCodec(const CodecSpec& spec) {
  return std::make_unique<QsgdCodec>(static_cast<size_t>(wholeKey(spec, "block", 512, 1, 1 << 24)),
                                     static_cast<int>(wholeKey(spec, "levels", 16, 1, 127)),
                                     static_cast<uint64_t>(wholeKey(spec, "seed", 0, 0, 0x1p53)));
}

}  // namespace squeeze
