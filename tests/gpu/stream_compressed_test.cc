// Compressed all-reduce on device buffers of ranks on one GPU (threads of one process), or of one
// rank alone, where the call runs on the caller's stream alone (CodecHandle::enqueueOnStream: a
// codec whose payload has a fixed size, SQZ_ALGO unset; the dense method): results, residuals
// and gains against a CPU model of that algorithm (bit for bit; the gain to 1e-6), state moved
// to the host and back between calls, the pay-off guard's calls in both modes, and ranks whose
// codecs differ told so.
// main() is gpu_main.cc: without a GPU the binary exits 77 (skipped).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <functional>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../collective/test_util.h"
#include "base/crypto.h"
#include "compress/codec.h"
#include "compress/handle.h"
#include "compress/spec.h"
#include "device/context.h"
#include "tests/gpu/compress_checks.h"

namespace sqztest {
namespace {

// The ranks' codec state in the model, as the codec saves it: per array (the residual, then DGC's
// momentum or PowerSGD's Q), per rank, the values (an empty residual: ef=0); at first a new
// codec's, the same on every rank.
using ModelState = std::vector<std::vector<std::vector<float>>>;

ModelState initialState(const std::string& spec, size_t count, int nranks) {
  auto handle = squeeze::createCodecHandle(squeeze::CodecSpec::parse(spec), count,
                                           squeeze::DataType::kFloat32);
  const SavedState saved = parseState(handle->saveState());
  EXPECT_TRUE(saved.ok) << spec;
  ModelState state;
  for (const auto& array : saved.arrays) state.emplace_back(nranks, array.second);
  return state;
}

// Whether device results match the CPU model's bits: PowerSGD's products are cuBLAS's on a GPU
// and DGC's clipping norm is summed in another order there (to float tolerance, with a few
// elements that the clipping factor's last bit moves across the top-k threshold), the CPU twins
// on the stand-in.
bool bitExact(const std::string& spec) {
  if (spec.rfind("powersgd", 0) != 0 && spec.find("clip=") == std::string::npos) return true;
  cudaDeviceProp prop{};
  int device = 0;
  cudaGetDevice(&device);
  return cudaGetDeviceProperties(&prop, device) == cudaSuccess &&
         std::string(prop.name).find("stand-in") != std::string::npos;
}

// "" where got is want (bit for bit, or to float tolerance, 5 elements in 1000 excepted, where not
// exact), else where not.
std::string mismatch(const std::vector<float>& got, const std::vector<float>& want, bool exact) {
  if (exact) return sameBits(got, want) ? "" : firstDifference(got, want);
  return closeEnough(got, want, 1e-3, got.size() * 5 / 1000);
}

// PowerSGD's compressed call on the stream (PowerSgdHandle::streamCompressed) with the CPU's
// kernels: P = M Q per rank, their mean (folded in rank order, divided), orthonormalized; Q = M^T
// P per rank, their mean; out = P Q^T (times the ranks for sum), e = M - P Q^T per rank.
std::vector<float> powerSgdReference(const squeeze::CodecSpec& parsed, size_t count, int nranks,
                                     int call, sqzRedOp_t op, ModelState& state) {
  squeeze::device::Context& host = squeeze::device::hostContext();
  const size_t r = size_t(parsed.getWhole("rank", 4, 1, 65536));
  std::vector<float>& q = state[1][0];
  const size_t m = q.size() / r, n = (count + m - 1) / m;
  std::vector<std::vector<float>> x(nranks);
  auto mean = [&](size_t len, const std::function<void(int, float*)>& of) {
    std::vector<float> sum(len), one(len);
    for (int k = 0; k < nranks; ++k) {
      of(k, one.data());
      for (size_t i = 0; i < len; ++i) sum[i] = k == 0 ? one[i] : sum[i] + one[i];
    }
    host.divide(sum.data(), len, squeeze::DataType::kFloat32, nranks);
    return sum;
  };
  for (int k = 0; k < nranks; ++k) {
    x[k] = inputs(k, call, count);
    std::vector<float>& e = state[0][k];
    for (size_t i = 0; i < e.size(); ++i) {
      x[k][i] += e[i];
      e[i] = 0;
    }
  }
  std::vector<float> p = mean(n * r, [&](int k, float* out) {
    host.matMulPanels(x[k].data(), count, n, m, q.data(), r, out);
  });
  host.orthonormalize(p.data(), n, r);
  q = mean(m * r, [&](int k, float* out) {
    host.matTMulPanels(x[k].data(), count, n, m, p.data(), r, out);
  });
  for (int k = 1; k < nranks; ++k) state[1][k] = q;
  std::vector<float> out(count);
  const float scale = op == sqzSum ? float(nranks) : 1.0f;
  for (int k = 0; k < nranks; ++k) {
    std::vector<float>& e = state[0][k];
    host.lowRankApply(p.data(), q.data(), n, m, r, count, x[k].data(), scale, out.data(),
                      e.empty() ? nullptr : e.data());
  }
  return out;
}

// What a compressed call on the caller's stream computes (CodecHandle::enqueueOnStream), on the
// host with the codec's cpu kernels: every rank's x = g + e (DGC: its prepare, u = m u + g,
// x = v + u, v = 0), its payload (encode with feedback, whole tensor, the call's number, the
// rank's own; DGC at the call's density), and the payloads decoded and added in rank order (avg:
// divided); then DGC masks u and v where a rank sent an element in full. A call sent dense:
// every rank's x added in rank order, as the stream's all-reduce folds (avg: divided), every
// residual 0, DGC's momentum and PowerSGD's Q kept. PowerSGD compressed: powerSgdReference.
// state ends as the ranks'. gains (where not null): each rank's encode's |decode|^2 / |x|^2
// (1 where nothing was encoded).
std::vector<float> streamReference(const std::string& spec, size_t count, int nranks, int call,
                                   sqzRedOp_t op, ModelState& state, bool dense = false,
                                   std::vector<double>* gains = nullptr) {
  if (gains) gains->assign(nranks, 1.0);
  const squeeze::CodecSpec parsed = squeeze::CodecSpec::parse(spec);
  const bool dgc = parsed.method == "dgc";
  // PowerSGD without a low-rank view (no Q) runs dense.
  if (parsed.method == "powersgd" && !dense && !state[1][0].empty())
    return powerSgdReference(parsed, count, nranks, call, op, state);
  dense = dense || parsed.method == "powersgd" || parsed.method == "dense";
  auto handle = squeeze::createCodecHandle(parsed, count, squeeze::DataType::kFloat32);
  squeeze::Codec& codec = *handle->chunkCodec();
  if (dgc) {  // DgcHandle::densityAt
    const double ratio = parsed.getRatio(0.001);
    const double warmup = parsed.getWhole("warmup", 0, 0, 1e15);
    codec.setRatio(call >= warmup ? ratio
                                  : std::max(ratio, std::pow(0.25, int(call * 4 / warmup) + 1)));
  }
  const float momentum = float(parsed.get("momentum", 0.9, 0, 1));
  const double clip = parsed.get("clip", 0, 0, 1e300);
  const double clipLimit = clip > 0 ? clip / std::sqrt(double(nranks)) : 0.0;  // DgcHandle's
  squeeze::device::Context& host = squeeze::device::hostContext();
  const size_t bytes = codec.maxEncodedBytes(count, squeeze::DataType::kFloat32);
  std::vector<char> payloads(bytes * nranks);
  std::vector<size_t> sizes(nranks);  // the host's top-k may send fewer entries than a GPU's k
  std::vector<std::vector<uint8_t>> nonzero(nranks, std::vector<uint8_t>(count));
  std::vector<float> out(count, 0.0f);
  for (int q = 0; q < nranks; ++q) {
    const std::vector<float> g = inputs(q, call, count);
    std::vector<float> x = g;
    std::vector<float>& e = state[0][q];
    if (dgc)
      host.dgcPrepare(g.data(), clipLimit, momentum, state[1][q].data(), e.data(), x.data(),
                      nonzero[q].data(), count);
    else
      for (size_t i = 0; i < e.size(); ++i) {
        x[i] += e[i];
        e[i] = 0;
      }
    if (dense) {
      for (size_t i = 0; i < count; ++i) out[i] = q == 0 ? x[i] : out[i] + x[i];
      continue;
    }
    squeeze::ChunkInfo at;
    at.call = uint64_t(call);
    at.rank = q;
    squeeze::EncodeNorms norms;
    sizes[q] = codec.encodeFeedback(x.data(), count, squeeze::DataType::kFloat32, at,
                                    payloads.data() + q * bytes, e.empty() ? nullptr : e.data(),
                                    &norms);
    if (gains) (*gains)[q] = norms.inputSq > 0 ? norms.sentSq / norms.inputSq : 1.0;
  }
  squeeze::ChunkInfo at;
  at.call = uint64_t(call);  // random-k's indices are the call's
  for (int q = 0; q < nranks && !dense; ++q) {
    const char* p = payloads.data() + q * bytes;
    if (q == 0)
      codec.decode(p, sizes[q], count, squeeze::DataType::kFloat32, at, out.data());
    else
      codec.combine(out.data(), out.data(), p, sizes[q], count, squeeze::DataType::kFloat32,
                    squeeze::RedOp::kSum, at);
  }
  if (op == sqzAvg && nranks > 1)
    host.divide(out.data(), count, squeeze::DataType::kFloat32, nranks);
  for (int q = 0; q < nranks && dgc && !dense; ++q)
    host.dgcMask(state[1][q].data(), state[0][q].data(), nonzero[q].data(), count);
  return out;
}

// Where the codec's saved state differs from the model's for `rank` ("": nowhere).
std::string stateDifference(sqzCodec_t codec, const ModelState& state, int rank, bool exact) {
  const SavedState saved = parseState(saveState(codec));
  if (!saved.ok || saved.arrays.size() != state.size()) return "its saved state does not parse";
  for (size_t a = 0; a < state.size(); ++a)
    if (const std::string d = mismatch(saved.arrays[a].second, state[a][rank], exact);
        !d.empty())
      return saved.arrays[a].first + " differs from the reference: " + d;
  return "";
}

class StreamCompressed : public ::testing::TestWithParam<int> {};

// Ranks on one GPU, the tuner's choice, codecs whose payload has a fixed size: each device call
// runs on the caller's stream (last algorithm "stream"), and its result and the codec's residual
// are the reference's bit for bit, over four calls (sum and avg, in place and not) so the
// residual carries; the third runs on host buffers (the host's algorithm), so the state goes to
// the host and back, and the ranks then share their residuals for the reference.
TEST_P(StreamCompressed, GatheredPayloadsDecodeInRankOrder) {
  const int nranks = GetParam();
  const std::vector<std::string> specs = {"dense", "fp16:min_bytes=0", "bf16:min_bytes=0",
                                          "int8:min_bytes=0", "int8:block=100,min_bytes=0",
                                          "qsgd:levels=4,block=100,seed=3,min_bytes=0",
                                          "onebit:min_bytes=0", "terngrad:ef=0,min_bytes=0",
                                          "topk:min_bytes=0", "topk:ratio=0.2,sample=1,min_bytes=0",
                                          "topk:ratio=0.6,min_bytes=0",
                                          "randk:ratio=0.05,seed=9,min_bytes=0",
                                          "dgc:ratio=0.01,min_bytes=0",
                                          "dgc:ratio=0.3,warmup=3,sample=0,min_bytes=0",
                                          "dgc:ratio=0.05,clip=1,min_bytes=0",
                                          "powersgd:rank=2,min_bytes=0",
                                          "powersgd:rank=3,cols=50,ef=0,min_bytes=0"};
  const size_t counts[] = {1, 4099, 70001};
  constexpr int kCallsHere = 4, kOnHost = 2;
  RunOptions opts;
  opts.transports = "cuda_ipc,shm,tcp";
  opts.watchdogSeconds = 300;
  std::vector<std::vector<std::string>> failures(nranks);
  std::barrier<> sync(nranks);
  ScopedEnv env;
  env.unset("SQZ_ALGO");
  env.set("SQZ_CODEC_AUTO_DENSE", "0");
  RunResult run = runRanks(nranks, opts, [&](sqzComm_t& comm, int rank) {
    std::vector<std::string>& fails = failures[rank];
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    for (const std::string& spec : specs)
      for (size_t count : counts) {
        const std::string base = spec + " count=" + std::to_string(count);
        setStatus(base);
        sqzCodec_t codec = nullptr;
        if (sqzCodecCreate(&codec, spec.c_str(), count, sqzFloat32, comm) != sqzSuccess) {
          fails.push_back(base + ": sqzCodecCreate: " + sqzGetLastError(comm));
          continue;
        }
        ModelState state = initialState(spec, count, nranks);
        GpuBytes din(count * sizeof(float), false, stream);
        GpuBytes dout(count * sizeof(float), false, stream);
        for (int call = 0; call < kCallsHere; ++call) {
          const std::string key = base + " call " + std::to_string(call);
          const sqzRedOp_t op = call % 2 ? sqzAvg : sqzSum;
          const bool inPlace = call % 2 == 1, onHost = call == kOnHost;
          std::vector<double> gains;
          const std::vector<float> want =
              onHost ? std::vector<float>()
                     : streamReference(spec, count, nranks, call, op, state, false, &gains);
          // Every rank waits at `sync` before its call and after its stream is through it, so
          // no rank's stream is held by a call while another rank's thread waits for its own
          // stream (ranks as threads share the GPU's hardware work queues).
          const std::vector<float> in = inputs(rank, call, count);
          if (!onHost) {
            din.put(in);
            dout.put(std::vector<float>(count, -1.0f));
            cudaStreamSynchronize(stream);
          }
          sync.arrive_and_wait();
          std::vector<float> got;
          bool ok = true;
          if (onHost) {
            ok = deviceCodecCall(codec, comm, in, op, inPlace, true, din, dout, stream, key, got,
                                 fails);
          } else if (sqzAllReduceCompressed(din.ptr(), inPlace ? din.ptr() : dout.ptr(), count,
                                            sqzFloat32, op, codec, comm, stream) != sqzSuccess) {
            fails.push_back(key + ": device call: " + sqzGetLastError(comm));
            ok = false;
          } else {
            cudaStreamSynchronize(stream);
          }
          sync.arrive_and_wait();
          sqzResult_t async = sqzSuccess;
          sqzCommGetAsyncError(comm, &async);
          if (async != sqzSuccess) {
            fails.push_back(key + ": the communicator failed: " + sqzGetLastError(comm));
            ok = false;
          }
          if (!ok) break;
          if (!onHost) got = (inPlace ? din : dout).get<float>(count);
          if (onHost) {  // every rank's state after the host's algorithm, for the reference
            const SavedState st = parseState(saveState(codec));
            if (!st.ok || st.arrays.size() != state.size()) {
              fails.push_back(key + ": the codec's saved state does not parse");
              break;
            }
            for (size_t a = 0; a < state.size(); ++a) {
              const std::vector<float>& mine = st.arrays[a].second;
              std::vector<float> all(mine.size() * nranks);
              if (!mine.empty() && sqzAllGather(mine.data(), all.data(), mine.size(), sqzFloat32,
                                                comm, nullptr) != sqzSuccess) {
                fails.push_back(key + ": sqzAllGather: " + sqzGetLastError(comm));
                break;
              }
              for (int q = 0; q < nranks; ++q)
                state[a][q].assign(all.begin() + q * mine.size(),
                                   all.begin() + (q + 1) * mine.size());
            }
            continue;
          }
          const char* algo = "";
          sqzCommGetLastAlgorithm(comm, &algo);
          if (std::string(algo) != "stream")
            fails.push_back(key + ": ran as '" + algo + "', not on the stream");
          const bool exact = bitExact(spec);
          if (const std::string d = mismatch(got, want, exact); !d.empty())
            fails.push_back(key + ": result differs from the reference: " + d);
          if (const std::string d = stateDifference(codec, state, rank, exact); !d.empty())
            fails.push_back(key + ": the codec's " + d);
          // The gain, from norms summed on the device in another order (PowerSGD's: not
          // measured on the stream).
          sqzCodecStats_t st{};
          if (spec.rfind("powersgd", 0) != 0 &&
              (sqzCodecGetStats(codec, &st) != sqzSuccess ||
               !(std::fabs(st.gain - gains[rank]) <= 1e-6 * std::max(1.0, gains[rank]))))
            fails.push_back(key + ": gain " + std::to_string(st.gain) + ", the model's " +
                            std::to_string(gains[rank]));
        }
        sqzCodecDestroy(codec);
      }
    cudaStreamDestroy(stream);
  });
  reportFailures(run, failures);
}

class StreamCompressedGuard : public ::testing::TestWithParam<int> {};

// With the pay-off guard on (the default), a call of a codec whose payload has a fixed size still
// runs on the caller's stream alone, compressed or dense as the guard decides: its first four
// calls alternate compressed, dense, compressed, dense, and the later ones follow the figures,
// which come from the GPU's times of the calls that have run (the guard has both modes measured
// by the last call). A tensor under min_bytes runs dense on the stream, every call, and the guard
// takes no part. Each call's result and residual are its mode's reference, bit for bit.
TEST_P(StreamCompressedGuard, EachCallIsItsModesReference) {
  const int nranks = GetParam();
  struct Case {
    const char* spec;
    size_t count;
    bool small;  // under min_bytes (16 KiB by default)
  };
  const Case cases[] = {{"int8:auto_dense=1", 70001, false},
                        {"int8:auto_dense=1", 1000, true},
                        {"fp16:auto_dense=1,min_bytes=0", 4099, false},
                        {"dgc:ratio=0.05,auto_dense=1,min_bytes=0", 4099, false},
                        {"powersgd:rank=2,auto_dense=1,min_bytes=0", 70001, false}};
  constexpr int kCallsHere = 8;
  RunOptions opts;
  opts.transports = "cuda_ipc,shm,tcp";
  opts.watchdogSeconds = 300;
  std::vector<std::vector<std::string>> failures(nranks);
  std::barrier<> sync(nranks);
  ScopedEnv env;
  env.unset("SQZ_ALGO");
  RunResult run = runRanks(nranks, opts, [&](sqzComm_t& comm, int rank) {
    std::vector<std::string>& fails = failures[rank];
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    for (const Case& c : cases) {
      const std::string base = std::string(c.spec) + " count=" + std::to_string(c.count);
      setStatus(base);
      sqzCodec_t codec = nullptr;
      if (sqzCodecCreate(&codec, c.spec, c.count, sqzFloat32, comm) != sqzSuccess) {
        fails.push_back(base + ": sqzCodecCreate: " + sqzGetLastError(comm));
        continue;
      }
      ModelState state = initialState(c.spec, c.count, nranks);
      GpuBytes din(c.count * sizeof(float), false, stream);
      GpuBytes dout(c.count * sizeof(float), false, stream);
      sqzCodecStats_t before{};
      for (int call = 0; call < kCallsHere; ++call) {
        const std::string key = base + " call " + std::to_string(call);
        const sqzRedOp_t op = call % 2 ? sqzAvg : sqzSum;
        const bool inPlace = call % 2 == 1;
        din.put(inputs(rank, call, c.count));
        dout.put(std::vector<float>(c.count, -1.0f));
        cudaStreamSynchronize(stream);
        sync.arrive_and_wait();  // as in StreamCompressed: no rank waits while a stream is held
        const bool ok = sqzAllReduceCompressed(din.ptr(), inPlace ? din.ptr() : dout.ptr(),
                                               c.count, sqzFloat32, op, codec, comm,
                                               stream) == sqzSuccess;
        if (!ok) fails.push_back(key + ": " + sqzGetLastError(comm));
        cudaStreamSynchronize(stream);
        sync.arrive_and_wait();
        if (!ok) break;
        sqzCodecStats_t st{};
        sqzCodecGetStats(codec, &st);
        const bool dense = st.denseCalls > before.denseCalls;
        const bool guardDense = st.guardDenseCalls > before.guardDenseCalls;
        before = st;
        if (c.small ? !dense || guardDense : call < 4 && dense != (call % 2 == 1))
          fails.push_back(key + ": ran " + (dense ? "dense" : "compressed") +
                          (guardDense ? " (the guard's)" : ""));
        const char* algo = "";
        sqzCommGetLastAlgorithm(comm, &algo);
        if (std::string(algo) != "stream")
          fails.push_back(key + ": ran as '" + algo + "', not on the stream");
        const std::vector<float> want =
            streamReference(c.spec, c.count, nranks, call, op, state, dense);
        const std::vector<float> got = (inPlace ? din : dout).get<float>(c.count);
        const bool exact = bitExact(c.spec);
        if (const std::string d = mismatch(got, want, exact); !d.empty())
          fails.push_back(key + ": result differs from the reference: " + d);
        if (const std::string d = stateDifference(codec, state, rank, exact); !d.empty())
          fails.push_back(key + ": the codec's " + d);
      }
      if (!c.small && (before.linkDensePerByte <= 0 || before.codecPerByte <= 0))
        fails.push_back(base + ": the guard has not measured both modes (dense " +
                        std::to_string(before.linkDensePerByte) + ", codec " +
                        std::to_string(before.codecPerByte) + " s/B)");
      sqzCodecDestroy(codec);
    }
    cudaStreamDestroy(stream);
  });
  reportFailures(run, failures);
}

// The first byte of a spec's hash (what the call words carried of it before they carried 24 bits).
uint8_t firstHashByte(const std::string& spec) {
  const std::string canonical = squeeze::CodecSpec::parse(spec).str();
  return squeeze::sha256(canonical.data(), canonical.size())[0];
}

// Ranks whose codecs differ but whose payloads have the same size are told so: the call words
// carry the codec and 24 bits of its spec's hash, and the communicator fails with both calls
// described, before any rank folds the other's bytes. fp16 against bf16 (the codec), and random-k
// with different seeds (the settings: its payload is only values, at indices drawn from the seed)
// whose specs' hashes share their first byte.
TEST(StreamCompressedErrors, RanksWithDifferentCodecsFailNamingBoth) {
  const std::string randk1 = "randk:seed=1,min_bytes=0";
  std::string randk2;
  for (int seed = 2; randk2.empty(); ++seed) {
    const std::string spec = "randk:seed=" + std::to_string(seed) + ",min_bytes=0";
    if (firstHashByte(spec) == firstHashByte(randk1)) randk2 = spec;
  }
  struct Case {
    std::string spec[2];
    const char* named[2];  // what the error must say of each rank's call
  };
  const Case cases[] = {
      {{"fp16:min_bytes=0", "bf16:min_bytes=0"}, {"codec fp16", "codec bf16"}},
      {{randk1, randk2},
       {"codec randk (its spec's SHA-256 begins ", "codec randk (its spec's SHA-256 begins "}}};
  constexpr int kRanks = 2;
  constexpr size_t kCount = 4099;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec[0] + " against " + c.spec[1]);
    RunOptions opts;
    opts.transports = "cuda_ipc,shm,tcp";
    opts.timeoutMs = 10000;
    std::vector<std::string> errors(kRanks);
    std::barrier<> sync(kRanks);
    ScopedEnv env;
    env.unset("SQZ_ALGO");
    env.set("SQZ_CODEC_AUTO_DENSE", "0");
    RunResult run = runRanks(kRanks, opts, [&](sqzComm_t& comm, int rank) {
      cudaStream_t stream;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      {
        GpuBytes buf(kCount * sizeof(float), false, stream);
        buf.put(inputs(rank, 0, kCount));
        cudaStreamSynchronize(stream);
        sqzCodec_t codec = nullptr;
        if (sqzCodecCreate(&codec, c.spec[rank].c_str(), kCount, sqzFloat32, comm) !=
            sqzSuccess) {
          errors[rank] = std::string("sqzCodecCreate: ") + sqzGetLastError(comm);
        } else {
          sync.arrive_and_wait();
          if (sqzAllReduceCompressed(buf.ptr(), buf.ptr(), kCount, sqzFloat32, sqzSum, codec,
                                     comm, stream) != sqzSuccess)
            errors[rank] = sqzGetLastError(comm);
          cudaStreamSynchronize(stream);  // the check skips the folds: no hang
          // The watcher finds the disagreement in the error word within its poll.
          sqzResult_t async = sqzSuccess;
          const auto t0 = std::chrono::steady_clock::now();
          while (async == sqzSuccess &&
                 std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
            sqzCommGetAsyncError(comm, &async);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
          if (async != sqzSuccess) errors[rank] = sqzGetLastError(comm);
          sync.arrive_and_wait();
          sqzCodecDestroy(codec);
        }
      }
      cudaStreamDestroy(stream);
    });
    for (const std::string& e : run.initErrors) ADD_FAILURE() << "init failed: " << e;
    for (int r = 0; r < kRanks; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_NE(errors[r].find("do not match"), std::string::npos) << errors[r];
      for (const char* named : c.named)
        EXPECT_NE(errors[r].find(named), std::string::npos) << errors[r];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OneGpu, StreamCompressed, ::testing::Values(1, 2, 3, 4));
INSTANTIATE_TEST_SUITE_P(OneGpu, StreamCompressedGuard, ::testing::Values(2, 3));

}  // namespace
}  // namespace sqztest
