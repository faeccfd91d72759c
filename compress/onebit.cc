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
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "compress/codecs.h"
#include "device/quantize.h"

namespace squeeze {
namespace {

constexpr size_t kHeaderBytes = 8;

class OnebitCodec final : public Codec {
 public:
  explicit OnebitCodec(size_t block) : block_(block) {}
  uint8_t id() const override { return 5; }
  const char* name() const override { return "onebit"; }
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
    device::cpuOnebitDecode(p + kHeaderBytes, p + codesAt(count), count, block_,
                            static_cast<float*>(dst));
  }
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType, RedOp, const ChunkInfo&) override {
    check(payload, bytes, count);
    const auto* p = static_cast<const unsigned char*>(payload);
    device::cpuOnebitDecodeAdd(static_cast<float*>(out), static_cast<const float*>(local),
                               p + kHeaderBytes, p + codesAt(count), count, block_);
  }

 private:
  size_t write(const void* src, size_t count, const ChunkInfo&, void* payload,
               device::Feedback* feedback) const {
    auto* p = static_cast<unsigned char*>(payload);
    const uint32_t header[2] = {static_cast<uint32_t>(block_), 0};
    std::memcpy(p, header, kHeaderBytes);
    device::cpuOnebitEncode(static_cast<const float*>(src), count, block_, p + kHeaderBytes,
                            p + codesAt(count), feedback);
    return bytesFor(count);
  }
  size_t codesAt(size_t count) const {
    return kHeaderBytes + 8 * device::blockCount(count, block_);
  }
  size_t bytesFor(size_t count) const {
    return codesAt(count) + device::packedChunkBytes(count, block_, 1);
  }
  void check(const void* payload, size_t bytes, size_t count) const {
    if (bytes != bytesFor(count))
      raise(ErrorCode::kRemote, "onebit payload of ", bytes, " bytes for ", count,
            " values; expected ", bytesFor(count));
    uint32_t header[2];
    std::memcpy(header, payload, kHeaderBytes);
    if (header[0] != block_ || header[1] != 0)
      raise(ErrorCode::kRemote, "onebit payload encoded with block=", header[0],
            " where this rank uses block=", block_,
            "; every rank must create the codec with "
            "the same spec");
  }
  size_t block_;
};

}  // namespace

std::unique_ptr<Codec> makeOnebitCodec(const CodecSpec& spec) {
  const double block = spec.get("block", 256, 1, 1 << 24);
  if (block != std::floor(block))
    raise(ErrorCode::kInvalidArgument, "codec onebit: block = ", block,
          " is not a whole number of values; write e.g. block=256.");
  return std::make_unique<OnebitCodec>(static_cast<size_t>(block));
}

}  // namespace squeeze
