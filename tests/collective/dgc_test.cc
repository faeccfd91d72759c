// Deep Gradient Compression (compress/dgc.cc) through the public API, ranks as threads. The
// handle's momentum u and velocity v are read from its saved state ("momentum" and "residual"):
//   - momentum correction: after one call with m = 0.9, u == g where nothing was sent and v == x;
//     the next call's x is v + (0.9 u + g) (checked exactly on one rank, and across ranks as
//     sum_r x_r == result + sum_r v_r after the call);
//   - local clipping: a huge g is scaled to |g|_2 = clip / sqrt(P); a small one is untouched;
//   - momentum factor masking: u == 0 exactly where x != 0 and v == 0 after the call;
//   - sparsity warm-up: the result's nonzeros per call follow 25%, 6.25%, 1.5625%, 0.39%, then
//     ratio, and never drop below ratio;
//   - save/load resumes bit for bit (outputs and state), mid warm-up.
#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "test_util.h"

namespace sqztest {
namespace {

struct State {
  uint64_t calls = 0;
  std::map<std::string, std::vector<float>> arrays;
};

// Parses sqzCodecSaveState's buffer (format in compress/handle.cc).
State stateOf(sqzCodec_t codec) {
  State s;
  size_t bytes = 0;
  EXPECT_EQ(sqzCodecSaveState(codec, nullptr, &bytes), sqzSuccess);
  std::vector<char> buf(bytes);
  EXPECT_EQ(sqzCodecSaveState(codec, buf.data(), &bytes), sqzSuccess);
  size_t at = 8 + 4 + 4 + 8;
  std::memcpy(&s.calls, &buf[at], 8);
  at += 8;
  uint32_t n;
  std::memcpy(&n, &buf[at], 4);
  at += 4 + n;
  uint32_t arrays;
  std::memcpy(&arrays, &buf[at], 4);
  at += 4;
  for (uint32_t a = 0; a < arrays; ++a) {
    std::memcpy(&n, &buf[at], 4);
    std::string name(&buf[at + 4], n);
    at += 4 + n;
    uint64_t len;
    std::memcpy(&len, &buf[at], 8);
    at += 8;
    std::vector<float> v(len);
    std::memcpy(v.data(), &buf[at], len * sizeof(float));
    at += len * sizeof(float);
    s.arrays[name] = std::move(v);
  }
  uint64_t policyBytes;  // version 2: the adaptive policy's section (empty for dgc)
  std::memcpy(&policyBytes, &buf[at], 8);
  EXPECT_EQ(policyBytes, 0u);
  at += 8;
  EXPECT_EQ(at, buf.size());
  return s;
}

// Deterministic nonzero gradient-like values.
float gradValue(int rank, int call, size_t i) {
  uint32_t h = static_cast<uint32_t>(i * 2654435761u) ^
               static_cast<uint32_t>(rank * 40503 + call * 7919 + 1);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (static_cast<float>(h % 20000) - 9999.5f) / 5000.0f;
}

std::vector<float> grad(int rank, int call, size_t n, float scale = 1.0f) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = gradValue(rank, call, i) * scale;
  return g;
}

sqzCodec_t create(sqzComm_t comm, const std::string& spec, size_t count) {
  sqzCodec_t c = nullptr;
  EXPECT_EQ(sqzCodecCreate(&c, spec.c_str(), count, sqzFloat32, comm), sqzSuccess)
      << spec << ": " << sqzGetLastError(comm);
  return c;
}

std::vector<float> allReduce(sqzComm_t comm, sqzCodec_t c, const std::vector<float>& g,
                             sqzRedOp_t op = sqzSum) {
  std::vector<float> out(g.size());
  EXPECT_EQ(
      sqzAllReduceCompressed(g.data(), out.data(), g.size(), sqzFloat32, op, c, comm, nullptr),
      sqzSuccess)
      << sqzGetLastError(comm);
  return out;
}

size_t nonzeros(const std::vector<float>& x) {
  size_t n = 0;
  for (float v : x) n += v != 0.0f;
  return n;
}

// Collects failures from rank threads.
struct Failures {
  std::mutex mu;
  std::vector<std::string> list;
  void add(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (list.size() < 20) list.push_back(s);
  }
  void report() {
    for (const auto& f : list) ADD_FAILURE() << f;
  }
};

RunOptions shm() {
  RunOptions o;
  o.transports = "shm";
  return o;
}

// One rank: everything is exact, so the rules are checked bit for bit.
TEST(Dgc, MomentumCorrectionAndMaskingOnOneRank) {
  Failures f;
  runRanks(1, shm(), [&](sqzComm_t& comm, int) {
    const size_t n = 1000;
    sqzCodec_t c = create(comm, "dgc:ratio=0.1,momentum=0.9,min_bytes=0", n);
    std::vector<float> g0 = grad(0, 0, n), g1 = grad(0, 1, n);
    std::vector<float> out0 = allReduce(comm, c, g0);
    State s0 = stateOf(c);
    const auto& u0 = s0.arrays["momentum"];
    const auto& v0 = s0.arrays["residual"];
    ASSERT_EQ(u0.size(), n);
    ASSERT_EQ(v0.size(), n);
    EXPECT_EQ(nonzeros(out0), 100u);
    for (size_t i = 0; i < n; ++i) {
      const bool sent = out0[i] != 0.0f;
      // Call 0: u = 0.9 * 0 + g = g, x = v + u = g; sent: out = x, u and v masked to 0.
      if (sent ? (out0[i] != g0[i] || u0[i] != 0.0f || v0[i] != 0.0f)
               : (u0[i] != g0[i] || v0[i] != g0[i])) {
        f.add("call 0, element " + std::to_string(i) + ": out " + std::to_string(out0[i]) + " u " +
              std::to_string(u0[i]) + " v " + std::to_string(v0[i]) + " g " +
              std::to_string(g0[i]));
        break;
      }
    }
    std::vector<float> out1 = allReduce(comm, c, g1);
    State s1 = stateOf(c);
    const auto& u1 = s1.arrays["momentum"];
    const auto& v1 = s1.arrays["residual"];
    EXPECT_EQ(nonzeros(out1), 100u);
    float minSent = 1e30f, maxKept = 0;
    for (size_t i = 0; i < n; ++i) {
      const float u = 0.9f * u0[i] + g1[i];  // momentum correction: accumulate the update
      const float x = v0[i] + u;             // and add it to the velocity
      const bool sent = out1[i] != 0.0f;
      if (sent ? (out1[i] != x || v1[i] != 0.0f || u1[i] != 0.0f) : (v1[i] != x || u1[i] != u)) {
        f.add("call 1, element " + std::to_string(i) + ": out " + std::to_string(out1[i]) + " v " +
              std::to_string(v1[i]) + " u " + std::to_string(u1[i]) + "; expected x " +
              std::to_string(x) + " u " + std::to_string(u));
        break;
      }
      if (sent)
        minSent = std::min(minSent, std::fabs(x));
      else
        maxKept = std::max(maxKept, std::fabs(x));
    }
    EXPECT_GE(minSent, maxKept) << "the top k of v + u was not what was sent";
    sqzCodecDestroy(c);
  });
  f.report();
}

// Several ranks: sum_r x_r = result + sum_r v_r(after), with x_r = v_r + (m u_r + g_r); every
// rank's u is masked exactly where its x was nonzero and its v came back zero.
TEST(Dgc, TelescopesAgainstMomentumAndMasksAcrossRanks) {
  for (const char* algo : {"ring", "rhd", "tree", "ps"}) {
    const int P = 3;
    const size_t n = 3001;
    std::mutex mu;
    std::vector<std::vector<float>> xs(P), vs(P), outs(P);
    Failures f;
    ScopedEnv env;
    env.set("SQZ_ALGO", algo);
    RunOptions opts = shm();
    opts.chunkBytes = 4096;  // several pieces, re-selected per hop
    runRanks(P, opts, [&](sqzComm_t& comm, int rank) {
      sqzCodec_t c = create(comm, "dgc:ratio=0.05,momentum=0.9,min_bytes=0", n);
      for (int call = 0; call < 3; ++call) {
        std::vector<float> g = grad(rank, call, n);
        State before = stateOf(c);
        std::vector<float> x(n), u(n);
        for (size_t i = 0; i < n; ++i) {
          u[i] = 0.9f * before.arrays["momentum"][i] + g[i];
          x[i] = before.arrays["residual"][i] + u[i];
        }
        std::vector<float> out = allReduce(comm, c, g);
        State after = stateOf(c);
        const auto& ua = after.arrays["momentum"];
        const auto& va = after.arrays["residual"];
        size_t masked = 0;
        for (size_t i = 0; i < n; ++i) {
          const bool mask = x[i] != 0.0f && va[i] == 0.0f;
          masked += mask;
          if (ua[i] != (mask ? 0.0f : u[i])) {
            f.add(std::string(algo) + " rank " + std::to_string(rank) + " call " +
                  std::to_string(call) + " element " + std::to_string(i) + ": u " +
                  std::to_string(ua[i]) + ", expected " + std::to_string(mask ? 0.0f : u[i]));
            break;
          }
        }
        if (masked == 0) f.add(std::string(algo) + ": nothing was masked");
        if (call == 2) {
          std::lock_guard<std::mutex> lock(mu);
          xs[rank] = x;
          vs[rank] = va;
          outs[rank] = out;
        }
      }
      sqzCodecDestroy(c);
    });
    f.report();
    double worst = 0, scale = 1;
    for (size_t i = 0; i < n; ++i) {
      double lhs = outs[0][i], rhs = 0;
      for (int r = 0; r < P; ++r) {
        lhs += vs[r][i];
        rhs += xs[r][i];
        EXPECT_EQ(outs[r][i], outs[0][i]) << algo << ": ranks disagree at " << i;
      }
      worst = std::max(worst, std::fabs(lhs - rhs));
      scale = std::max(scale, std::fabs(rhs));
    }
    EXPECT_LE(worst, 1e-5 * scale) << algo << ": result + velocity != sum of momentum-corrected x";
  }
}

TEST(Dgc, ClipsTheLocalGradientToClipOverSqrtP) {
  const int P = 4;
  const size_t n = 2000;
  std::vector<std::vector<float>> outs(P);
  std::mutex mu;
  Failures f;
  runRanks(P, shm(), [&](sqzComm_t& comm, int rank) {
    // ratio 1: everything is sent, so the result is the sum of the clipped gradients.
    sqzCodec_t c = create(comm, "dgc:ratio=1,momentum=0,clip=1,min_bytes=0", n);
    // Every rank: the same direction, norms far above clip / sqrt(P) = 0.5.
    std::vector<float> out = allReduce(comm, c, grad(0, 0, n, 1000.0f * float(rank + 1)));
    State s = stateOf(c);
    for (float u : s.arrays["momentum"])
      if (u != 0.0f) {
        f.add("rank " + std::to_string(rank) + ": u not masked after sending everything");
        break;
      }
    // A gradient inside the bound is not scaled: the result is the plain sum.
    sqzCodec_t small = create(comm, "dgc:ratio=1,momentum=0,clip=1000,min_bytes=0", n);
    std::vector<float> g = grad(rank, 1, n);
    std::vector<float> sum = allReduce(comm, small, g);
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < P; ++r) want += gradValue(r, 1, i);
      if (std::fabs(sum[i] - want) > 1e-5f * (1 + std::fabs(want))) {
        f.add("small gradient scaled at " + std::to_string(i));
        break;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    outs[rank] = out;
    sqzCodecDestroy(c);
    sqzCodecDestroy(small);
  });
  f.report();
  // Each rank contributes exactly 0.5 * g/|g|: the sum has norm P * 0.5 = 2 along g.
  std::vector<float> dir = grad(0, 0, n);
  double norm = 0, dirNorm = 0, dot = 0;
  for (size_t i = 0; i < n; ++i) {
    norm += double(outs[0][i]) * outs[0][i];
    dirNorm += double(dir[i]) * dir[i];
    dot += double(outs[0][i]) * dir[i];
  }
  EXPECT_NEAR(std::sqrt(norm), P * 1.0 / std::sqrt(double(P)), 1e-4);
  EXPECT_NEAR(dot / std::sqrt(norm * dirNorm), 1.0, 1e-6);
}

// The density per call: four equal stages of 25%, 6.25%, 1.5625%, 0.39% over `warmup` calls,
// never below ratio, then ratio. On one rank the result has exactly the nonzeros sent.
TEST(Dgc, SparsityWarmUp) {
  Failures f;
  runRanks(1, shm(), [&](sqzComm_t& comm, int) {
    const size_t n = 100000;
    struct Case {
      std::string spec;
      std::vector<size_t> expected;  // nonzeros per call
    };
    const Case cases[] = {
        {"dgc:ratio=0.001,warmup=8,min_bytes=0",
         {25000, 25000, 6250, 6250, 1563, 1563, 391, 391, 100, 100}},
        {"dgc:ratio=0.05,warmup=4,min_bytes=0", {25000, 6250, 5000, 5000, 5000}},
        {"dgc:ratio=0.001,warmup=8,sample=0,min_bytes=0", {25000, 25000, 6250, 6250, 1563}},
        {"dgc:ratio=0.01,min_bytes=0", {1000, 1000}},
    };
    for (const Case& cs : cases) {
      sqzCodec_t c = create(comm, cs.spec, n);
      for (size_t call = 0; call < cs.expected.size(); ++call) {
        const size_t got = nonzeros(allReduce(comm, c, grad(0, int(call), n)));
        if (got != cs.expected[call])
          f.add(cs.spec + " call " + std::to_string(call) + ": " + std::to_string(got) +
                " nonzeros, expected " + std::to_string(cs.expected[call]));
      }
      sqzCodecDestroy(c);
    }
  });
  f.report();
}

// Save mid warm-up, run on; a codec loaded with the saved state gives the same results and ends
// in the same state, bit for bit.
TEST(Dgc, SaveLoadResumesBitForBit) {
  Failures f;
  runRanks(2, shm(), [&](sqzComm_t& comm, int rank) {
    const size_t n = 50000;
    const std::string spec = "dgc:ratio=0.002,momentum=0.9,clip=50,warmup=6,min_bytes=0";
    sqzCodec_t a = create(comm, spec, n), b = create(comm, spec, n);
    for (int k = 0; k < 3; ++k) allReduce(comm, a, grad(rank, k, n), sqzAvg);
    size_t bytes = 0;
    ASSERT_EQ(sqzCodecSaveState(a, nullptr, &bytes), sqzSuccess);
    std::vector<char> saved(bytes);
    ASSERT_EQ(sqzCodecSaveState(a, saved.data(), &bytes), sqzSuccess);
    State mid = stateOf(a);
    EXPECT_EQ(mid.calls, 3u);
    EXPECT_GT(nonzeros(mid.arrays["momentum"]), 0u);
    std::vector<std::vector<float>> ra, rb;
    for (int k = 3; k < 8; ++k) ra.push_back(allReduce(comm, a, grad(rank, k, n), sqzAvg));
    ASSERT_EQ(sqzCodecLoadState(b, saved.data(), bytes), sqzSuccess) << sqzGetLastError(nullptr);
    for (int k = 3; k < 8; ++k) rb.push_back(allReduce(comm, b, grad(rank, k, n), sqzAvg));
    if (ra != rb) f.add("rank " + std::to_string(rank) + ": resumed results differ");
    State sa = stateOf(a), sb = stateOf(b);
    if (sa.arrays != sb.arrays || sa.calls != sb.calls)
      f.add("rank " + std::to_string(rank) + ": resumed state differs");
    sqzCodecDestroy(a);
    sqzCodecDestroy(b);
  });
  f.report();
}

// ef=0: what a call does not send is dropped (the velocity is empty after every call), while
// momentum correction and masking still apply.
TEST(Dgc, ErrorFeedbackOffDropsTheUnsentVelocity) {
  runRanks(1, shm(), [&](sqzComm_t& comm, int) {
    const size_t n = 1000;
    sqzCodec_t c = create(comm, "dgc:ratio=0.05,momentum=0.9,ef=0,min_bytes=0", n);
    std::vector<float> g = grad(0, 0, n);
    std::vector<float> out = allReduce(comm, c, g, sqzSum);
    State st = stateOf(c);
    EXPECT_EQ(nonzeros(st.arrays["residual"]), 0u) << "ef=0 must not keep a velocity";
    const std::vector<float>& u = st.arrays["momentum"];
    size_t sent = 0;
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != 0) {
        ++sent;
        EXPECT_EQ(u[i], 0.0f) << "sent element " << i << " must be masked";
      } else {
        EXPECT_EQ(u[i], g[i]) << "unsent element " << i << " keeps its momentum";
      }
    }
    EXPECT_EQ(sent, 50u);
    sqzCodecDestroy(c);
  });
}

const auto* const kLoopback = ::testing::AddGlobalTestEnvironment(new LoopbackEnvironment);

}  // namespace
}  // namespace sqztest
