// sqzBroadcast, sqzReduce, sqzAllGather, sqzReduceScatter and sqzAlltoAll with ranks as threads
// in one process, value-parameterized over transport x rank count x algorithm (SQZ_ALGO forces
// "ring" or "naive" for every collective; all-to-all only has "naive", which the tuner falls back
// to). Each combination creates ONE communicator and runs every case inside it, in the same
// order on every rank:
//   - for each collective: every datatype (x every op where the collective reduces) x count
//     {0, 1, 7, 1031}, in place and out of place, roots {0, nranks-1} for broadcast and reduce;
//   - count 1031 with every buffer one element past a 64-byte boundary, every datatype;
//   - count 4099 (a few pipeline chunks) in every datatype, and count 0 with NULL buffers;
//   - a larger count (kLargeCount) for float32 and int8 only, crossing many pipeline chunks (the
//     communicator's chunk is kChunkBytes), every op, each root and mode at least once.
// Reductions use exact small-integer inputs (as in allreduce_test.cc), so every output is
// compared bit for bit with a locally computed expectation; data movement uses per-case
// pseudo-random bit patterns (finite floats), so a misplaced block or a stale buffer shows.
// Every call also checks: sqzCommGetLastAlgorithm reports the forced algorithm, out-of-place
// calls leave sendbuff alone, nothing is written past the output buffer (OffsetBuffer guard),
// buffers documented as untouched (reduce's non-root recvbuff, broadcast's non-root sendbuff)
// are untouched, and broadcast/all-gather outputs are bitwise identical on every rank.
#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "base/crypto.h"
#include "test_util.h"

namespace sqztest {
namespace {

// memcmp equality that allows empty buffers, whose data() may be null (memcmp's arguments must
// not be, even for 0 bytes).
bool sameBytes(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}


// 65537 elements: 32+ pieces of float32 and 8+ pieces of int8 at kChunkBytes, with a remainder.
constexpr size_t kLargeCount = 65537;
constexpr int kChunkBytes = 8192;
constexpr size_t kMaxReportedFailures = 40;

enum class Coll { kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll };

const char* collName(Coll c) {
  switch (c) {
    case Coll::kBroadcast:
      return "sqzBroadcast";
    case Coll::kReduce:
      return "sqzReduce";
    case Coll::kAllGather:
      return "sqzAllGather";
    case Coll::kReduceScatter:
      return "sqzReduceScatter";
    case Coll::kAlltoAll:
      return "sqzAlltoAll";
  }
  return "?";
}

bool reduces(Coll c) { return c == Coll::kReduce || c == Coll::kReduceScatter; }
bool hasRoot(Coll c) { return c == Coll::kBroadcast || c == Coll::kReduce; }
// Collectives whose whole output must be the same bytes on every rank.
bool sameOnEveryRank(Coll c) { return c == Coll::kBroadcast || c == Coll::kAllGather; }

struct Case {
  Coll coll;
  sqzDataType_t dtype;
  sqzRedOp_t op;  // only where the collective reduces
  size_t count;   // the API's count: broadcast/reduce buffer, all-gather sendcount,
                  // reduce-scatter recvcount, all-to-all per-peer block
  bool inPlace;
  int root;                  // only for broadcast and reduce
  size_t offsetElems = 0;    // every buffer starts this many elements past a 64-byte boundary
  bool nullBuffers = false;  // count 0 with NULL buffers

  std::string name() const {
    std::string s = std::string(collName(coll)) + " " + typeName(dtype);
    if (reduces(coll)) s += std::string(" ") + opName(op);
    s += " count=" + std::to_string(count) + (inPlace ? " in-place" : " out-of-place");
    if (hasRoot(coll)) s += " root=" + std::to_string(root);
    if (offsetElems) s += " offset=" + std::to_string(offsetElems) + "elem";
    if (nullBuffers) s += " null-buffers";
    return s;
  }
  size_t es() const { return typeSize(dtype); }
};

std::vector<int> rootsFor(int nranks) {
  return nranks == 1 ? std::vector<int>{0} : std::vector<int>{0, nranks - 1};
}

std::vector<Case> buildCases(int nranks) {
  std::vector<Case> cases;
  const size_t counts[] = {0, 1, 7, 1031};
  const int last = nranks - 1;
  for (sqzDataType_t t : kAllTypes)
    for (size_t n : counts)
      for (bool inPlace : {false, true})
        for (int root : rootsFor(nranks))
          cases.push_back({Coll::kBroadcast, t, sqzSum, n, inPlace, root});
  for (sqzDataType_t t : kAllTypes)
    for (sqzRedOp_t op : kAllOps)
      for (size_t n : counts)
        for (bool inPlace : {false, true})
          for (int root : rootsFor(nranks))
            cases.push_back({Coll::kReduce, t, op, n, inPlace, root});
  for (sqzDataType_t t : kAllTypes)
    for (size_t n : counts)
      for (bool inPlace : {false, true})
        cases.push_back({Coll::kAllGather, t, sqzSum, n, inPlace, 0});
  for (sqzDataType_t t : kAllTypes)
    for (sqzRedOp_t op : kAllOps)
      for (size_t n : counts)
        for (bool inPlace : {false, true})
          cases.push_back({Coll::kReduceScatter, t, op, n, inPlace, 0});
  for (sqzDataType_t t : kAllTypes)
    for (size_t n : counts) cases.push_back({Coll::kAlltoAll, t, sqzSum, n, false, 0});

  // Buffers one element past a 64-byte boundary, every type (ops rotate with the type).
  for (size_t ti = 0; ti < std::size(kAllTypes); ++ti) {
    const sqzDataType_t t = kAllTypes[ti];
    const sqzRedOp_t op = kAllOps[ti % std::size(kAllOps)];
    for (bool inPlace : {false, true}) {
      cases.push_back({Coll::kBroadcast, t, sqzSum, 1031, inPlace, last, 1});
      cases.push_back({Coll::kReduce, t, op, 1031, inPlace, last, 1});
      cases.push_back({Coll::kAllGather, t, sqzSum, 1031, inPlace, 0, 1});
      cases.push_back({Coll::kReduceScatter, t, op, 1031, inPlace, 0, 1});
    }
    cases.push_back({Coll::kAlltoAll, t, sqzSum, 1031, false, 0, 1});
  }
  // A few pipeline chunks in every type but the 1-byte ones (4099 elements, 8 KiB chunks).
  for (sqzDataType_t t : kAllTypes) {
    cases.push_back({Coll::kBroadcast, t, sqzSum, 4099, false, 0});
    cases.push_back({Coll::kReduce, t, sqzSum, 4099, false, last});
    cases.push_back({Coll::kAllGather, t, sqzSum, 4099, false, 0});
    cases.push_back({Coll::kReduceScatter, t, sqzSum, 4099, false, 0});
    cases.push_back({Coll::kAlltoAll, t, sqzSum, 4099, false, 0});
  }
  // Count 0 with NULL buffers: accepted, a no-op.
  for (Coll coll :
       {Coll::kBroadcast, Coll::kReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kAlltoAll})
    cases.push_back({coll, sqzFloat32, sqzSum, 0, false, last, 0, /*nullBuffers=*/true});

  // Many pipeline chunks: float32 and int8 only; every op where the collective reduces, each
  // root and mode at least once.
  for (sqzDataType_t t : {sqzFloat32, sqzInt8}) {
    const size_t n = kLargeCount;
    cases.push_back({Coll::kBroadcast, t, sqzSum, n, false, last});
    cases.push_back({Coll::kBroadcast, t, sqzSum, n, true, 0});
    for (size_t oi = 0; oi < std::size(kAllOps); ++oi) {
      cases.push_back({Coll::kReduce, t, kAllOps[oi], n, oi % 2 == 1, oi % 3 == 0 ? 0 : last});
      cases.push_back({Coll::kReduceScatter, t, kAllOps[oi], n, oi % 2 == 0, 0});
    }
    cases.push_back({Coll::kAllGather, t, sqzSum, n, false, 0});
    cases.push_back({Coll::kAllGather, t, sqzSum, n, true, 0});
    cases.push_back({Coll::kAlltoAll, t, sqzSum, n, false, 0});
  }
  return cases;
}

// ---- inputs ------------------------------------------------------------------------------------
//
// Reductions use test_util.h's exactValue inputs (exact in every type) and storeExactResult for
// the expected result; i is the element's index in the collective's index space (for
// reduce-scatter: in the whole sendbuff of nranks*recvcount elements). Data movement uses the
// bit patterns below.

uint64_t mixBits(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element i of rank's data in case k: pseudo-random bits, with the top exponent bit of floating
// types cleared so that every value is finite (no NaN payloads for anyone to canonicalize).
void patternAt(sqzDataType_t dtype, size_t k, int rank, size_t i, void* dst) {
  uint64_t h = mixBits((static_cast<uint64_t>(k) << 44) ^ (static_cast<uint64_t>(rank) << 36) ^ i);
  switch (dtype) {
    case sqzFloat16:
    case sqzBfloat16:
      h &= ~(uint64_t{1} << 14);
      break;
    case sqzFloat32:
      h &= ~(uint64_t{1} << 30);
      break;
    case sqzFloat64:
      h &= ~(uint64_t{1} << 62);
      break;
    default:
      break;
  }
  std::memcpy(dst, &h, typeSize(dtype));  // little-endian: the low bytes
}

void storePattern(sqzDataType_t dtype, size_t k, int rank, size_t i, void* buf) {
  patternAt(dtype, k, rank, i, static_cast<char*>(buf) + i * typeSize(dtype));
}

// ---- expectations for reductions, prepared before the ranks start ------------------------------

// The reduced values of elements [0, n) for (dtype, op), shared by the reduce cases (n = count)
// and the reduce-scatter cases (n = nranks * recvcount; rank r checks block r).
using ReducedKey = std::tuple<int, int, size_t>;
using ReducedMap = std::map<ReducedKey, std::vector<unsigned char>>;

size_t reducedElems(const Case& c, int nranks) {
  return c.coll == Coll::kReduceScatter ? c.count * nranks : c.count;
}

// Cached per rank count: consecutive instances share it (only the algorithm differs).
const ReducedMap& reducedFor(const std::vector<Case>& cases, int nranks) {
  static int cachedRanks = -1;
  static ReducedMap cached;
  if (cachedRanks != nranks) {
    cached.clear();
    for (const Case& c : cases) {
      if (!reduces(c.coll)) continue;
      const size_t n = reducedElems(c, nranks);
      auto [it, fresh] = cached.try_emplace(ReducedKey{c.dtype, c.op, n});
      if (!fresh) continue;
      it->second.resize(n * c.es() + 1);
      for (size_t i = 0; i < n; ++i) storeExactResult(c.dtype, c.op, nranks, i, it->second.data());
    }
    cachedRanks = nranks;
  }
  return cached;
}

// ---- per-rank outcome of one case --------------------------------------------------------------

struct Outcome {
  bool ran = false;
  sqzResult_t rc = sqzInternalError;
  std::string error;     // sqzGetLastError after a failed call
  std::string mismatch;  // first wrong element, and how many
  std::string algo;      // what sqzCommGetLastAlgorithm said, when it was not the forced name
  bool sendModified = false;
  bool guardBroken = false;
  std::string untouched;  // a buffer documented as untouched was modified
  squeeze::Digest digest{};
};

// Compares out[0, n) with want[0, n) element by element; "" when identical. `base` is the index
// of out[0] in the collective's index space, for the message.
std::string compare(sqzDataType_t t, const unsigned char* out, const unsigned char* want, size_t n,
                    size_t base = 0) {
  const size_t es = typeSize(t);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(out + i * es, want + i * es, es) != 0 && bad++ == 0) first = i;
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(n) + " elements wrong; first at " +
         std::to_string(base + first) + ": got " + describeElement(t, out, first) + ", want " +
         describeElement(t, want, first);
}

constexpr unsigned char kFill = 0xcd;  // what output buffers hold before a call

// Runs case k on one rank and fills o (rc, and the checks when the call succeeded).
void runCase(sqzComm_t comm, int rank, int nranks, size_t k, const Case& c,
             const ReducedMap& reduced, Outcome& o) {
  const size_t es = c.es(), n = c.count, bytes = n * es;
  const size_t P = static_cast<size_t>(nranks), R = static_cast<size_t>(rank);
  const size_t off = c.offsetElems * es;  // every buffer's misalignment
  std::vector<unsigned char> want;        // the expected output bytes
  std::vector<unsigned char> sendCopy;    // sendbuff before the call

  auto expectUnchanged = [&](const OffsetBuffer& b, const std::vector<unsigned char>& before,
                             const char* what) {
    if (!sameBytes(b.data(), before.data(), before.size()))
      o.untouched = std::string(what) + " was modified";
    else if (!b.guardIntact())
      o.untouched = std::string(what) + ": written past its end";
  };

  if (c.nullBuffers) {
    switch (c.coll) {
      case Coll::kBroadcast:
        o.rc = sqzBroadcast(nullptr, nullptr, 0, c.dtype, c.root, comm, nullptr);
        break;
      case Coll::kReduce:
        o.rc = sqzReduce(nullptr, nullptr, 0, c.dtype, c.op, c.root, comm, nullptr);
        break;
      case Coll::kAllGather:
        o.rc = sqzAllGather(nullptr, nullptr, 0, c.dtype, comm, nullptr);
        break;
      case Coll::kReduceScatter:
        o.rc = sqzReduceScatter(nullptr, nullptr, 0, c.dtype, c.op, comm, nullptr);
        break;
      case Coll::kAlltoAll:
        o.rc = sqzAlltoAll(nullptr, nullptr, 0, c.dtype, comm, nullptr);
        break;
    }
    return;
  }

  switch (c.coll) {
    case Coll::kBroadcast: {
      OffsetBuffer send(bytes, off), recv(bytes, off);
      want.resize(bytes + 1);
      for (size_t i = 0; i < n; ++i) storePattern(c.dtype, k, c.root, i, want.data());
      const bool isRoot = rank == c.root;
      if (c.inPlace) {
        if (isRoot)
          std::memcpy(send.data(), want.data(), bytes);
        else
          std::memset(send.data(), kFill, bytes);
        o.rc = sqzBroadcast(send.data(), send.data(), n, c.dtype, c.root, comm, nullptr);
        if (o.rc != sqzSuccess) return;
        o.mismatch = compare(c.dtype, send.data(), want.data(), n);
        o.guardBroken = !send.guardIntact();
        o.digest = squeeze::sha256(send.data(), bytes);
        return;
      }
      // Out of place: non-roots pass NULL (root 0) or a buffer that must stay as it was.
      const bool nullSend = !isRoot && c.root == 0;
      for (size_t i = 0; i < n; ++i) storePattern(c.dtype, k, rank, i, send.data());
      sendCopy.assign(send.data(), send.data() + bytes);
      std::memset(recv.data(), kFill, bytes);
      o.rc = sqzBroadcast(nullSend ? nullptr : send.data(), recv.data(), n, c.dtype, c.root, comm,
                          nullptr);
      if (o.rc != sqzSuccess) return;
      o.mismatch = compare(c.dtype, recv.data(), want.data(), n);
      o.guardBroken = !recv.guardIntact();
      o.sendModified = !sameBytes(send.data(), sendCopy.data(), bytes) || !send.guardIntact();
      o.digest = squeeze::sha256(recv.data(), bytes);
      return;
    }

    case Coll::kReduce: {
      OffsetBuffer send(bytes, off), recv(bytes, off);
      for (size_t i = 0; i < n; ++i)
        storeElement(c.dtype, send.data(), i, exactValue(c.dtype, c.op, rank, i));
      sendCopy.assign(send.data(), send.data() + bytes);
      const bool isRoot = rank == c.root;
      const unsigned char* expect = reduced.at(ReducedKey{c.dtype, c.op, n}).data();
      if (c.inPlace) {
        o.rc = sqzReduce(send.data(), send.data(), n, c.dtype, c.op, c.root, comm, nullptr);
        if (o.rc != sqzSuccess) return;
        if (isRoot) {
          o.mismatch = compare(c.dtype, send.data(), expect, n);
          o.guardBroken = !send.guardIntact();
        } else {
          expectUnchanged(send, sendCopy, "a non-root's buffer (in place: send == recv)");
        }
        return;
      }
      // Out of place: non-roots pass NULL (root 0) or a buffer that must stay untouched.
      std::memset(recv.data(), kFill, bytes);
      std::vector<unsigned char> recvCopy(recv.data(), recv.data() + bytes);
      const bool nullRecv = !isRoot && c.root == 0;
      o.rc = sqzReduce(send.data(), nullRecv ? nullptr : recv.data(), n, c.dtype, c.op, c.root,
                       comm, nullptr);
      if (o.rc != sqzSuccess) return;
      o.sendModified = !sameBytes(send.data(), sendCopy.data(), bytes) || !send.guardIntact();
      if (isRoot) {
        o.mismatch = compare(c.dtype, recv.data(), expect, n);
        o.guardBroken = !recv.guardIntact();
      } else {
        expectUnchanged(recv, recvCopy, "a non-root's recvbuff");
      }
      return;
    }

    case Coll::kAllGather: {
      OffsetBuffer all(P * bytes, off), send(bytes, off);
      want.resize(P * bytes + 1);
      for (size_t p = 0; p < P; ++p)
        for (size_t i = 0; i < n; ++i)
          storePattern(c.dtype, k, static_cast<int>(p), i, want.data() + p * bytes);
      std::memset(all.data(), kFill, P * bytes);
      const void* sb;
      if (c.inPlace) {
        std::memcpy(all.data() + R * bytes, want.data() + R * bytes, bytes);
        sb = all.data() + R * bytes;
      } else {
        std::memcpy(send.data(), want.data() + R * bytes, bytes);
        sendCopy.assign(send.data(), send.data() + bytes);
        sb = send.data();
      }
      o.rc = sqzAllGather(sb, all.data(), n, c.dtype, comm, nullptr);
      if (o.rc != sqzSuccess) return;
      o.mismatch = compare(c.dtype, all.data(), want.data(), P * n);
      o.guardBroken = !all.guardIntact();
      if (!c.inPlace)
        o.sendModified =
            !sameBytes(send.data(), sendCopy.data(), bytes) || !send.guardIntact();
      o.digest = squeeze::sha256(all.data(), P * bytes);
      return;
    }

    case Coll::kReduceScatter: {
      OffsetBuffer send(P * bytes, off), recv(bytes, off);
      for (size_t i = 0; i < P * n; ++i)
        storeElement(c.dtype, send.data(), i, exactValue(c.dtype, c.op, rank, i));
      const unsigned char* expect = reduced.at(ReducedKey{c.dtype, c.op, P * n}).data() + R * bytes;
      if (c.inPlace) {
        unsigned char* mine = send.data() + R * bytes;
        o.rc = sqzReduceScatter(send.data(), mine, n, c.dtype, c.op, comm, nullptr);
        if (o.rc != sqzSuccess) return;
        o.mismatch = compare(c.dtype, mine, expect, n, R * n);
        o.guardBroken = !send.guardIntact();
        return;
      }
      sendCopy.assign(send.data(), send.data() + P * bytes);
      std::memset(recv.data(), kFill, bytes);
      o.rc = sqzReduceScatter(send.data(), recv.data(), n, c.dtype, c.op, comm, nullptr);
      if (o.rc != sqzSuccess) return;
      o.mismatch = compare(c.dtype, recv.data(), expect, n, R * n);
      o.guardBroken = !recv.guardIntact();
      o.sendModified =
          !sameBytes(send.data(), sendCopy.data(), P * bytes) || !send.guardIntact();
      return;
    }

    case Coll::kAlltoAll: {
      OffsetBuffer send(P * bytes, off), recv(P * bytes, off);
      // Block p of rank r's sendbuff is element range [p*n, (p+1)*n) of r's pattern; rank r
      // receives block r of every rank p into its block p.
      for (size_t i = 0; i < P * n; ++i) storePattern(c.dtype, k, rank, i, send.data());
      sendCopy.assign(send.data(), send.data() + P * bytes);
      want.resize(P * bytes + 1);
      for (size_t p = 0; p < P; ++p)
        for (size_t i = 0; i < n; ++i)
          patternAt(c.dtype, k, static_cast<int>(p), R * n + i, want.data() + (p * n + i) * es);
      std::memset(recv.data(), kFill, P * bytes);
      o.rc = sqzAlltoAll(send.data(), recv.data(), n, c.dtype, comm, nullptr);
      if (o.rc != sqzSuccess) return;
      o.mismatch = compare(c.dtype, recv.data(), want.data(), P * n);
      o.guardBroken = !recv.guardIntact();
      o.sendModified =
          !sameBytes(send.data(), sendCopy.data(), P * bytes) || !send.guardIntact();
      return;
    }
  }
}

// Runs every case on one rank.
void runCases(sqzComm_t& comm, int rank, int nranks, const std::string& algo,
              const std::vector<Case>& cases, const ReducedMap& reduced,
              std::vector<std::vector<Outcome>>& outcomes, std::mutex& mu) {
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    setStatus("case " + std::to_string(k) + ": " + c.name());
    // all-to-all has no ring: the tuner falls back to the only implementation.
    const std::string wantAlgo = c.coll == Coll::kAlltoAll ? "naive" : algo;
    Outcome o;
    o.ran = true;
    runCase(comm, rank, nranks, k, c, reduced, o);
    if (o.rc != sqzSuccess) {
      o.error = sqzGetLastError(comm);
      std::lock_guard<std::mutex> lock(mu);
      outcomes[k][rank] = std::move(o);
      // Stop here, and make the peers see it at once instead of waiting for the timeout.
      setStatus("sqzCommAbort after a failed case " + std::to_string(k));
      sqzCommAbort(comm);
      comm = nullptr;
      return;
    }
    if (c.count > 0) {  // a count-0 call returns before choosing an algorithm
      const char* name = nullptr;
      sqzResult_t rc = sqzCommGetLastAlgorithm(comm, &name);
      if (rc != sqzSuccess || !name || wantAlgo != name)
        o.algo = std::string("sqzCommGetLastAlgorithm returned ") + sqzGetErrorString(rc) + ", '" +
                 (name ? name : "(null)") + "', want '" + wantAlgo + "'";
    }
    std::lock_guard<std::mutex> lock(mu);
    outcomes[k][rank] = std::move(o);
  }
}

// Every rank's outcomes as test failures (see reportOutcomes), plus untouched buffers and the
// algorithm reported; outputs must agree across ranks where the collective says so.
void report(const std::string& where, const std::vector<Case>& cases,
            const std::vector<std::vector<Outcome>>& outcomes) {
  reportOutcomes(
      where, cases, outcomes, kMaxReportedFailures,
      [](const Outcome& o, auto note) {
        if (!o.untouched.empty()) note(o.untouched);
        if (!o.algo.empty()) note(o.algo);
      },
      [&](size_t k) { return sameOnEveryRank(cases[k].coll); });
}

// ---- the parameterized test -------------------------------------------------------------------

// transport, nranks, algorithm forced with SQZ_ALGO.
using Param = TransportRanksAlgo;

class CollectivesTest : public ::testing::TestWithParam<Param> {};

TEST_P(CollectivesTest, AllCollectivesTypesOpsCounts) {
  const char* transport = std::get<0>(GetParam());
  const int nranks = std::get<1>(GetParam());
  const std::string algo = std::get<2>(GetParam());
  if (!transportCompiledIn(transport))
    GTEST_SKIP() << "transport '" << transport << "' is not compiled into this build";

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Case> cases = buildCases(nranks);
  const ReducedMap& reduced = reducedFor(cases, nranks);
  std::vector<std::vector<Outcome>> outcomes(cases.size(), std::vector<Outcome>(nranks));
  std::mutex mu;  // protects outcomes
  const double prepSeconds = secondsSince(t0);

  RunOptions opts;
  opts.transports = transport;
  opts.chunkBytes = kChunkBytes;
  RunResult run;
  {
    ScopedEnv env;  // read by sqzCommInitRankConfig, before any rank thread runs a collective
    env.set("SQZ_ALGO", algo.c_str());
    run = runRanks(nranks, opts, [&](sqzComm_t& comm, int rank) {
      runCases(comm, rank, nranks, algo, cases, reduced, outcomes, mu);
    });
  }
  if (run.unknownTransport)
    GTEST_SKIP() << "transport '" << transport
                 << "' is unknown to this build: " << run.initErrors.front();
  for (const std::string& e : run.initErrors) ADD_FAILURE() << "init failed: " << e;
  if (!run.initErrors.empty()) return;

  const std::string where =
      std::string(transport) + " nranks=" + std::to_string(nranks) + " algo=" + algo;
  report(where, cases, outcomes);
  std::printf(
      "[  TIMING  ] %s: %zu calls per rank; expectations %.2f s, init %.2f s, "
      "total %.2f s\n",
      where.c_str(), cases.size(), prepSeconds, run.initSeconds, run.totalSeconds);
}

INSTANTIATE_TEST_SUITE_P(Collective, CollectivesTest,
                         ::testing::ValuesIn(transportRanksAlgos({1, 2, 3, 4, 5, 7, 8},
                                                                 {"ring", "naive"})),
                         transportRanksAlgoName);

const auto* const kLoopback = ::testing::AddGlobalTestEnvironment(new LoopbackEnvironment);

}  // namespace
}  // namespace sqztest
