// The top-k chunk codec's class, for DGC (compress/dgc.cc) which drives it with a per-call
// ratio, and the sparse payload format that topk, threshold and dgc share (compress/topk.cc).
//
// Sparse payload (native byte order, 4-byte aligned):
//   u32 format   kSparseFormat or kDenseFormat
//   u32 entries  sparse: m, the number of (index, value) pairs; dense: count
//   sparse: u32 index[m] (relative to the chunk, strictly ascending), f32 value[m]
//   dense:  f32 value[count]
// 8 + 8m bytes sparse, 8 + 4 count dense; the encoder sends dense whenever 8k >= 4 count (k,
// the codec's bound on m). An entry whose value is zero is padding (a GPU's encoder fills up to
// k with them, so the size is known before the selection runs): it adds nothing.
//
// Device calls (a CUDA execution context): payloads and values are device memory. The
// selection, gather, scatters and feedback run their CUDA twins (device/sparse.h: the same
// indices and bits); headers are written with copyPayload. parse takes the format and the entry
// count from the size where only one format fits it, and leaves the header and the index list to
// the context's checks (Context::checkWords, checkIndices: on a GPU compared after the stream has
// run; the scatters skip an index past the chunk meanwhile); otherwise it reads the header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/codec.h"

namespace squeeze {

// max(1, ceil(ratio * count)), at most count (0 for an empty chunk): the k of topk and randk.
size_t keepCount(double ratio, size_t count);

namespace sparse {

constexpr uint32_t kSparseFormat = 0x53525053u;  // "SPRS"
constexpr uint32_t kDenseFormat = 0x534e4544u;   // "DENS"
constexpr size_t kHeaderBytes = 8;

// Where the encoder writes the selected indices before finishing the payload.
inline uint32_t* indexArea(void* payload) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(payload) + kHeaderBytes);
}
// A validated payload (pointers into it: device or pinned memory for a device call).
struct View {
  bool dense = false;
  size_t entries = 0;               // sparse pairs (dense: count)
  const uint32_t* index = nullptr;  // sparse only
  const float* value = nullptr;
};
// What an encoder wrote: its size, and its view (the encoder's own payload needs no parse).
struct Encoded {
  size_t bytes = 0;
  View view;
};

// Finishes a sparse payload whose m indices are already in indexArea(payload): header and the
// values x[index].
Encoded finishSparse(const float* x, size_t m, void* payload, const ChunkInfo& at);
// The same where the values are there too: the header only.
Encoded finishSparse(size_t m, void* payload, const ChunkInfo& at);
// Writes a dense payload of x[0..count).
Encoded writeDense(const float* x, size_t count, void* payload, const ChunkInfo& at);
// Checks a payload from the network for a chunk of count values: the format, the size, entries
// <= maxEntries (sparse), every index < count and strictly ascending. Raises kRemote, naming the
// codec and the sender (raiseMalformed), on anything else.
View parse(const char* codec, const ChunkInfo& at, const void* payload, size_t bytes, size_t count,
           size_t maxEntries);
// dst = the values; out = local + the values (out may alias local).
void decode(const View& v, size_t count, float* dst, const ChunkInfo& at);
void combine(const View& v, size_t count, const float* local, float* out, const ChunkInfo& at);
// Error feedback for a payload just encoded from x (see Codec::encodeFeedback).
void feedback(const View& v, const float* x, size_t count, float* residual, EncodeNorms* norms,
              const ChunkInfo& at);

}  // namespace sparse

// Top-k: per chunk the k = keepCount(ratio, count) values of largest magnitude (see topk.cc).
class TopkCodec final : public Codec {
 public:
  // id: what the header and errors carry (kTopk, or kDgc when DGC drives it).
  TopkCodec(uint8_t id, double ratio, bool sampled)
      : id_(id), ratio_(ratio), sampled_(sampled) {}
  // DGC's warm-up and the adaptive methods change the ratio between calls (never during one).
  bool setRatio(double ratio) override {
    ratio_ = ratio;
    return true;
  }
  double ratio() const { return ratio_; }

  uint8_t id() const override { return id_; }
  // A GPU's encode pads to k entries (topk.cc), so its size is known before the selection runs.
  bool fixedPayload(const device::Context& ctx) const override { return ctx.onDevice(); }
  size_t maxEncodedBytes(size_t count, DataType dtype) const override;
  size_t encode(const void* src, size_t count, DataType dtype, const ChunkInfo& at,
                void* payload) override;
  void decode(const void* payload, size_t bytes, size_t count, DataType dtype, const ChunkInfo& at,
              void* dst) override;
  void combine(void* out, const void* local, const void* payload, size_t bytes, size_t count,
               DataType dtype, RedOp op, const ChunkInfo& at) override;
  size_t encodeFeedback(const void* src, size_t count, DataType dtype, const ChunkInfo& at,
                        void* payload, float* residual, EncodeNorms* norms) override;

 private:
  sparse::Encoded write(const float* x, size_t count, const ChunkInfo& at, void* payload) const;

  uint8_t id_;
  double ratio_;
  bool sampled_;
};

}  // namespace squeeze
