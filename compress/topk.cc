// Top-k sparsification (seed 000, "Sparse Communication. Send gradients with top-k magnitude.
// Also, accumulate the unpruned part to the gradient."): per chunk, the k = max(1, ceil(ratio *
// count)) values of largest magnitude travel as (index, value) pairs; what is not sent stays in
// the error-feedback residual. Reduced in flight (DESIGN.md's table, "merge, then re-sparsify to
// k"): combine scatter-adds the incoming pairs into the dense local chunk, and the executor
// re-encodes that partial sum for the next hop, selecting k again, so a payload never grows past
// the bound; what a hop drops goes to that hop's residual. The owner encodes the final sum once.
//
// Keys: ratio (default 0.01, in (0, 1]); sample (default 0): the route, 0 a radix select over
// the chunk (on a GPU), 1 DGC's sampled threshold first (device/sparse.h, cpuSelectTopk). Both
// send the same entries: the k largest magnitudes, ties to the lowest index, fewer only where
// the chunk has fewer than k nonzeros. A GPU then pads the payload to k entries with zeros of
// the chunk: its size is known before the selection has run, so the encode waits for nothing;
// zero entries add nothing (sparse.h), so the values are the same.
// Payload: the sparse format of topk.h: 8-byte header, then u32 indices and f32 values; dense
// (header + count floats) when 8k >= 4 count. Volume per hop <= min(8k, 4 count) + 8 bytes.
// Round trip: sent values are exact, the rest decode to 0, so |x - D(C(x))|_inf <= the k-th
// largest |x| and |x - D(C(x))|^2 <= (1 - k/count) |x|^2 (exact mode).
// Device calls run the CUDA twins (topk.h), which select the same indices: the same payloads.
#include "compress/topk.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "compress/codecs.h"
#include "device/handle_kernels.h"
#include "device/reduce.h"
#include "device/sparse.h"
#include "squeeze_config.h"

namespace squeeze {
namespace {

// topk's wire id (message headers): part of the protocol, never reused or changed.
constexpr uint8_t kTopkId = 7;

}  // namespace

size_t keepCount(double ratio, size_t count) {
  if (count == 0) return 0;
  // The tiny relative slack keeps products like 0.05 * 1000 from rounding up to 51.
  const double want = std::ceil(ratio * double(count) * (1.0 - 1e-12));
  if (!(want >= 1)) return 1;
  return want >= double(count) ? count : static_cast<size_t>(want);
}

namespace sparse {
namespace {

constexpr size_t kMaxIndexable = std::numeric_limits<uint32_t>::max();

void putHeader(void* payload, uint32_t format, uint32_t entries, const ChunkInfo& at) {
  const uint32_t header[2] = {format, entries};
  copyPayload(payload, header, kHeaderBytes, at);
}

}  // namespace

Encoded finishSparse(const float* x, size_t m, void* payload, const ChunkInfo& at) {
  at.ctx->gather(x, indexArea(payload), m, reinterpret_cast<float*>(indexArea(payload) + m));
  return finishSparse(m, payload, at);
}

Encoded finishSparse(size_t m, void* payload, const ChunkInfo& at) {
  putHeader(payload, kSparseFormat, static_cast<uint32_t>(m), at);
  const uint32_t* idx = indexArea(payload);
  const float* values = reinterpret_cast<const float*>(idx + m);
  Encoded e;
  e.bytes = kHeaderBytes + 8 * m;
  e.view.entries = m;
  e.view.index = idx;
  e.view.value = values;
  return e;
}

Encoded writeDense(const float* x, size_t count, void* payload, const ChunkInfo& at) {
  putHeader(payload, kDenseFormat, static_cast<uint32_t>(std::min(count, kMaxIndexable)), at);
  float* values = reinterpret_cast<float*>(static_cast<char*>(payload) + kHeaderBytes);
  copyPayload(values, x, count * sizeof(float), at);
  Encoded e;
  e.bytes = kHeaderBytes + 4 * count;
  e.view.dense = true;
  e.view.entries = count;
  e.view.value = values;
  return e;
}

namespace {

// The view of a payload whose header says format/entries: every check but the indices', each
// raising kRemote with what was wrong.
View viewByHeader(const char* codec, const ChunkInfo& at, const void* payload, size_t bytes,
                  size_t count, size_t maxEntries, const uint32_t* header) {
  const uint32_t format = header[0], entries = header[1];
  const char* body = static_cast<const char*>(payload) + kHeaderBytes;
  // Sizes compare as counts of the body, never as products: nothing here can wrap around.
  const size_t bodyBytes = bytes - kHeaderBytes;
  View v;
  if (format == kDenseFormat) {
    if (entries != std::min(count, kMaxIndexable) || bodyBytes % 4 != 0 || bodyBytes / 4 != count)
      raiseMalformed(codec, at, "a dense payload of ", bytes, " bytes says ", entries,
                     " values; the chunk has ", count);
    v.dense = true;
    v.entries = count;
    v.value = reinterpret_cast<const float*>(body);
    return v;
  }
  if (format != kSparseFormat)
    raiseMalformed(codec, at, "unknown format tag ", format,
                   " (a different codec or a corrupt message)");
  if (entries > maxEntries || entries > count)
    raiseMalformed(codec, at, entries, " entries for a chunk of ", count,
                   " values that allows at most ", std::min(maxEntries, count));
  if (bodyBytes % 8 != 0 || bodyBytes / 8 != entries)
    raiseMalformed(codec, at, bytes, " bytes for ", entries, " entries; expected ", kHeaderBytes,
                   " + 8 * ", entries);
  v.entries = entries;
  v.index = reinterpret_cast<const uint32_t*>(body);
  v.value = reinterpret_cast<const float*>(body) + entries;
  return v;
}

}  // namespace

View parse(const char* codec, const ChunkInfo& at, const void* payload, size_t bytes, size_t count,
           size_t maxEntries) {
  SQZ_ENFORCE(reinterpret_cast<uintptr_t>(payload) % 4 == 0, codec, " payload is not aligned");
  if (bytes < kHeaderBytes)
    raiseMalformed(codec, at, bytes, " bytes, shorter than its ", kHeaderBytes, "-byte header");
  // The size alone tells the format where only one fits (a sparse payload holds fewer than
  // count / 2 entries: the encoder sends dense from there); then the header is a check the
  // context may make after the stream has run (Context::checkWords), and nothing waits here.
  // Where neither or both fit, the header decides, read now.
  const size_t bodyBytes = bytes - kHeaderBytes;
  const bool denseSize = bodyBytes % 4 == 0 && bodyBytes / 4 == count;
  const bool sparseSize = bodyBytes % 8 == 0 && bodyBytes / 8 <= std::min(maxEntries, count);
  View v;
  if (denseSize == sparseSize) {
    uint32_t header[2];
    readPayload(header, payload, kHeaderBytes, at);
    v = viewByHeader(codec, at, payload, bytes, count, maxEntries, header);
  } else {
    const uint32_t expected[2] = {
        denseSize ? kDenseFormat : kSparseFormat,
        static_cast<uint32_t>(denseSize ? std::min(count, kMaxIndexable) : bodyBytes / 8)};
    v = viewByHeader(codec, at, payload, bytes, count, maxEntries, expected);
    at.ctx->checkWords(payload, expected, 2,
                       [codec, at, payload, bytes, count, maxEntries](const uint32_t* header) {
                         viewByHeader(codec, at, payload, bytes, count, maxEntries, header);
                         raiseMalformed(codec, at, "header ", header[0], " ", header[1],
                                        " does not match its ", bytes, " bytes");
                       });
  }
  if (v.dense || v.entries == 0) return v;
  // The indices stay where they are (on a GPU, a kernel finds the first bad one, and the
  // scatters skip an index past the chunk until the check is made).
  at.ctx->checkIndices(v.index, v.entries, count, [codec, at, count](size_t j, uint32_t index) {
    raiseMalformed(codec, at, "entry ", j, " has index ", index,
                   index >= count ? strCat(", outside the chunk of ", count, " values")
                                  : std::string(", not above the previous one"));
  });
  return v;
}

void decode(const View& v, size_t count, float* dst, const ChunkInfo& at) {
  if (v.dense)
    copyPayload(dst, v.value, count * sizeof(float), at);  // dst may be null when empty
  else
    at.ctx->densify(v.index, v.value, v.entries, dst, count);
}

void combine(const View& v, size_t count, const float* local, float* out, const ChunkInfo& at) {
  if (v.dense) {
    at.ctx->reduce(DataType::kFloat32, RedOp::kSum, out, local, v.value, count);
  } else {
    at.ctx->scatterAdd(out, local, count, v.index, v.value, v.entries);
  }
}

void feedback(const View& v, const float* x, size_t count, float* residual, EncodeNorms* norms,
              const ChunkInfo& at) {
  // The norms go straight to *norms: on a GPU they arrive when the context next waits.
  double* in = norms ? &norms->inputSq : nullptr;
  double* sent = norms ? &norms->sentSq : nullptr;
  if (!v.dense) {
    at.ctx->sparseFeedback(x, count, v.index, v.entries, residual, in, sent);
  } else if (norms) {  // everything sent: the residual keeps what it had (x - x = 0); |x|^2 twice
    at.ctx->sparseFeedback(x, count, nullptr, 0, nullptr, in, nullptr);
    at.ctx->sparseFeedback(x, count, nullptr, 0, nullptr, sent, nullptr);
  }
}

}  // namespace sparse

namespace {
bool sendDense(size_t k, size_t count) {
  return 2 * k >= count || count > std::numeric_limits<uint32_t>::max();
}
}  // namespace

size_t TopkCodec::maxEncodedBytes(size_t count, DataType) const {
  const size_t k = keepCount(ratio_, count);
  return sparse::kHeaderBytes + (sendDense(k, count) ? 4 * count : 8 * k);
}

sparse::Encoded TopkCodec::write(const float* x, size_t count, const ChunkInfo& at,
                                 void* payload) const {
  const size_t k = keepCount(ratio_, count);
  if (sendDense(k, count)) return sparse::writeDense(x, count, payload, at);
  const size_t m = at.ctx->selectTopk(x, count, k, sampled_, sparse::indexArea(payload));
  return sparse::finishSparse(x, m, payload, at);
}

size_t TopkCodec::encode(const void* src, size_t count, DataType, const ChunkInfo& at,
                         void* payload) {
  return write(static_cast<const float*>(src), count, at, payload).bytes;
}

void TopkCodec::decode(const void* payload, size_t bytes, size_t count, DataType,
                       const ChunkInfo& at, void* dst) {
  sparse::View v = sparse::parse(name(), at, payload, bytes, count, keepCount(ratio_, count));
  sparse::decode(v, count, static_cast<float*>(dst), at);
}

void TopkCodec::combine(void* out, const void* local, const void* payload, size_t bytes,
                        size_t count, DataType, RedOp, const ChunkInfo& at) {
  sparse::View v = sparse::parse(name(), at, payload, bytes, count, keepCount(ratio_, count));
  sparse::combine(v, count, static_cast<const float*>(local), static_cast<float*>(out), at);
}

size_t TopkCodec::encodeFeedback(const void* src, size_t count, DataType, const ChunkInfo& at,
                                 void* payload, float* residual, EncodeNorms* norms) {
  const float* x = static_cast<const float*>(src);
  const size_t k = keepCount(ratio_, count);
  if (sendDense(k, count)) {
    const sparse::Encoded e = sparse::writeDense(x, count, payload, at);
    sparse::feedback(e.view, x, count, residual, norms, at);
    return e.bytes;
  }
  // The selection, the values and the feedback in one (on the host one pass over x and the
  // residual).
  const size_t m = at.ctx->selectTopkFeedback(x, count, k, sampled_, sparse::indexArea(payload),
                                              residual, norms ? &norms->inputSq : nullptr,
                                              norms ? &norms->sentSq : nullptr);
  return sparse::finishSparse(m, payload, at).bytes;
}

namespace {

std::unique_ptr<Codec> makeTopkCodec(const CodecSpec& spec) {
  const double ratio = spec.getRatio(0.01);
  const double sample = spec.get("sample", 0, 0, 1);
  if (sample != 0 && sample != 1)
    raise(ErrorCode::kInvalidArgument, "codec topk: sample = ", sample,
          " must be 0 (radix select) or 1 (DGC's sampled threshold first).");
  return std::make_unique<TopkCodec>(kTopkId, ratio, sample == 1);
}

}  // namespace

SQZ_CODEC_METHODS(topk) {
  addCodecMethod(chunkMethod<makeTopkCodec>(
      "topk", kTopkId, "ratio,sample",
      "the k largest magnitudes per chunk; re-selected per hop", true));
}

}  // namespace squeeze
