// The frame the block quantizers share (int8.cc, qsgd.cc, ...: each codec that names a
// device::QuantKind): the payload layout, its checks, and the Codec calls over the quantizer
// kernels a codec names (its QuantSetting).
//
// Payload (native byte order, any alignment):
//   uint32 block, uint32 setting     the sender's settings (qsgd: levels; others 0), checked
//                                    against the receiver's, so ranks with different specs are
//                                    told instead of decoding garbage
//   float32 scales[scalesPerBlock * ceil(count / block)]
//   codes (codeBytes(count) bytes; each codec's own packing)
// encodeFeedback is fused in the kernels (device::Feedback): one pass instead of the generic
// encode + decode + residual update. The kernels run in the call's execution context (on a GPU:
// the same codes, scales and residual bits; the norms in another summation order); the header is
// written with copyPayload and read back with readPayload.
#pragma once

#include <cstring>

#include "base/error.h"
#include "compress/codec.h"
#include "compress/spec.h"
#include "device/batch.h"
#include "device/context.h"
#include "device/quantize.h"

namespace squeeze {

class BlockQuantCodec : public Codec {
 public:
  static constexpr size_t kHeaderBytes = 8;

  BlockQuantCodec(uint8_t id, size_t block, uint32_t setting, const char* settingName,
                  size_t scalesPerBlock)
      : block_(block), id_(id), setting_(setting), settingName_(settingName),
        scalesPerBlock_(scalesPerBlock) {}

  uint8_t id() const override { return id_; }
  size_t maxEncodedBytes(size_t count, DataType) const override { return bytesFor(count); }
  bool fixedPayload(const device::Context&) const override { return true; }

  size_t encode(const void* src, size_t count, DataType, const ChunkInfo& at,
                void* payload) override {
    return write(src, count, at, payload, nullptr);
  }
  size_t encodeFeedback(const void* src, size_t count, DataType, const ChunkInfo& at, void* payload,
                        float* residual, EncodeNorms* norms) override {
    device::Feedback feedback{residual, norms};
    return write(src, count, at, payload, &feedback);
  }
  void decode(const void* payload, size_t bytes, size_t count, DataType, const ChunkInfo& at,
              void* dst) override {
    check(payload, bytes, count, at);
    const auto* p = static_cast<const unsigned char*>(payload);
    at.ctx->quantDecode(quantSetting(at),
                        {p + kHeaderBytes, p + codesAt(count), count, static_cast<float*>(dst),
                         nullptr},
                        false);
  }
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType, RedOp, const ChunkInfo& at) override {
    check(payload, bytes, count, at);
    const auto* p = static_cast<const unsigned char*>(payload);
    // out[i] = local[i] + value[i]; out may alias local.
    at.ctx->quantDecode(quantSetting(at),
                        {p + kHeaderBytes, p + codesAt(count), count, static_cast<float*>(out),
                         static_cast<const float*>(local)},
                        true);
  }

 protected:
  // The quantizer whose kernels encode and decode (device/batch.h), run in the call's execution
  // context through its quantEncode and quantDecode; `at` gives the random draws' key.
  virtual device::QuantSetting quantSetting(const ChunkInfo& at) const = 0;
  virtual size_t codeBytes(size_t count) const = 0;

  size_t block_;

 private:
  size_t write(const void* src, size_t count, const ChunkInfo& at, void* payload,
               device::Feedback* feedback) const {
    auto* p = static_cast<unsigned char*>(payload);
    const uint32_t header[2] = {static_cast<uint32_t>(block_), setting_};
    copyPayload(p, header, kHeaderBytes, at);
    // index0: the chunk's offset in the tensor, which the random draws are indexed by.
    at.ctx->quantEncode(quantSetting(at),
                        {static_cast<const float*>(src), count, p + kHeaderBytes,
                         p + codesAt(count), nullptr, at.offset},
                        feedback);
    return bytesFor(count);
  }
  size_t codesAt(size_t count) const {
    return kHeaderBytes + 4 * scalesPerBlock_ * device::blockCount(count, block_);
  }
  size_t bytesFor(size_t count) const { return codesAt(count) + codeBytes(count); }
  // The size now; the header through the context (on a GPU, compared once the stream has
  // brought it back: the decode kernels use this rank's settings, so a bad header costs values,
  // never memory safety).
  void check(const void* payload, size_t bytes, size_t count, const ChunkInfo& at) const {
    checkPayloadBytes(name(), at, bytes, bytesFor(count), count);
    const uint32_t expected[2] = {static_cast<uint32_t>(block_), setting_};
    at.ctx->checkWords(payload, expected, 2, [this, at](const uint32_t* header) {
      raiseMalformed(name(), at, "encoded with block=", header[0],
                     settingName_ ? strCat(", ", settingName_, "=", header[1]) : std::string(),
                     " where this rank uses block=", block_,
                     settingName_ ? strCat(", ", settingName_, "=", setting_) : std::string(),
                     "; every rank must create the codec with the same spec");
    });
  }

  uint8_t id_;
  uint32_t setting_;
  const char* settingName_;
  size_t scalesPerBlock_;
};

}  // namespace squeeze
