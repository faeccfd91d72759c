// Fuzz target `codec`: every codec method's payload decoder, fed a payload from a peer. Input:
//   byte    method (codecMethods() order: dense, fp16, bf16, int8, qsgd, onebit, terngrad, topk,
//           randk, threshold, dgc, powersgd)
//   byte    settings (one of the method's specs in codec_specs.h: block, levels, ratio, ...)
//   u16     count, the chunk's values (0..kMaxCount)
//   byte    datatype, byte op (dense only; lossy methods take float32 sum)
//   u32 offset, u64 call, u8 rank, u8 peer    the ChunkInfo
//   byte    what the local chunk holds (zeros, a ramp, values with NaN/inf, hashed bits)
//   rest    the payload, as received (its size is the size the header announced)
// Contract (compress/codec.h): decode and combine either work or throw squeeze::Error kRemote
// ("rank P sent a malformed <codec> payload ..."), never touching memory outside their buffers
// (every buffer is exactly its size, so ASan sees one byte past it) and never hitting UB; they
// accept and reject the same payloads, and combine gives local + decode(payload) (in place too).
// NaN and inf in a payload are data: the partial sum holding them is then re-encoded, as the
// next hop does, and this rank's own payload must decode again.
// PowerSGD is not a chunk codec: what a peer sends it are the dense all-reduces of P and Q (the
// dense codec's raw payloads, fuzzed as dense), whose values then go through Gram-Schmidt and
// the low-rank products; that arithmetic is fuzzed here on peer-chosen P and Q.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "compress/codecs.h"
#include "device/linalg.h"
#include "tests/fuzz/codec_specs.h"
#include "tests/fuzz/fuzz_util.h"

using namespace squeeze;

namespace {

constexpr size_t kMaxCount = fuzz::kMaxCodecCount;

// A buffer of exactly n bytes (ASan flags the first byte past it), 16-byte aligned like the
// executor's scratch buffers.
struct Buffer {
  explicit Buffer(size_t n) : bytes(n), data(new (std::align_val_t(16)) uint8_t[n ? n : 1]) {}
  ~Buffer() { ::operator delete[](data, std::align_val_t(16)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* f() { return reinterpret_cast<float*>(data); }
  size_t bytes;
  uint8_t* data;
};

void fillLocal(uint8_t pattern, uint8_t* p, size_t bytes, DataType dtype) {
  const size_t n = bytes / 4;
  float* f = reinterpret_cast<float*>(p);
  switch (pattern % 4) {
    case 0:
      std::memset(p, 0, bytes);
      break;
    case 1:
      if (dtype != DataType::kFloat32) {
        for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(i * 7);
      } else {
        for (size_t i = 0; i < n; ++i) f[i] = float(i % 13) * 0.25f - 1.5f;
      }
      break;
    case 2:
      if (dtype != DataType::kFloat32) {
        std::memset(p, 0xff, bytes);
      } else {
        const float special[] = {NAN, INFINITY, -INFINITY, -0.0f, 3e38f, 1e-45f, 1.0f, -2.0f};
        for (size_t i = 0; i < n; ++i) f[i] = special[(i + pattern / 4) % 8];
      }
      break;
    default:
      for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  }
}

bool sameValue(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

const unsigned kRemoteOnly = fuzz::codeBit(ErrorCode::kRemote);

// Runs a decode or combine; returns whether it rejected the payload, which it may only do with
// Error(kRemote) in the one sentence shape of raiseMalformed (compress/codec.h).
template <class F>
bool rejects(const char* what, const Codec& codec, const ChunkInfo& at, F&& body) {
  std::string message;
  const bool threw = fuzz::expectOnlyErrors(what, kRemoteOnly, [&] {
    try {
      body();
    } catch (const Error& e) {
      message = e.what();
      throw;
    }
  });
  const std::string want = strCat("rank ", at.peer, " sent a malformed ", codec.name(),
                                  " payload to rank ", at.rank, ": ");
  if (threw && message.rfind(want, 0) != 0)
    fuzz::fail(strCat(what, " rejected a payload without naming the sender and the codec (\"", want,
                      "...\"): ", message));
  return threw;
}

// PowerSGD's consumption of peer values: P (n x r) and Q (m x r) as the all-reduces deliver
// them, over a local M of count values. Nothing here may throw.
void powerSgdMath(fuzz::Input& in, const float* local, size_t count) {
  if (count == 0) return;
  const size_t m = 1 + in.pick(count);  // any view (n-1) m < count <= n m
  const size_t n = (count + m - 1) / m;
  const size_t r = 1 + in.pick(std::min<size_t>(n, 4));
  std::vector<float> p(n * r, 0.0f), q(m * r, 0.0f), mine(m * r), out(count), residual(count);
  const size_t pBytes = std::min(in.left(), p.size() * 4);
  std::memcpy(p.data(), in.rest(), pBytes);
  const size_t qBytes = std::min(in.left() - pBytes, q.size() * 4);
  std::memcpy(q.data(), in.rest() + pBytes, qBytes);
  fuzz::expectOnlyErrors("powersgd arithmetic", 0, [&] {
    device::cpuOrthonormalize(p.data(), n, r);
    for (float v : p)
      if (!std::isfinite(v)) fuzz::fail("cpuOrthonormalize left a non-finite value in P^");
    device::cpuMatTMulPanels(local, count, n, m, p.data(), r, mine.data());
    (void)device::cpuSquaredNorm(mine.data(), mine.size());
    device::cpuLowRankApply(p.data(), q.data(), n, m, r, count, local, 4.0f, out.data(),
                            residual.data());
    device::cpuMatMulPanels(out.data(), count, n, m, q.data(), r, p.data());
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const auto& table = fuzz::codecSpecs();
  const size_t methodIndex = in.byte() % table.size();
  const auto& specs = table[methodIndex];
  const char* specText = specs[in.byte() % specs.size()];
  const size_t count = in.pick(kMaxCount + 1);
  const CodecSpec spec = CodecSpec::parse(specText);
  const CodecMethod& method = *findCodecMethod(spec.method);
  DataType dtype = static_cast<DataType>(in.byte() % kNumDataTypes);
  RedOp op = static_cast<RedOp>(in.byte() % kNumRedOps);
  if (method.lossy) {
    dtype = DataType::kFloat32;
    op = RedOp::kSum;
  }
  ChunkInfo at;
  at.offset = in.pod<uint32_t>();
  at.call = in.pod<uint64_t>();
  at.rank = in.byte() % 8;
  at.peer = in.byte() % 8;
  const uint8_t pattern = in.byte();

  std::unique_ptr<CodecHandle> handle = createCodecHandle(spec, count, dtype);
  Codec& codec = *handle->chunkCodec();
  const size_t esz = dataTypeSize(dtype);
  Buffer local(count * esz);
  fillLocal(pattern, local.data, local.bytes, dtype);
  if (std::string(method.name) == "powersgd") {
    fuzz::Input math = in;
    powerSgdMath(math, local.f(), count);
  }

  Buffer payload(in.left());
  if (in.left()) std::memcpy(payload.data, in.rest(), in.left());

  Buffer decoded(count * esz);
  const bool decodeThrew = rejects("decode", codec, at, [&] {
    codec.decode(payload.data, payload.bytes, count, dtype, at, decoded.data);
  });
  Buffer out(count * esz);
  const bool combineThrew = rejects("combine", codec, at, [&] {
    codec.combine(out.data, local.data, payload.data, payload.bytes, count, dtype, op, at);
  });
  Buffer inPlace(count * esz);
  if (count) std::memcpy(inPlace.data, local.data, inPlace.bytes);
  const bool inPlaceThrew = rejects("combine in place", codec, at, [&] {
    codec.combine(inPlace.data, inPlace.data, payload.data, payload.bytes, count, dtype, op, at);
  });
  if (decodeThrew != combineThrew || combineThrew != inPlaceThrew)
    fuzz::fail(strCat(codec.name(), ": decode ", decodeThrew ? "rejected" : "accepted",
                      ", combine ", combineThrew ? "rejected" : "accepted", ", in-place combine ",
                      inPlaceThrew ? "rejected" : "accepted", " the same payload"));
  if (decodeThrew) return 0;

  if (dtype == DataType::kFloat32 && op == RedOp::kSum) {
    for (size_t i = 0; i < count; ++i) {
      const float want = local.f()[i] + decoded.f()[i];
      if (!sameValue(out.f()[i], want) || !sameValue(inPlace.f()[i], want))
        fuzz::fail(strCat(codec.name(), ": combine gave ", out.f()[i], " (in place ",
                          inPlace.f()[i], ") at ", i, " where local + decode is ", want));
    }
  }

  // The next hop re-encodes the partial sum, NaN and all; this rank's payload must decode.
  if (dtype == DataType::kFloat32) {
    const size_t bound = codec.maxEncodedBytes(count, dtype);
    Buffer again(bound);
    std::vector<float> residual(count, 0.0f);
    EncodeNorms norms;
    ChunkInfo self = at;
    self.peer = at.rank;
    size_t bytes = 0;
    fuzz::expectOnlyErrors("encodeFeedback", 0, [&] {
      bytes =
          codec.encodeFeedback(out.data, count, dtype, self, again.data, residual.data(), &norms);
    });
    if (bytes > bound)
      fuzz::fail(strCat(codec.name(), " encoded ", bytes, " bytes, over its bound ", bound));
    Buffer exact(bytes);
    if (bytes) std::memcpy(exact.data, again.data, bytes);
    Buffer back(count * esz);
    fuzz::expectOnlyErrors("decode of this rank's own payload", 0, [&] {
      codec.decode(exact.data, exact.bytes, count, dtype, self, back.data);
    });
  }
  return 0;
}
