// Compressed all-reduce on device buffers against the host path, ranks as threads sharing one GPU:
//   - every codec method of the registry (squeeze::codecMethods(), with a few settings each), at
//     1, 2 and 4 ranks over the default transports (shm), shm and tcp (device calls stage
//     through pinned host memory, device/call_queue.h) and several algorithms, five calls in a
//     row (sum and avg, in place and not, so the error-feedback state carries; one of them runs
//     the device codec on host buffers, so its state moves back and forth; a last one runs a
//     codec loaded with the device codec's saved state): each device
//     result, the codec's saved state (sqzCodecSaveState) and its
//     statistics equal those of the same calls on host buffers through a second communicator
//     (sqzCommSplit of the first), bit for bit; PowerSGD (cuBLAS) and DGC with clipping (its norm
//     is summed in another order) to float tolerance; the gain (norms summed in another order on
//     the GPU) to 1e-7 relative, where the device call measured one (PowerSGD's one-rank calls
//     run on the caller's stream, which keeps the last gain a call measured:
//     CodecHandle::enqueueOnStream);
//   - each chunk codec by itself (Codec::encodeFeedback, encode, decode, combine in place and
//     not) on device and on pinned payloads: the host's payload bytes, residual and values; and
//     corrupt payloads raise the host's error, word for word, without touching memory they
//     should not.
// main() is gpu_main.cc: without a GPU the binary exits 77 (skipped).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../collective/test_util.h"
#include "base/error.h"
#include "compress/codecs.h"
#include "device/context.h"
#include "tests/gpu/compress_checks.h"

namespace sqztest {
namespace {

// ---- the cases -------------------------------------------------------------------------------

struct SpecCase {
  std::string spec;
  bool exact = true;           // bit for bit; else to float tolerance
  size_t maxCount = SIZE_MAX;  // counts above it are skipped
  // Toleranced only: elements per 1000 allowed beyond the tolerance (DGC with clipping: a value
  // that the last bit of the clipping factor moves across the top-k threshold).
  size_t outliersPerMille = 0;
};

// The specs a registered method runs with; every method has at least one.
std::vector<SpecCase> casesFor(const std::string& m) {
  if (m == "dense") return {{"dense"}};
  if (m == "topk")
    return {{"topk:ratio=0.05,min_bytes=0"}, {"topk:ratio=0.05,sample=1,min_bytes=0"},
            {"topk:ratio=0.3"}};
  if (m == "randk")
    return {{"randk:ratio=0.05,min_bytes=0"}, {"randk:ratio=0.02,seed=7,ef=0,min_bytes=0"}};
  if (m == "threshold")
    return {{"threshold:threshold=0.5,min_bytes=0"}, {"threshold:threshold=0.01,min_bytes=0"}};
  if (m == "dgc")
    return {{"dgc:ratio=0.05,momentum=0.9,min_bytes=0"},
            {"dgc:ratio=0.01,sample=0,ef=0,warmup=2,min_bytes=0"},
            {"dgc:ratio=0.05,clip=1,min_bytes=0", false, 5000, 5}};
  if (m == "powersgd")
    return {{"powersgd:rank=2,min_bytes=0", false}, {"powersgd:rank=3,cols=50,ef=0", false}};
  if (m == "qsgd") return {{"qsgd:min_bytes=0"}, {"qsgd:levels=4,block=100,seed=3,min_bytes=0"}};
  // The adaptive methods' saved policies hold measured step times (GraVAC) or a norm summed on
  // the GPU in another order (Accordion), so they compare to tolerance (the arrays; the policy
  // section is not compared). GraVAC's figures come from a strided sample of x, the same values
  // on the GPU, so its decisions (window 2: two in five calls) and results match the host's.
  if (m == "gravac")
    return {{"gravac:cf_min=4,cf_max=64,window=2,eps=0.3,omega=0.5,min_bytes=0", false},
            {"gravac:base=randk,cf_min=4,cf_max=64,window=2,eps=0.1,omega=0.9,min_bytes=0",
             false}};
  if (m == "accordion")
    return {{"accordion:cf_low=4,cf_high=40,interval=2,min_bytes=0", false}};
  if (m == "int8" || m == "onebit" || m == "terngrad")
    return {{m + ":min_bytes=0"}, {m + ":block=100,min_bytes=0"}};
  return {{m + ":min_bytes=0"}, {m}};  // the second: default min_bytes, small calls go dense
}

constexpr size_t kCounts[] = {1, 4099, 70001};
// Calls in a row per codec (then one more through a codec loaded with the saved state); call
// kHostCall runs the device codec on host buffers (its state goes back to the host, and the next
// device call uploads it again).
constexpr int kCalls = 5;
constexpr int kHostCall = 2;

bool nearRel(double a, double b, double tol) {
  return a == b || std::fabs(a - b) <= tol * std::max(std::fabs(a), std::fabs(b));
}

void compareStats(sqzCodec_t dev, sqzCodec_t host, const SpecCase& c, const std::string& key,
                  std::vector<std::string>& failures, bool gainMeasured) {
  sqzCodecStats_t sd{}, sh{};
  if (sqzCodecGetStats(dev, &sd) != sqzSuccess || sqzCodecGetStats(host, &sh) != sqzSuccess) {
    failures.push_back(key + ": sqzCodecGetStats failed");
    return;
  }
  if (sd.calls != sh.calls || sd.wireBytes != sh.wireBytes || sd.denseBytes != sh.denseBytes ||
      sd.lastRatio != sh.lastRatio)
    failures.push_back(key + ": stats differ: calls " + std::to_string(sd.calls) + "/" +
                       std::to_string(sh.calls) + ", wire bytes " + std::to_string(sd.wireBytes) +
                       "/" + std::to_string(sh.wireBytes) + ", dense bytes " +
                       std::to_string(sd.denseBytes) + "/" + std::to_string(sh.denseBytes));
  const bool normOk = c.exact ? sd.residualNorm == sh.residualNorm
                              : nearRel(sd.residualNorm, sh.residualNorm, 1e-2) ||
                                    std::fabs(sd.residualNorm - sh.residualNorm) <= 1e-4;
  const double gainTol = c.exact ? 1e-7 : 1e-2;
  if (!normOk)
    failures.push_back(key + ": residual norm " + std::to_string(sd.residualNorm) + " vs host " +
                       std::to_string(sh.residualNorm));
  if (gainMeasured && !nearRel(sd.gain, sh.gain, gainTol))
    failures.push_back(key + ": gain " + std::to_string(sd.gain) + " vs host " +
                       std::to_string(sh.gain));
}

void compareStates(sqzCodec_t dev, sqzCodec_t host, const SpecCase& c, size_t count,
                   const std::string& key, std::vector<std::string>& failures) {
  const std::vector<char> bd = saveState(dev), bh = saveState(host);
  if (bd.empty() || bh.empty()) {
    failures.push_back(key + ": sqzCodecSaveState failed");
    return;
  }
  if (c.exact) {
    if (bd != bh) failures.push_back(key + ": saved state differs from the host codec's");
    return;
  }
  const SavedState pd = parseState(bd), ph = parseState(bh);
  const size_t outliers = c.outliersPerMille * count / 1000;
  if (!pd.ok || !ph.ok || pd.header != ph.header || pd.arrays.size() != ph.arrays.size()) {
    failures.push_back(key + ": saved state's layout differs from the host codec's");
    return;
  }
  for (size_t a = 0; a < pd.arrays.size(); ++a) {
    const std::string why = pd.arrays[a].first != ph.arrays[a].first
                                ? "names differ"
                                : closeEnough(pd.arrays[a].second, ph.arrays[a].second, 1e-3,
                                              outliers);
    if (!why.empty())
      failures.push_back(key + ": state array '" + ph.arrays[a].first + "': " + why);
  }
}

// Device codec vs host codec after a call: statistics (unless the device codec's were reset by
// a load; the gain where the device call measured one) and state.
void compareCodecs(sqzCodec_t dev, sqzCodec_t host, const SpecCase& c, size_t count,
                   const std::string& key, std::vector<std::string>& failures, bool withStats,
                   bool gainMeasured) {
  if (withStats) compareStats(dev, host, c, key, failures, gainMeasured);
  compareStates(dev, host, c, count, key, failures);
}

void compareResults(const std::vector<float>& dres, const std::vector<float>& hres,
                    const SpecCase& c, const std::string& key,
                    std::vector<std::string>& failures) {
  if (c.exact) {
    if (!sameBits(dres, hres))
      failures.push_back(key + ": device result differs from the host path at " +
                         firstDifference(dres, hres));
    return;
  }
  const size_t outliers = c.outliersPerMille * hres.size() / 1000;
  if (std::string why = closeEnough(dres, hres, 1e-3, outliers); !why.empty())
    failures.push_back(key + ": device result is not close to the host path's: " + why);
}

// One spec at one count: kCalls calls on device buffers (comm) and on host buffers (hostComm),
// then one more through a codec loaded with the device codec's saved state.
void runSpec(sqzComm_t comm, sqzComm_t hostComm, int rank, const SpecCase& c, size_t count,
             cudaStream_t stream, std::vector<std::string>& failures) {
  const std::string base = c.spec + " count=" + std::to_string(count);
  setStatus(base);
  sqzCodec_t dev = nullptr, host = nullptr, loaded = nullptr;
  if (sqzCodecCreate(&dev, c.spec.c_str(), count, sqzFloat32, comm) != sqzSuccess ||
      sqzCodecCreate(&host, c.spec.c_str(), count, sqzFloat32, hostComm) != sqzSuccess ||
      sqzCodecCreate(&loaded, c.spec.c_str(), count, sqzFloat32, comm) != sqzSuccess) {
    failures.push_back(base + ": sqzCodecCreate: " + sqzGetLastError(comm) + " / " +
                       sqzGetLastError(hostComm));
    for (sqzCodec_t codec : {dev, host, loaded})
      if (codec) sqzCodecDestroy(codec);
    return;
  }
  const size_t bytes = count * sizeof(float);
  GpuBytes din(bytes, false, stream), dout(bytes, false, stream);
  for (int call = 0; call <= kCalls; ++call) {
    const std::string key = base + " call " + std::to_string(call);
    const sqzRedOp_t op = call % 2 ? sqzAvg : sqzSum;
    const bool inPlace = call % 2 == 1;
    const std::vector<float> in = inputs(rank, call, count);
    std::vector<float> hin = in, hout(count, -1.0f);
    if (sqzAllReduceCompressed(hin.data(), inPlace ? hin.data() : hout.data(), count, sqzFloat32,
                               op, host, hostComm, nullptr) != sqzSuccess) {
      failures.push_back(key + ": host call: " + sqzGetLastError(hostComm));
      break;
    }
    const bool last = call == kCalls;  // through `loaded`, on the device
    if (last) {
      const std::vector<char> state = saveState(dev);
      if (state.empty() ||
          sqzCodecLoadState(loaded, state.data(), state.size()) != sqzSuccess) {
        failures.push_back(key + ": saving or loading the device codec's state: " +
                           sqzGetLastError(nullptr));
        break;
      }
    }
    std::vector<float> dres;
    if (!deviceCodecCall(last ? loaded : dev, comm, in, op, inPlace, call == kHostCall, din, dout,
                         stream, key, dres, failures))
      break;
    const char* algo = "";
    sqzCommGetLastAlgorithm(comm, &algo);
    const bool onStream = call != kHostCall && std::string(algo) == "stream";
    const bool gainMeasured = !onStream || c.spec.rfind("powersgd", 0) != 0;
    compareResults(dres, inPlace ? hin : hout, c, key, failures);
    compareCodecs(last ? loaded : dev, host, c, count, key, failures, /*withStats=*/!last,
                  gainMeasured);
  }
  for (sqzCodec_t codec : {dev, host, loaded}) sqzCodecDestroy(codec);
}

struct Params {
  const char* transports;
  int nranks;
  const char* algo;  // SQZ_ALGO ("": the tuner's choice)
};

class DeviceCompressed : public ::testing::TestWithParam<Params> {};

TEST_P(DeviceCompressed, EveryCodecMatchesTheHostPath) {
  const Params p = GetParam();
  RunOptions opts;
  opts.transports = p.transports;
  opts.chunkBytes = 128 << 10;  // pieces of up to 32768 values (sampled top-k starts there)
  opts.timeoutMs = 60000;
  opts.watchdogSeconds = 500;  // below meson's 600 s, so its per-rank report prints
  std::vector<std::vector<std::string>> failures(p.nranks);
  RunResult run;
  {
    ScopedEnv env;
    if (*p.algo)
      env.set("SQZ_ALGO", p.algo);
    else
      env.unset("SQZ_ALGO");
    // The tuner's choice through the host: where the ranks share a window, a codec whose
    // payload has a fixed size would run on the stream instead (StreamCompressed below), whose
    // algorithm gives other bits than the host's.
    if (!*p.algo && p.nranks > 1)
      env.set("SQZ_DEVICE_DIRECT_BYTES", "0");
    else
      env.unset("SQZ_DEVICE_DIRECT_BYTES");
    // The device communicator and its split host twin must pick the same algorithm for a lossy
    // codec's results to match bit for bit; the tuner's calibration measures each one on its
    // own, so on a busy machine they could price differently (seen on the stand-in: fp16 at
    // 4099 values, 1 run in 3).
    env.set("SQZ_TUNER_CALIBRATE", "0");
    run = runRanks(p.nranks, opts, [&](sqzComm_t& comm, int rank) {
      std::vector<std::string>& fails = failures[rank];
      sqzComm_t hostComm = nullptr;
      if (sqzCommSplit(comm, 0, rank, &hostComm, nullptr) != sqzSuccess || !hostComm) {
        fails.push_back(std::string("sqzCommSplit: ") + sqzGetLastError(comm));
        return;
      }
      // Non-blocking: another rank's synchronous copies (the legacy stream) must not wait for
      // this rank's stream while its call holds it.
      cudaStream_t stream;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      for (const auto& method : squeeze::codecMethods())
        for (const SpecCase& c : casesFor(method.name))
          for (size_t count : kCounts)
            if (count <= c.maxCount) runSpec(comm, hostComm, rank, c, count, stream, fails);
      cudaStreamDestroy(stream);
      sqzCommDestroy(hostComm);
    });
  }
  reportFailures(run, failures);
}

INSTANTIATE_TEST_SUITE_P(
    OneGpu, DeviceCompressed,
    ::testing::Values(Params{"cuda_ipc,shm,tcp", 1, ""}, Params{"cuda_ipc,shm,tcp", 2, "ring"},
                      Params{"cuda_ipc,shm,tcp", 4, "ring"}, Params{"cuda_ipc,shm,tcp", 4, "rhd"},
                      Params{"shm", 2, ""}, Params{"shm", 4, "tree"}, Params{"tcp", 2, "ps"},
                      Params{"tcp", 4, "naive"}),
    [](const auto& info) {
      std::string t = info.param.transports;
      t = t.find("cuda_ipc") == 0 ? std::string("default") : t;  // cuda_ipc stands for shm
      return t + "_" + std::to_string(info.param.nranks) + "_" +
             (*info.param.algo ? info.param.algo : "auto");
    });

// ---- each chunk codec by itself ----------------------------------------------------------------

using squeeze::ChunkInfo;
using squeeze::Codec;
using squeeze::DataType;
using squeeze::EncodeNorms;
using squeeze::RedOp;

// What a decode or combine did: the error it raised ("" for none) and the values it wrote.
struct Outcome {
  std::string error;
  std::vector<float> values;
};

template <class Fn>
std::string errorOf(Fn fn) {
  try {
    fn();
  } catch (const squeeze::Error& e) {
    return std::to_string(static_cast<int>(e.code())) + ": " + e.what();
  }
  return "";
}

// The chunk codecs of every registered method (PowerSGD's is the dense codec of its inner
// all-reduces), in the specs the collective test uses.
std::vector<std::string> chunkSpecs() {
  std::vector<std::string> specs;
  for (const auto& m : squeeze::codecMethods())
    for (const SpecCase& c : casesFor(m.name)) specs.push_back(c.spec);
  return specs;
}

// Corruptions of a payload (applied to the host and the device copy alike): the payload as it
// is, one word short, a wrong first or second header word, a sparse list's index out of range
// or not ascending, a byte in the middle flipped.
using Corrupt = void (*)(std::vector<unsigned char>& p, size_t count);
void putWord(std::vector<unsigned char>& p, size_t at, uint32_t v) {
  if (at + 4 <= p.size()) std::memcpy(&p[at], &v, 4);
}
const std::pair<const char*, Corrupt> kCorruptions[] = {
    {"intact", [](std::vector<unsigned char>&, size_t) {}},
    {"short",
     [](std::vector<unsigned char>& p, size_t) { p.resize(p.size() >= 4 ? p.size() - 4 : 0); }},
    {"word 0", [](std::vector<unsigned char>& p, size_t) { putWord(p, 0, 0x12345678u); }},
    {"word 1", [](std::vector<unsigned char>& p, size_t) { putWord(p, 4, 0xfffffff0u); }},
    {"index out of range",
     [](std::vector<unsigned char>& p, size_t count) { putWord(p, 8, uint32_t(count + 5)); }},
    {"index repeated",
     [](std::vector<unsigned char>& p, size_t) {
       if (p.size() >= 16) std::memcpy(&p[12], &p[8], 4);
     }},
    {"middle byte", [](std::vector<unsigned char>& p, size_t) {
       if (!p.empty()) p[p.size() / 2] ^= 0x5a;
     }},
};

void checkCodec(const std::string& spec, size_t count, bool pinned, cudaStream_t stream) {
  const std::string key =
      spec + " count=" + std::to_string(count) + (pinned ? " pinned" : " device");
  SCOPED_TRACE(key);
  auto handle = squeeze::createCodecHandle(squeeze::CodecSpec::parse(spec), count,
                                           DataType::kFloat32);
  Codec& codec = *handle->chunkCodec();
  const std::vector<float> x = inputs(1, 0, count), local = inputs(2, 1, count);
  std::vector<float> residual0(count);
  for (size_t i = 0; i < count; ++i) residual0[i] = 0.01f * inputValue(3, 2, i);
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  const std::unique_ptr<squeeze::device::Context> gpu =
      squeeze::device::makeCudaContext(device, stream);
  gpu->prepareThread();
  const ChunkInfo atHost{4096, 3, 1, 2};
  const ChunkInfo atDev{4096, 3, 1, 2, gpu.get()};
  const size_t bound = codec.maxEncodedBytes(count, DataType::kFloat32);
  const size_t bytes = count * sizeof(float);

  // encodeFeedback and encode.
  std::vector<unsigned char> ph(bound);
  std::vector<float> rh = residual0;
  EncodeNorms nh, nd;
  const size_t bh = codec.encodeFeedback(x.data(), count, DataType::kFloat32, atHost, ph.data(),
                                         rh.data(), &nh);
  ph.resize(bh);
  GpuBytes dx(bytes), dres(bytes), dpay(bound, pinned), dout(bytes), dlocal(bytes);
  dx.put(x);
  dres.put(residual0);
  size_t bd = 0;
  EXPECT_EQ(errorOf([&] {
              bd = codec.encodeFeedback(dx.ptr(), count, DataType::kFloat32, atDev, dpay.ptr(),
                                        dres.as<float>(), &nd);
            }),
            "");
  // The context's wait, not the stream's: the norms stay on the device until the context waits.
  EXPECT_EQ(errorOf([&] { gpu->wait("encodeFeedback"); }), "");
  ASSERT_EQ(bd, bh) << "payload size";
  EXPECT_EQ(dpay.get<unsigned char>(bd), ph) << "encodeFeedback's payload";
  const std::vector<float> rd = dres.get<float>(count);
  EXPECT_TRUE(sameBits(rd, rh)) << "residual: " << firstDifference(rd, rh);
  EXPECT_TRUE(nearRel(nd.inputSq, nh.inputSq, 1e-9)) << nd.inputSq << " vs " << nh.inputSq;
  EXPECT_TRUE(nearRel(nd.sentSq, nh.sentSq, 1e-9)) << nd.sentSq << " vs " << nh.sentSq;
  // Stream-ordered: cudaMemset of device memory may return before it has run, on the legacy
  // stream, which a non-blocking stream does not wait for (it raced the encode on the H100).
  EXPECT_EQ(cudaMemsetAsync(dpay.ptr(), 0, bound, stream), cudaSuccess);
  const size_t be = codec.encode(dx.ptr(), count, DataType::kFloat32, atDev, dpay.ptr());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(be, bh);
  EXPECT_EQ(dpay.get<unsigned char>(be), ph) << "encode's payload";

  // decode and combine of intact and corrupt payloads: the same values, or the same error.
  for (const auto& [what, corrupt] : kCorruptions) {
    SCOPED_TRACE(what);
    std::vector<unsigned char> p = ph;
    corrupt(p, count);
    std::vector<unsigned char> padded = p;
    padded.resize(std::max(p.size(), bound));  // the device copy sits in a bound-sized buffer
    dpay.put(padded.data(), padded.size());
    const bool intact = p == ph;
    for (int mode = 0; mode < 3; ++mode) {  // decode, combine, combine in place
      const std::vector<float> initial = mode == 2 ? local : std::vector<float>(count, -1.0f);
      Outcome h, d;
      h.values = initial;
      h.error = errorOf([&] {
        if (mode == 0)
          codec.decode(p.data(), p.size(), count, DataType::kFloat32, atHost, h.values.data());
        else
          codec.combine(h.values.data(), mode == 1 ? local.data() : h.values.data(), p.data(),
                        p.size(), count, DataType::kFloat32, RedOp::kSum, atHost);
      });
      dout.put(initial);
      dlocal.put(local);
      // A header is checked when the context next waits (Context::checkWords): its wait is
      // part of the call.
      d.error = errorOf([&] {
        if (mode == 0)
          codec.decode(dpay.ptr(), p.size(), count, DataType::kFloat32, atDev, dout.ptr());
        else
          codec.combine(dout.ptr(), mode == 1 ? dlocal.ptr() : dout.ptr(), dpay.ptr(), p.size(),
                        count, DataType::kFloat32, RedOp::kSum, atDev);
        gpu->wait("decode");
      });
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      d.values = dout.get<float>(count);
      const char* name = mode == 0 ? "decode" : mode == 1 ? "combine" : "combine in place";
      EXPECT_EQ(d.error, h.error) << name;
      // A corrupt payload may carry NaNs, whose payload bits the GPU's arithmetic does not keep.
      if (h.error.empty() && d.error.empty()) {
        EXPECT_TRUE(intact ? sameBits(d.values, h.values) : sameOrBothNan(d.values, h.values))
            << name << ": " << firstDifference(d.values, h.values);
      }
      // A size the host checks fails before any kernel; a header or index list is compared
      // once the stream has brought it back (Context::checkWords, checkIndices), when the
      // kernels after it have run (skipping any index past the chunk): the output of an
      // asynchronous error is unspecified, as NCCL's. Only the size errors write nothing.
      if (!h.error.empty() && h.error.find("bytes for a chunk of") != std::string::npos) {
        EXPECT_TRUE(sameBits(d.values, initial)) << name << " wrote before raising";
      }
    }
  }
}

TEST(DeviceChunkCodecs, SameBytesValuesAndErrorsAsTheHost) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (const std::string& spec : chunkSpecs())
    for (size_t count : {size_t(1), size_t(7), size_t(1000), size_t(40000)})
      for (bool pinned : {false, true}) checkCodec(spec, count, pinned, stream);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace sqztest
