// Helpers for the collective tests: ranks as threads in one process (runRanks), a watchdog that
// turns a hang into a diagnostic instead of a stuck test, type dispatch over sqzDataType_t with
// float16/bfloat16 going through squeeze::device's conversions, buffers placed at a chosen
// offset from a 64-byte boundary, and checks that an error came with a sentence (expectSentence,
// SQZ_EXPECT_ERROR). SQZ_TEST_TRANSPORTS reruns the tests written for tcp/shm over another
// transport (transportOverride).
#pragma once

#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/strings.h"
#include "device/reduce.h"

namespace squeeze {
// The compiled-in transport names (transports/registry.cc); declared here so the tests do not
// depend on the transport headers.
const std::vector<std::string>& availableTransports();
}  // namespace squeeze

namespace sqztest {

// ---- environment --------------------------------------------------------------------------

inline bool transportCompiledIn(const std::string& name) {
  const auto& known = squeeze::availableTransports();
  return std::find(known.begin(), known.end(), name) != known.end();
}

// SQZ_TEST_TRANSPORTS=<list> (e.g. "ucx") reruns the tests written for the default transports
// over another one: runRanks replaces opts.transports "tcp" or "shm" with the list. Tests that
// name any other transport keep theirs. tests/collective/meson.build registers such runs.
inline const char* transportOverride() {
  const char* v = std::getenv("SQZ_TEST_TRANSPORTS");
  return v && *v ? v : nullptr;
}

// What a run asked to use `requested` actually uses (see transportOverride).
inline const char* effectiveTransports(const char* requested) {
  const char* o = transportOverride();
  if (o && requested && (std::strcmp(requested, "tcp") == 0 || std::strcmp(requested, "shm") == 0))
    return o;
  return requested;
}

// Makes a test binary run by hand behave as under `meson test`: loopback only. With
// SQZ_TEST_TRANSPORTS set, it skips every test when a transport listed there is not compiled in
// (a build without libucx-dev), and says once which transport the tests really run over.
class LoopbackEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("SQZ_SOCKET_IFNAME", "lo", /*overwrite=*/0);
    const char* o = transportOverride();
    if (!o) return;
    for (const std::string& name : squeeze::split(o, ','))
      if (!name.empty() && !transportCompiledIn(name))
        GTEST_SKIP() << "SQZ_TEST_TRANSPORTS=" << o << " names transport '" << name
                     << "', which is not compiled into this build (for ucx: install libucx-dev "
                        "and configure with -Ducx=enabled)";
    std::printf(
        "[   NOTE   ] SQZ_TEST_TRANSPORTS=%s: tests written for tcp or shm run over %s "
        "(their names still say tcp/shm)\n",
        o, o);
  }
};

// Sets environment variables for one scope and restores the previous values when it ends. Only
// use it while no rank thread is running (setenv is not thread-safe against getenv).
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* key, const char* value) {
    remember(key);
    setenv(key, value, 1);
  }
  void unset(const char* key) {
    remember(key);
    unsetenv(key);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        unsetenv(it->first.c_str());
    }
  }

 private:
  void remember(const char* key) {
    const char* v = std::getenv(key);
    saved_.emplace_back(key, v ? std::optional<std::string>(v) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// True if an init error says the requested transport does not exist in this build.
inline bool saysUnknownTransport(const std::string& message) {
  std::string m = lower(message);
  if (m.find("transport") == std::string::npos) return false;
  for (const char* hint : {"unknown", "not a transport", "not built", "not available",
                           "unavailable", "not compiled", "not supported"})
    if (m.find(hint) != std::string::npos) return true;
  return false;
}

using squeeze::secondsSince;

// ---- which transports, rank counts and algorithms a parameterized test runs -----------------

// (transport, ranks, algorithm): the parameters of the tests that sweep all three.
using TransportRanksAlgo = std::tuple<const char*, int, const char*>;

// Rank counts where a schedule's shape changes (powers of two and not, odd, the tree's depths)
// are a property of the algorithm, not of the transport that carries its messages: shm runs
// every count in shmRanks, and tcp (which SQZ_TEST_TRANSPORTS may replace) the counts that
// exercise its own message path: a single pair, an odd count that is no power of two, the most
// ranks. One rank never touches a transport, so it runs over shm only.
inline std::vector<TransportRanksAlgo> transportRanksAlgos(const std::vector<int>& shmRanks,
                                                           const std::vector<const char*>& algos) {
  static const std::vector<int> kTcpRanks = {2, 5, 8};
  std::vector<TransportRanksAlgo> out;
  for (const char* transport : {"tcp", "shm"})
    for (int ranks : std::string(transport) == "tcp" ? kTcpRanks : shmRanks)
      for (const char* algo : algos) out.emplace_back(transport, ranks, algo);
  return out;
}

// "tcp_5ranks_ring": the instance names the meson.build filters select by.
inline std::string transportRanksAlgoName(
    const ::testing::TestParamInfo<TransportRanksAlgo>& info) {
  return std::string(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) +
         "ranks_" + std::get<2>(info.param);
}

// ---- error results ----------------------------------------------------------------------------

// A non-empty sentence: several words, not just a code name.
inline void expectSentence(const char* msg, const std::string& context) {
  ASSERT_NE(msg, nullptr) << context;
  std::string s = msg;
  EXPECT_GE(s.size(), 15u) << context << ": last error '" << s << "' is not a sentence";
  EXPECT_NE(s.find(' '), std::string::npos) << context << ": last error '" << s << "'";
}

// Expects `rc` == want and a sentence from sqzGetLastError(comm).
#define SQZ_EXPECT_ERROR(call, want, comm)                                                  \
  do {                                                                                      \
    sqzResult_t rc_ = (call);                                                               \
    EXPECT_EQ(rc_, want) << #call << " returned " << sqzGetErrorString(rc_) << ": "         \
                         << sqzGetLastError(comm);                                          \
    expectSentence(sqzGetLastError(comm), #call);                                           \
  } while (0)

// ---- what each rank is doing, for the watchdog ---------------------------------------------

class StatusBoard {
 public:
  explicit StatusBoard(int nranks) : status_(nranks, "starting") {}
  void set(int rank, std::string s) {
    std::lock_guard<std::mutex> lock(mu_);
    status_[rank] = std::move(s);
  }
  std::string dump() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (size_t r = 0; r < status_.size(); ++r)
      out += "  rank " + std::to_string(r) + ": " + status_[r] + "\n";
    return out;
  }

 private:
  mutable std::mutex mu_;  // protects status_
  std::vector<std::string> status_;
};

// The calling rank thread's slot on the board (set by runRanks).
struct ThreadSlot {
  StatusBoard* board = nullptr;
  int rank = -1;
};
inline thread_local ThreadSlot tlsSlot;

// Records what this rank thread is about to do; the watchdog prints it if the run hangs.
inline void setStatus(std::string s) {
  if (tlsSlot.board) tlsSlot.board->set(tlsSlot.rank, std::move(s));
}

// ---- ranks as threads ---------------------------------------------------------------------

struct RunOptions {
  const char* transports = "tcp";  // sqzConfig_t::transports (tcp/shm: see transportOverride)
  int timeoutMs = 30000;           // sqzConfig_t::timeoutMs: bounds every wait in the library
  int chunkBytes = SQZ_CONFIG_UNDEF_INT;  // sqzConfig_t::chunkBytes (unset: the default)
  double watchdogSeconds = 300;    // the whole run; past it the process aborts with a report
};

struct RunResult {
  bool unknownTransport = false;  // init said the transport is not in this build
  std::vector<std::string> initErrors;  // "rank r: <code>: <message>" for each failed init
  double initSeconds = 0;               // until the last rank's init returned
  double totalSeconds = 0;
};

// Calls sqzGetUniqueId, starts nranks threads that each create their communicator with
// sqzCommInitRankConfig, runs fn(comm, rank) and destroys the communicator. fn may abort the
// communicator itself (sqzCommAbort) and set comm to nullptr. A run that outlives
// opts.watchdogSeconds prints every rank's last status and aborts the process.
inline RunResult runRanks(int nranks, const RunOptions& opts,
                          const std::function<void(sqzComm_t& comm, int rank)>& fn) {
  RunResult result;
  const auto t0 = std::chrono::steady_clock::now();
  sqzUniqueId id;
  sqzResult_t rc = sqzGetUniqueId(&id);
  if (rc != sqzSuccess) {
    result.initErrors.push_back(std::string("sqzGetUniqueId: ") + sqzGetErrorString(rc) + ": " +
                                sqzGetLastError(nullptr));
    return result;
  }

  const char* transports = effectiveTransports(opts.transports);  // before any thread starts
  StatusBoard board(nranks);
  std::mutex mu;  // protects result.initErrors, result.unknownTransport, initDone, done
  std::condition_variable cv;
  int initDone = 0, done = 0;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < nranks; ++rank) {
    threads.emplace_back([&, rank] {
      tlsSlot = {&board, rank};
      setStatus("sqzCommInitRankConfig");
      sqzConfig_t cfg = SQZ_CONFIG_INITIALIZER;
      cfg.transports = transports;
      cfg.timeoutMs = opts.timeoutMs;
      cfg.chunkBytes = opts.chunkBytes;
      sqzComm_t comm = nullptr;
      sqzResult_t r = sqzCommInitRankConfig(&comm, nranks, id, rank, &cfg);
      {
        std::lock_guard<std::mutex> lock(mu);
        ++initDone;
        if (initDone == nranks) result.initSeconds = secondsSince(t0);
        if (r != sqzSuccess) {
          std::string msg = sqzGetLastError(nullptr);
          if (saysUnknownTransport(msg)) result.unknownTransport = true;
          result.initErrors.push_back("rank " + std::to_string(rank) + ": " +
                                      sqzGetErrorString(r) + ": " + msg);
        }
      }
      if (r == sqzSuccess) {
        fn(comm, rank);
        setStatus("sqzCommDestroy");
        if (comm) sqzCommDestroy(comm);
      }
      setStatus("done");
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(opts.watchdogSeconds));
    if (!cv.wait_until(lock, deadline, [&] { return done == nranks; })) {
      std::fprintf(stderr,
                   "\nWATCHDOG: %d-rank run over '%s' did not finish in %.0f s; rank status:\n%s",
                   nranks, transports, opts.watchdogSeconds, board.dump().c_str());
      std::fflush(stderr);
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  result.totalSeconds = secondsSince(t0);
  return result;
}

// ---- datatypes --------------------------------------------------------------------------------

constexpr sqzDataType_t kAllTypes[] = {sqzInt8,    sqzUint8,   sqzInt32,   sqzUint32,
                                       sqzInt64,   sqzUint64,  sqzFloat16, sqzFloat32,
                                       sqzFloat64, sqzBfloat16};
constexpr sqzRedOp_t kAllOps[] = {sqzSum, sqzProd, sqzMax, sqzMin, sqzAvg};

inline const char* typeName(sqzDataType_t t) {
  static const char* kNames[] = {"int8",   "uint8", "int32",  "uint32", "int64",
                                 "uint64", "half",  "float",  "double", "bfloat16"};
  return t >= 0 && t < sqzNumTypes ? kNames[t] : "?";
}
inline const char* opName(sqzRedOp_t op) {
  static const char* kNames[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < sqzNumOps ? kNames[op] : "?";
}

inline size_t typeSize(sqzDataType_t t) {
  switch (t) {
    case sqzInt8: case sqzUint8: return 1;
    case sqzFloat16: case sqzBfloat16: return 2;
    case sqzInt32: case sqzUint32: case sqzFloat32: return 4;
    default: return 8;
  }
}

enum class Kind { kSigned, kUnsigned, kFloat };

inline Kind kindOf(sqzDataType_t t) {
  switch (t) {
    case sqzInt8: case sqzInt32: case sqzInt64: return Kind::kSigned;
    case sqzUint8: case sqzUint32: case sqzUint64: return Kind::kUnsigned;
    default: return Kind::kFloat;
  }
}

// A value in the "wide" type of its kind: int64 for signed, uint64 for unsigned, double for
// floats. The tests build inputs whose results are exact in the wide type, then store them.
struct Wide {
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
};

// Stores v (of t's kind) into element idx of buf; exact for the values the tests use.
inline void storeElement(sqzDataType_t t, void* buf, size_t idx, const Wide& v) {
  char* p = static_cast<char*>(buf) + idx * typeSize(t);
  auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
  switch (t) {
    case sqzInt8: put(static_cast<int8_t>(v.i)); break;
    case sqzUint8: put(static_cast<uint8_t>(v.u)); break;
    case sqzInt32: put(static_cast<int32_t>(v.i)); break;
    case sqzUint32: put(static_cast<uint32_t>(v.u)); break;
    case sqzInt64: put(static_cast<int64_t>(v.i)); break;
    case sqzUint64: put(static_cast<uint64_t>(v.u)); break;
    case sqzFloat16: put(squeeze::device::floatToHalf(static_cast<float>(v.f))); break;
    case sqzFloat32: put(static_cast<float>(v.f)); break;
    case sqzFloat64: put(v.f); break;
    case sqzBfloat16: put(squeeze::device::floatToBfloat16(static_cast<float>(v.f))); break;
    default: break;
  }
}

// Element idx of buf as a number (for messages and tolerance checks).
inline double loadAsDouble(sqzDataType_t t, const void* buf, size_t idx) {
  const char* p = static_cast<const char*>(buf) + idx * typeSize(t);
  auto get = [p](auto x) {
    std::memcpy(&x, p, sizeof x);
    return x;
  };
  switch (t) {
    case sqzInt8: return get(int8_t{});
    case sqzUint8: return get(uint8_t{});
    case sqzInt32: return get(int32_t{});
    case sqzUint32: return get(uint32_t{});
    case sqzInt64: return static_cast<double>(get(int64_t{}));
    case sqzUint64: return static_cast<double>(get(uint64_t{}));
    case sqzFloat16: return squeeze::device::halfToFloat(get(uint16_t{}));
    case sqzFloat32: return get(float{});
    case sqzFloat64: return get(double{});
    case sqzBfloat16: return squeeze::device::bfloat16ToFloat(get(uint16_t{}));
    default: return 0;
  }
}

// "3.5 (0x4300)": the value and its bytes, for failure messages.
inline std::string describeElement(sqzDataType_t t, const void* buf, size_t idx) {
  const unsigned char* p = static_cast<const unsigned char*>(buf) + idx * typeSize(t);
  char num[64];
  if (t == sqzInt64)
    std::snprintf(num, sizeof num, "%lld",
                  static_cast<long long>([&] { int64_t x; std::memcpy(&x, p, 8); return x; }()));
  else if (t == sqzUint64)
    std::snprintf(num, sizeof num, "%llu", static_cast<unsigned long long>([&] {
                    uint64_t x;
                    std::memcpy(&x, p, 8);
                    return x;
                  }()));
  else
    std::snprintf(num, sizeof num, "%.9g", loadAsDouble(t, buf, idx));
  std::string hex = " (0x";
  for (size_t b = typeSize(t); b-- > 0;) {  // little-endian bytes, printed most significant first
    char h[3];
    std::snprintf(h, sizeof h, "%02x", p[b]);
    hex += h;
  }
  return std::string(num) + hex + ")";
}

// ---- exact-value inputs ----------------------------------------------------------------------
//
// Inputs whose reduction is exact in every datatype (as nccl-tests builds them):
// sum/avg: small integers (or halves) so a sum over 8 ranks is exact even in int8 and bfloat16.
// prod:    factors 1, 2 (at most two 2s per element: ranks r and r+7), -1 for signed types and
//          0.5 for floats, so every product is a small power of two.
// max/min: spread values; unsigned types use their top bit, signed types both signs.
// Integer sums never overflow, so avg's truncating division is well defined.

// The input of `rank` at element i for a reduction with op, chosen so that the reduction over up
// to 8 ranks is exact in dtype.
inline Wide exactValue(sqzDataType_t dtype, sqzRedOp_t op, int rank, size_t i) {
  const int64_t r = rank;
  const int64_t ii = static_cast<int64_t>(i % 1000003);
  Wide w;
  switch (op) {
    case sqzSum:
    case sqzAvg: {
      const int64_t s = (r + ii) % 5 - 2;   // -2..2
      const uint64_t u = static_cast<uint64_t>((r + ii) % 5);  // 0..4
      switch (dtype) {
        case sqzInt32: w.i = s * 100003 + (ii % 3); break;
        case sqzInt64: w.i = s * (int64_t{1} << 40) + (ii % 3); break;
        case sqzUint32: w.u = u * 1000003 + (ii % 3); break;
        case sqzUint64: w.u = (u << 40) + (ii % 3); break;
        default: w.i = s; w.u = u; break;
      }
      w.f = static_cast<double>((r * 3 + ii) % 9 - 4) * 0.5;  // -2..2 step 0.5
      break;
    }
    case sqzProd: {
      const bool two = (r + ii) % 7 == 0;
      const bool neg = (r + 2 * ii) % 3 == 1;
      const bool half = !two && (r * 5 + ii) % 11 == 3;
      const bool big = rank == 0 && ii % 4 == 1 &&
                       (dtype == sqzInt64 || dtype == sqzUint64 || dtype == sqzInt32 ||
                        dtype == sqzUint32);
      const int64_t mag = (two ? 2 : 1) * (big ? (int64_t{1} << 20) : 1);
      w.i = neg ? -mag : mag;
      w.u = static_cast<uint64_t>(mag);
      w.f = (two ? 2.0 : half ? 0.5 : 1.0) * (neg ? -1.0 : 1.0);
      break;
    }
    case sqzMax:
    case sqzMin: {
      const int64_t v = (r * 37 + ii * 11) % 251;  // 0..250
      switch (dtype) {
        case sqzInt32: w.i = (v - 125) * 1000 + ii % 7; break;
        case sqzInt64: w.i = (v - 125) * (int64_t{1} << 40) + ii % 7; break;
        case sqzUint32: w.u = static_cast<uint64_t>(v) * (uint64_t{1} << 24) + ii % 7; break;
        case sqzUint64: w.u = (static_cast<uint64_t>(v) << 56) + ii % 7; break;
        default: w.i = v - 125; w.u = static_cast<uint64_t>(v); break;
      }
      w.f = static_cast<double>(v - 125) * 0.25;  // |x| <= 31.25: exact in half and bfloat16
      break;
    }
    default: break;
  }
  return w;
}

// a op b in the wide types (every field; the caller stores the one of its kind).
inline Wide combine(sqzRedOp_t op, const Wide& a, const Wide& b) {
  Wide r;
  switch (op) {
    case sqzSum: case sqzAvg:
      r.i = a.i + b.i; r.u = a.u + b.u; r.f = a.f + b.f; break;
    case sqzProd:
      r.i = a.i * b.i; r.u = a.u * b.u; r.f = a.f * b.f; break;
    case sqzMax:
      r.i = std::max(a.i, b.i); r.u = std::max(a.u, b.u); r.f = std::max(a.f, b.f); break;
    case sqzMin:
      r.i = std::min(a.i, b.i); r.u = std::min(a.u, b.u); r.f = std::min(a.f, b.f); break;
    default: break;
  }
  return r;
}

// The exact all-reduce result at element i of exactValue inputs on nranks ranks, stored into
// element i of out. avg is the sum divided once: integers truncate toward zero; float16 and
// bfloat16 divide in float32 and round to nearest even, as the API documents.
inline void storeExactResult(sqzDataType_t dtype, sqzRedOp_t op, int nranks, size_t i,
                             void* out) {
  Wide acc = exactValue(dtype, op, 0, i);
  for (int r = 1; r < nranks; ++r) acc = combine(op, acc, exactValue(dtype, op, r, i));
  if (op == sqzAvg) {
    acc.i /= nranks;  // truncates toward zero, as the API documents for integers
    acc.u /= static_cast<uint64_t>(nranks);
    if (dtype == sqzFloat64)
      acc.f = acc.f / nranks;
    else  // float32, and float16/bfloat16 computed in float32 then rounded (storeElement)
      acc.f = static_cast<float>(acc.f) / static_cast<float>(nranks);
  }
  storeElement(dtype, out, i, acc);
}

// ---- buffers at a chosen misalignment -------------------------------------------------------

// `bytes` usable bytes starting `offset` bytes past a 64-byte boundary, followed by `guard`
// bytes of a known pattern that a correct collective never touches.
class OffsetBuffer {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kGuardByte = 0xa5;

  OffsetBuffer(size_t bytes, size_t offset) : bytes_(bytes) {
    storage_.reset(new unsigned char[bytes + offset + kGuard + 64]);
    auto base = reinterpret_cast<uintptr_t>(storage_.get());
    data_ = storage_.get() + ((64 - base % 64) % 64) + offset;
    std::memset(data_ + bytes_, kGuardByte, kGuard);
  }
  unsigned char* data() { return data_; }
  const unsigned char* data() const { return data_; }
  size_t size() const { return bytes_; }
  bool guardIntact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (data_[bytes_ + i] != kGuardByte) return false;
    return true;
  }

 private:
  std::unique_ptr<unsigned char[]> storage_;
  unsigned char* data_ = nullptr;
  size_t bytes_;
};

// ---- reporting ----------------------------------------------------------------------------------

// Turns every rank's outcome of every case into at most maxFailures test failures; a problem that
// several ranks share is reported once, with the list of ranks. Outcome needs ran, rc, error,
// mismatch, guardBroken, sendModified and digest. extraNotes(outcome, note) adds a test's own
// per-rank problems; sameOutput(k) says whether case k's output must be bitwise equal everywhere.
template <class CaseT, class OutcomeT, class ExtraNotes, class SameOutput>
void reportOutcomes(const std::string& where, const std::vector<CaseT>& cases,
                    const std::vector<std::vector<OutcomeT>>& outcomes, size_t maxFailures,
                    ExtraNotes extraNotes, SameOutput sameOutput) {
  size_t failures = 0;
  auto fail = [&](const std::string& msg) {
    if (failures++ < maxFailures) ADD_FAILURE() << where << ": " << msg;
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const std::string name = "case " + std::to_string(k) + " (" + cases[k].name() + ")";
    const auto& per = outcomes[k];
    std::vector<std::pair<std::string, std::string>> problems;  // (problem, ranks)
    auto note = [&](const std::string& problem, size_t rank) {
      for (auto& p : problems)
        if (p.first == problem) {
          p.second += "," + std::to_string(rank);
          return;
        }
      problems.emplace_back(problem, std::to_string(rank));
    };
    bool allRan = true;
    for (size_t r = 0; r < per.size(); ++r) {
      const OutcomeT& o = per[r];
      if (!o.ran) {
        allRan = false;
        continue;
      }
      if (o.rc != sqzSuccess)
        fail(name + " rank " + std::to_string(r) + " returned " + sqzGetErrorString(o.rc) + ": " +
             o.error);
      if (!o.mismatch.empty()) note(o.mismatch, r);
      if (o.guardBroken) note("wrote past the end of the output buffer", r);
      if (o.sendModified) note("modified sendbuff (out of place)", r);
      extraNotes(o, [&](const std::string& problem) { note(problem, r); });
    }
    for (const auto& [problem, ranks] : problems) fail(name + " rank(s) " + ranks + ": " + problem);
    if (!allRan) {
      fail(name + " was not run on every rank (an earlier call failed); later cases skipped");
      break;
    }
    if (!sameOutput(k)) continue;
    std::string differ;
    for (size_t r = 1; r < per.size(); ++r)
      if (per[r].rc == sqzSuccess && per[0].rc == sqzSuccess && per[r].digest != per[0].digest)
        differ += (differ.empty() ? "" : ",") + std::to_string(r);
    if (!differ.empty())
      fail(name + ": the output of rank(s) " + differ + " differs bitwise from rank 0's");
  }
  if (failures > maxFailures)
    ADD_FAILURE() << where << ": " << failures - maxFailures << " more failures not shown";
}

}  // namespace sqztest
