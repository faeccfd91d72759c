// Fuzz target `state`: sqzCodecLoadState, the parser of checkpointed codec state (a buffer a
// user hands back, possibly truncated, from another version, or corrupt). Input: a byte picking
// one of the codecs below (every kind of state: none, a residual, DGC's momentum, PowerSGD's Q,
// with and without error feedback), then the buffer. The codecs live on one 1-rank communicator
// made once (LLVMFuzzerInitialize), through the public C API only.
// Contract: sqzCodecLoadState returns sqzSuccess or sqzInvalidArgument; a rejected buffer leaves
// the state exactly as it was (saved bytes before == after); an accepted one saves and loads
// again; and either way the codec still runs an all-reduce.
#include <squeeze/squeeze.h>

#include <cstdlib>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/state_codecs.h"

using squeeze::strCat;
using squeeze::fuzz::fail;

namespace {

using squeeze::fuzz::kNumStateCodecs;
using squeeze::fuzz::kStateCodecs;
constexpr size_t kCount = squeeze::fuzz::kStateCount;

sqzComm_t gComm = nullptr;
sqzCodec_t gCodecs[kNumStateCodecs] = {};

std::vector<char> save(sqzCodec_t codec) {
  size_t bytes = 0;
  if (sqzCodecSaveState(codec, nullptr, &bytes) != sqzSuccess)
    fail(strCat("sqzCodecSaveState (size): ", sqzGetLastError(nullptr)));
  std::vector<char> out(bytes);
  if (sqzCodecSaveState(codec, out.data(), &bytes) != sqzSuccess || bytes != out.size())
    fail(strCat("sqzCodecSaveState: ", sqzGetLastError(nullptr)));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Loopback only (the rules of this machine), and no warning line per rejected buffer.
  setenv("SQZ_SOCKET_IFNAME", "lo", 0);
  setenv("SQZ_DEBUG", "NONE", 0);
  sqzUniqueId id;
  if (sqzGetUniqueId(&id) != sqzSuccess || sqzCommInitRank(&gComm, 1, id, 0) != sqzSuccess)
    fail(strCat("cannot make the 1-rank communicator: ", sqzGetLastError(nullptr)));
  for (size_t i = 0; i < kNumStateCodecs; ++i)
    if (sqzCodecCreate(&gCodecs[i], kStateCodecs[i].spec, kCount, kStateCodecs[i].dtype, gComm) !=
        sqzSuccess)
      fail(strCat("sqzCodecCreate(", kStateCodecs[i].spec, "): ", sqzGetLastError(gComm)));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t which = data[0] % kNumStateCodecs;
  sqzCodec_t codec = gCodecs[which];
  const char* spec = kStateCodecs[which].spec;
  // An exact-size copy: ASan sees a read past the end of what the caller passed.
  std::vector<uint8_t> buf(data + 1, data + size);
  static const uint8_t kEmpty = 0;

  const std::vector<char> before = save(codec);
  const sqzResult_t rc = sqzCodecLoadState(codec, buf.empty() ? &kEmpty : buf.data(), buf.size());
  if (rc != sqzSuccess && rc != sqzInvalidArgument)
    fail(strCat(spec, ": sqzCodecLoadState returned ", sqzGetErrorString(rc), ": ",
                sqzGetLastError(nullptr)));
  if (rc != sqzSuccess) {
    if (save(codec) != before)
      fail(strCat(spec, ": a rejected state changed the codec's state (", sqzGetLastError(nullptr),
                  ")"));
  } else {
    const std::vector<char> after = save(codec);
    if (sqzCodecLoadState(codec, after.data(), after.size()) != sqzSuccess)
      fail(strCat(spec, ": the state saved right after a successful load does not load: ",
                  sqzGetLastError(nullptr)));
  }

  // Still usable: one compressed all-reduce with the state it now has.
  std::vector<int32_t> in(kCount), out(kCount);
  for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<int32_t>(i);
  if (kStateCodecs[which].dtype == sqzFloat32)
    for (size_t i = 0; i < kCount; ++i) reinterpret_cast<float*>(in.data())[i] = 0.5f * float(i);
  const sqzResult_t ar = sqzAllReduceCompressed(
      in.data(), out.data(), kCount, kStateCodecs[which].dtype, sqzSum, codec, gComm, nullptr);
  if (ar != sqzSuccess)
    fail(strCat(spec, ": the all-reduce after ", rc == sqzSuccess ? "loading" : "rejecting",
                " a state failed: ", sqzGetErrorString(ar), ": ", sqzGetLastError(gComm)));
  return 0;
}
