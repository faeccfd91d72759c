// Grouped sqzSend/sqzRecv, sqzBarrier and sqzCommSplit with ranks as threads in one process,
// value-parameterized over the transport (tcp, and shm where it is compiled in):
//   - a ring exchange inside a group (receive first, and send first) on 1..8 ranks;
//   - several messages of different sizes and types to the same peer match in order, across
//     groups too; a send to self and a receive from self in one group are a copy;
//   - a receive of another size than the send fails on both ranks with the sizes in the message,
//     within the timeout (no hang);
//   - misuse: sqzGroupEnd without sqzGroupStart, peers out of range, NULL buffers;
//   - sqzBarrier on 1..8 ranks really waits for every rank;
//   - sqzCommSplit into odd and even ranks (key orders the new ranks), the children's
//     all-reduce, and the parent used afterwards, interleaved with the child and concurrently
//     with it from another thread; SQZ_SPLIT_NOCOLOR gives NULL;
//   - sqzAlltoAll with overlapping buffers is sqzInvalidArgument.
#include <gtest/gtest.h>
#include <squeeze/squeeze.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace sqztest {
namespace {

// EXPECTs that call succeeded, with the communicator's last error in the message. Usable from
// rank threads (GoogleTest's assertions are thread-safe with pthreads).
#define SQZ_EXPECT_OK(call, comm)                                                          \
  do {                                                                                     \
    sqzResult_t rc_ = (call);                                                              \
    EXPECT_EQ(rc_, sqzSuccess) << #call << " on rank " << rank << " returned "             \
                               << sqzGetErrorString(rc_) << ": " << sqzGetLastError(comm); \
  } while (0)

uint64_t mixBits(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The bytes of message `msg` from rank src to rank dst.
std::vector<unsigned char> payload(int src, int dst, int msg, size_t bytes) {
  std::vector<unsigned char> v(bytes);
  const uint64_t seed = (uint64_t(src) << 48) ^ (uint64_t(dst) << 32) ^ (uint64_t(msg) << 24);
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t h = mixBits(seed ^ (i / 8));
    std::memcpy(v.data() + i, &h, std::min<size_t>(8, bytes - i));
  }
  return v;
}

std::string lastAlgorithm(sqzComm_t comm) {
  const char* name = nullptr;
  if (sqzCommGetLastAlgorithm(comm, &name) != sqzSuccess || !name) return "(error)";
  return name;
}

class P2pSplitTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!transportCompiledIn(GetParam()))
      GTEST_SKIP() << "transport '" << GetParam() << "' is not compiled into this build";
  }
  RunOptions options(int timeoutMs = 30000) const {
    RunOptions o;
    o.transports = GetParam();
    o.timeoutMs = timeoutMs;
    o.watchdogSeconds = 120;
    return o;
  }
  // runRanks, failing the test if any rank's init failed.
  void run(int nranks, const std::function<void(sqzComm_t& comm, int rank)>& fn,
           int timeoutMs = 30000) {
    RunResult r = runRanks(nranks, options(timeoutMs), fn);
    for (const std::string& e : r.initErrors)
      ADD_FAILURE() << nranks << " ranks over " << GetParam() << ": init failed: " << e;
  }
};

// ---- (1) ring exchange inside a group ----------------------------------------------------------

TEST_P(P2pSplitTest, GroupRingBothOrders) {
  for (int nranks = 1; nranks <= 8; ++nranks) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    run(nranks, [&](sqzComm_t& comm, int rank) {
      const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
      int msg = 0;
      // 1 MiB crosses every socket and ring buffer: only posting both at once completes it.
      for (size_t count : {size_t{1}, size_t{1000}, size_t{262147}})
        for (bool recvFirst : {true, false}) {
          ++msg;
          setStatus("ring count=" + std::to_string(count) +
                    (recvFirst ? " recv first" : " send first"));
          const size_t bytes = count * sizeof(float);
          std::vector<unsigned char> send = payload(rank, next, msg, bytes), sent = send;
          std::vector<unsigned char> recv(bytes, 0xcd);
          SQZ_EXPECT_OK(sqzGroupStart(), nullptr);
          if (recvFirst) {
            SQZ_EXPECT_OK(sqzRecv(recv.data(), count, sqzFloat32, prev, comm, nullptr), comm);
            SQZ_EXPECT_OK(sqzSend(send.data(), count, sqzFloat32, next, comm, nullptr), comm);
          } else {
            SQZ_EXPECT_OK(sqzSend(send.data(), count, sqzFloat32, next, comm, nullptr), comm);
            SQZ_EXPECT_OK(sqzRecv(recv.data(), count, sqzFloat32, prev, comm, nullptr), comm);
          }
          SQZ_EXPECT_OK(sqzGroupEnd(), comm);
          EXPECT_TRUE(recv == payload(prev, rank, msg, bytes))
              << "rank " << rank << " received wrong data from rank " << prev << ", count " << count
              << (recvFirst ? " (receive posted first)" : " (send posted first)");
          EXPECT_TRUE(send == sent) << "rank " << rank << ": sqzSend modified its buffer";
          EXPECT_EQ(lastAlgorithm(comm), "p2p") << "rank " << rank;
        }
      // Both directions at once, different sizes each way: on 2 ranks both messages go to the
      // same peer (matched in order), on 1 rank to self.
      ++msg;
      setStatus("ring both directions");
      const size_t a = 4099, b = 77;
      std::vector<unsigned char> toNext = payload(rank, next, msg, a),
                                 toPrev = payload(rank, prev, msg + 1, b);
      std::vector<unsigned char> fromPrev(a, 0xcd), fromNext(b, 0xcd);
      SQZ_EXPECT_OK(sqzGroupStart(), nullptr);
      SQZ_EXPECT_OK(sqzSend(toNext.data(), a, sqzUint8, next, comm, nullptr), comm);
      SQZ_EXPECT_OK(sqzRecv(fromPrev.data(), a, sqzUint8, prev, comm, nullptr), comm);
      SQZ_EXPECT_OK(sqzSend(toPrev.data(), b, sqzUint8, prev, comm, nullptr), comm);
      SQZ_EXPECT_OK(sqzRecv(fromNext.data(), b, sqzUint8, next, comm, nullptr), comm);
      SQZ_EXPECT_OK(sqzGroupEnd(), comm);
      EXPECT_TRUE(fromPrev == payload(prev, rank, msg, a)) << "rank " << rank << " from prev";
      EXPECT_TRUE(fromNext == payload(next, rank, msg + 1, b)) << "rank " << rank << " from next";
    });
  }
}

// ---- (2) several messages to the same peer, and to self -----------------------------------------

struct Message {
  sqzDataType_t dtype;
  size_t count;
};
// Different sizes and types (including an empty message and one larger than socket buffers).
const Message kMessages[] = {{sqzFloat32, 7}, {sqzInt8, 0},     {sqzUint8, 70001},  {sqzFloat64, 1},
                             {sqzInt32, 300}, {sqzBfloat16, 3}, {sqzFloat32, 65536}};

TEST_P(P2pSplitTest, ManyMessagesPerPeerMatchInOrderIncludingSelf) {
  for (int nranks : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    run(nranks, [&](sqzComm_t& comm, int rank) {
      const int nmsg = static_cast<int>(std::size(kMessages));
      for (int round = 0; round < 2; ++round) {  // the second group continues each pair's order
        setStatus("round " + std::to_string(round));
        // send[p][j], recv[p][j]: message j to / from rank p (self included).
        std::vector<std::vector<std::vector<unsigned char>>> send(nranks), recv(nranks);
        for (int p = 0; p < nranks; ++p)
          for (int j = 0; j < nmsg; ++j) {
            const size_t bytes = kMessages[j].count * typeSize(kMessages[j].dtype);
            send[p].push_back(payload(rank, p, round * 100 + j, bytes));
            recv[p].emplace_back(bytes, 0xcd);
          }
        // Interleave: receives and sends alternate, in a different peer order per rank.
        SQZ_EXPECT_OK(sqzGroupStart(), nullptr);
        for (int j = 0; j < nmsg; ++j)
          for (int q = 0; q < nranks; ++q) {
            const int p = (rank + q) % nranks;
            const Message& m = kMessages[j];
            if ((j + q) % 2 == 0) {
              SQZ_EXPECT_OK(sqzRecv(recv[p][j].data(), m.count, m.dtype, p, comm, nullptr), comm);
              SQZ_EXPECT_OK(sqzSend(send[p][j].data(), m.count, m.dtype, p, comm, nullptr), comm);
            } else {
              SQZ_EXPECT_OK(sqzSend(send[p][j].data(), m.count, m.dtype, p, comm, nullptr), comm);
              SQZ_EXPECT_OK(sqzRecv(recv[p][j].data(), m.count, m.dtype, p, comm, nullptr), comm);
            }
          }
        SQZ_EXPECT_OK(sqzGroupEnd(), comm);
        for (int p = 0; p < nranks; ++p)
          for (int j = 0; j < nmsg; ++j) {
            const size_t bytes = kMessages[j].count * typeSize(kMessages[j].dtype);
            EXPECT_TRUE(recv[p][j] == payload(p, rank, round * 100 + j, bytes))
                << "rank " << rank << " round " << round << ": message " << j << " ("
                << kMessages[j].count << " " << typeName(kMessages[j].dtype) << ") from rank " << p
                << " is wrong";
          }
      }
      // Outside a group: blocking calls, small enough not to need the peer's receive posted.
      if (nranks >= 2 && rank < 2) {
        setStatus("blocking send/recv");
        const int peer = 1 - rank;
        std::vector<unsigned char> out = payload(rank, peer, 999, 64), in(64, 0);
        if (rank == 0) {
          SQZ_EXPECT_OK(sqzSend(out.data(), 64, sqzUint8, peer, comm, nullptr), comm);
          SQZ_EXPECT_OK(sqzRecv(in.data(), 64, sqzUint8, peer, comm, nullptr), comm);
        } else {
          SQZ_EXPECT_OK(sqzRecv(in.data(), 64, sqzUint8, peer, comm, nullptr), comm);
          SQZ_EXPECT_OK(sqzSend(out.data(), 64, sqzUint8, peer, comm, nullptr), comm);
        }
        EXPECT_TRUE(in == payload(peer, rank, 999, 64)) << "rank " << rank << " blocking recv";
      }
      // A self-only group whose send and receive sizes differ fails before any transfer, and
      // the communicator stays usable.
      setStatus("self mismatch");
      std::vector<unsigned char> s(16, 1), r(16, 0);
      SQZ_EXPECT_OK(sqzGroupStart(), nullptr);
      SQZ_EXPECT_OK(sqzSend(s.data(), 16, sqzUint8, rank, comm, nullptr), comm);
      SQZ_EXPECT_OK(sqzRecv(r.data(), 12, sqzUint8, rank, comm, nullptr), comm);
      sqzResult_t rc = sqzGroupEnd();
      EXPECT_EQ(rc, sqzInvalidUsage)
          << "rank " << rank << ": self send of 16 bytes, receive of 12: " << sqzGetLastError(comm);
      std::string err = sqzGetLastError(comm);
      EXPECT_NE(err.find("16"), std::string::npos) << err;
      EXPECT_NE(err.find("12"), std::string::npos) << err;
      SQZ_EXPECT_OK(sqzGroupStart(), nullptr);
      SQZ_EXPECT_OK(sqzSend(s.data(), 16, sqzUint8, rank, comm, nullptr), comm);
      SQZ_EXPECT_OK(sqzRecv(r.data(), 16, sqzUint8, rank, comm, nullptr), comm);
      SQZ_EXPECT_OK(sqzGroupEnd(), comm);
      EXPECT_TRUE(r == s) << "rank " << rank << ": self copy after a failed self group";
      SQZ_EXPECT_OK(sqzBarrier(comm), comm);
    });
  }
}

// ---- (3) sizes that disagree
// ---------------------------------------------------------------------

// Rank 0 sends 400 bytes, rank 1 receives 404: both calls fail, promptly, naming the sizes.
void mismatch(sqzComm_t& comm, int rank, bool grouped, std::vector<sqzResult_t>& rcs,
              std::vector<std::string>& errors, std::vector<double>& seconds) {
  std::vector<unsigned char> buf(404, 7);
  const auto t0 = std::chrono::steady_clock::now();
  sqzResult_t rc;
  if (grouped) sqzGroupStart();
  if (rank == 0)
    rc = sqzSend(buf.data(), 400, sqzUint8, 1, comm, nullptr);
  else
    rc = sqzRecv(buf.data(), 404, sqzUint8, 0, comm, nullptr);
  if (grouped) {
    EXPECT_EQ(rc, sqzSuccess) << "queueing in a group";
    rc = sqzGroupEnd();
  }
  seconds[rank] = secondsSince(t0);
  rcs[rank] = rc;
  errors[rank] = sqzGetLastError(comm);
  if (rc != sqzSuccess) {
    sqzCommAbort(comm);
    comm = nullptr;
    return;
  }
  // A call that returned success anyway (the sender of a message that fit in the transport's
  // buffers) must at least not leave this rank hanging: its next call on the communicator fails
  // once the peer has given up.
  const auto t1 = std::chrono::steady_clock::now();
  sqzResult_t next = sqzBarrier(comm);
  EXPECT_NE(next, sqzSuccess) << "rank " << rank << ": sqzBarrier after the mismatch succeeded";
  EXPECT_LT(secondsSince(t1), 15.0) << "rank " << rank << ": sqzBarrier after the mismatch";
  sqzCommAbort(comm);
  comm = nullptr;
}

TEST_P(P2pSplitTest, MismatchedSizesFailReceiverAndThenSender) {
  for (bool grouped : {true, false}) {
    SCOPED_TRACE(grouped ? "inside a group" : "blocking, outside a group");
    std::vector<sqzResult_t> rcs(2, sqzInternalError);
    std::vector<std::string> errors(2);
    std::vector<double> seconds(2, 0);
    run(
        2, [&](sqzComm_t& comm, int rank) { mismatch(comm, rank, grouped, rcs, errors, seconds); },
        /*timeoutMs=*/5000);
    // As in MPI and NCCL, the receiver is the one that learns of the mismatch; the sender's
    // call may already have succeeded (the bytes fit in the transport's buffers), and then its
    // next call fails promptly (checked in mismatch()).
    EXPECT_NE(rcs[1], sqzSuccess) << "rank 1 (receives 404 bytes) returned success";
    for (int r = 0; r < 2; ++r)
      EXPECT_LT(seconds[r], 15.0) << "rank " << r << " took " << seconds[r] << " s";
    // The receiver sees both sizes.
    EXPECT_NE(errors[1].find("400"), std::string::npos) << "rank 1: " << errors[1];
    EXPECT_NE(errors[1].find("404"), std::string::npos) << "rank 1: " << errors[1];
    std::printf("[  INFO    ] %s: rank 0 %s after %.2f s: '%s'; rank 1 %s after %.2f s: '%s'\n",
                grouped ? "grouped" : "blocking", sqzGetErrorString(rcs[0]), seconds[0],
                errors[0].c_str(), sqzGetErrorString(rcs[1]), seconds[1], errors[1].c_str());
  }
}

// ---- (4) misuse -------------------------------------------------------------------------------

TEST(P2pMisuse, GroupEndWithoutStartIsInvalidUsage) {
  EXPECT_EQ(sqzGroupEnd(), sqzInvalidUsage);
  EXPECT_NE(std::string(sqzGetLastError(nullptr)).find("sqzGroupStart"), std::string::npos)
      << sqzGetLastError(nullptr);
  // An empty group, and nested empty groups, are fine; one End too many is not.
  EXPECT_EQ(sqzGroupStart(), sqzSuccess);
  EXPECT_EQ(sqzGroupEnd(), sqzSuccess);
  EXPECT_EQ(sqzGroupStart(), sqzSuccess);
  EXPECT_EQ(sqzGroupStart(), sqzSuccess);
  EXPECT_EQ(sqzGroupEnd(), sqzSuccess);
  EXPECT_EQ(sqzGroupEnd(), sqzSuccess);
  EXPECT_EQ(sqzGroupEnd(), sqzInvalidUsage);
}

TEST_P(P2pSplitTest, PeerOutOfRangeAndNullBuffersAreInvalidArgument) {
  run(2, [&](sqzComm_t& comm, int rank) {
    float buf[4] = {1, 2, 3, 4};
    for (int peer : {-1, 2, 1000}) {
      EXPECT_EQ(sqzSend(buf, 4, sqzFloat32, peer, comm, nullptr), sqzInvalidArgument)
          << "sqzSend to peer " << peer;
      EXPECT_NE(std::string(sqzGetLastError(comm)).find(std::to_string(peer)), std::string::npos)
          << sqzGetLastError(comm);
      EXPECT_EQ(sqzRecv(buf, 4, sqzFloat32, peer, comm, nullptr), sqzInvalidArgument)
          << "sqzRecv from peer " << peer;
      // Inside a group the call is refused at once; the group itself is then empty.
      EXPECT_EQ(sqzGroupStart(), sqzSuccess);
      EXPECT_EQ(sqzSend(buf, 4, sqzFloat32, peer, comm, nullptr), sqzInvalidArgument)
          << "sqzSend to peer " << peer << " in a group";
      EXPECT_EQ(sqzRecv(buf, 4, sqzFloat32, peer, comm, nullptr), sqzInvalidArgument)
          << "sqzRecv from peer " << peer << " in a group";
      EXPECT_EQ(sqzGroupEnd(), sqzSuccess) << sqzGetLastError(comm);
    }
    EXPECT_EQ(sqzSend(nullptr, 4, sqzFloat32, 1 - rank, comm, nullptr), sqzInvalidArgument);
    EXPECT_EQ(sqzRecv(nullptr, 4, sqzFloat32, 1 - rank, comm, nullptr), sqzInvalidArgument);
    EXPECT_EQ(sqzSend(buf, 4, sqzFloat32, 1 - rank, nullptr, nullptr), sqzInvalidArgument);
    int dummyStream = 0;
    EXPECT_EQ(sqzSend(buf, 4, sqzFloat32, 1 - rank, comm, &dummyStream), sqzInvalidArgument);
    // The communicator is still usable: a valid exchange.
    float in[4] = {};
    const float mine[4] = {float(rank), 1.5f, -2.0f, float(10 * rank)};
    SQZ_EXPECT_OK(sqzGroupStart(), nullptr);
    SQZ_EXPECT_OK(sqzSend(mine, 4, sqzFloat32, 1 - rank, comm, nullptr), comm);
    SQZ_EXPECT_OK(sqzRecv(in, 4, sqzFloat32, 1 - rank, comm, nullptr), comm);
    SQZ_EXPECT_OK(sqzGroupEnd(), comm);
    const int peer = 1 - rank;
    EXPECT_EQ(in[0], float(peer));
    EXPECT_EQ(in[3], float(10 * peer));
  });
}

// ---- (5) barrier
// ---------------------------------------------------------------------------------

TEST_P(P2pSplitTest, BarrierWaitsForEveryRank) {
  EXPECT_EQ(sqzBarrier(nullptr), sqzInvalidArgument);
  for (int nranks = 1; nranks <= 8; ++nranks) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    std::atomic<int> arrived{0};
    constexpr int kRounds = 20;
    run(nranks, [&](sqzComm_t& comm, int rank) {
      for (int k = 0; k < kRounds; ++k) {
        // A late rank now and then, so that a barrier that does not wait shows.
        if (rank == (k % nranks) && k % 3 == 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        arrived.fetch_add(1);
        setStatus("barrier " + std::to_string(k));
        SQZ_EXPECT_OK(sqzBarrier(comm), comm);
        const int seen = arrived.load();
        EXPECT_GE(seen, (k + 1) * nranks)
            << "rank " << rank << " left barrier " << k << " before every rank arrived";
      }
    });
    EXPECT_EQ(arrived.load(), kRounds * nranks);
  }
}

// ---- (6) split
// ------------------------------------------------------------------------------------

// Sum of (r + 1) over the ranks r < nranks of the given parity.
int paritySum(int nranks, int parity) {
  int s = 0;
  for (int r = parity; r < nranks; r += 2) s += r + 1;
  return s;
}

// Checks the child of an odd/even split: size, rank, order (by all-gathering parent ranks) and
// an all-reduce giving the per-color sum.
void checkParityChild(sqzComm_t child, int rank, int nranks, bool reversed) {
  ASSERT_NE(child, nullptr) << "rank " << rank;
  const int color = rank % 2;
  const int size = (nranks - color + 1) / 2;
  int n = -1, me = -1;
  SQZ_EXPECT_OK(sqzCommCount(child, &n), child);
  SQZ_EXPECT_OK(sqzCommUserRank(child, &me), child);
  EXPECT_EQ(n, size) << "rank " << rank << " color " << color;
  const int wantRank = reversed ? size - 1 - rank / 2 : rank / 2;
  EXPECT_EQ(me, wantRank) << "rank " << rank << " color " << color
                          << (reversed ? " key=-rank" : " key=rank");
  if (n != size) return;
  std::vector<int32_t> parents(size, -1);
  const int32_t mine = rank;
  SQZ_EXPECT_OK(sqzAllGather(&mine, parents.data(), 1, sqzInt32, child, nullptr), child);
  for (int i = 0; i < size; ++i) {
    const int want = reversed ? color + 2 * (size - 1 - i) : color + 2 * i;
    EXPECT_EQ(parents[i], want) << "rank " << rank << ": child rank " << i << " is parent rank "
                                << parents[i];
  }
  int32_t v = rank + 1, sum = 0;
  SQZ_EXPECT_OK(sqzAllReduce(&v, &sum, 1, sqzInt32, sqzSum, child, nullptr), child);
  EXPECT_EQ(sum, paritySum(nranks, color)) << "rank " << rank << " color " << color;
}

// An all-reduce over the parent: the sum of rank+1+salt over all ranks.
void checkParent(sqzComm_t comm, int rank, int nranks, int salt) {
  int64_t v = rank + 1 + salt, sum = 0;
  SQZ_EXPECT_OK(sqzAllReduce(&v, &sum, 1, sqzInt64, sqzSum, comm, nullptr), comm);
  EXPECT_EQ(sum, int64_t(nranks) * (nranks + 1) / 2 + int64_t(nranks) * salt)
      << "parent all-reduce on rank " << rank << ", salt " << salt;
}

TEST_P(P2pSplitTest, SplitOddEven) {
  for (int nranks : {1, 2, 5, 8}) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    run(nranks, [&](sqzComm_t& comm, int rank) {
      for (bool reversed : {false, true}) {
        setStatus(reversed ? "split key=-rank" : "split key=rank");
        sqzComm_t child = nullptr;
        SQZ_EXPECT_OK(sqzCommSplit(comm, rank % 2, reversed ? -rank : rank, &child, nullptr), comm);
        checkParityChild(child, rank, nranks, reversed);
        checkParent(comm, rank, nranks, reversed ? 100 : 0);
        EXPECT_EQ(sqzCommDestroy(child), sqzSuccess);
      }
      // Every rank the same key: ordered by parent rank.
      sqzComm_t child = nullptr;
      SQZ_EXPECT_OK(sqzCommSplit(comm, rank % 2, 0, &child, nullptr), comm);
      checkParityChild(child, rank, nranks, /*reversed=*/false);
      EXPECT_EQ(sqzCommDestroy(child), sqzSuccess);
      checkParent(comm, rank, nranks, 7);
    });
  }
}

TEST_P(P2pSplitTest, SplitParentAndChildInterleaved) {
  const int nranks = 5;
  run(nranks, [&](sqzComm_t& comm, int rank) {
    sqzComm_t child = nullptr;
    SQZ_EXPECT_OK(sqzCommSplit(comm, rank % 2, rank, &child, nullptr), comm);
    ASSERT_NE(child, nullptr);
    const int color = rank % 2, size = (nranks - color + 1) / 2;
    for (int it = 0; it < 10; ++it) {
      setStatus("interleaved " + std::to_string(it));
      checkParent(comm, rank, nranks, it);
      int32_t v = (rank + 1) * (it + 1), sum = 0;
      SQZ_EXPECT_OK(sqzAllReduce(&v, &sum, 1, sqzInt32, sqzSum, child, nullptr), child);
      EXPECT_EQ(sum, paritySum(nranks, color) * (it + 1)) << "rank " << rank << " it " << it;
      // A broadcast on the child from its last rank, then a larger all-reduce on the parent.
      std::vector<float> b(1000, rank == color + 2 * (size - 1) ? float(it + color) : -1.0f);
      SQZ_EXPECT_OK(
          sqzBroadcast(b.data(), b.data(), b.size(), sqzFloat32, size - 1, child, nullptr), child);
      EXPECT_EQ(b[0], float(it + color));
      EXPECT_EQ(b[999], float(it + color));
      std::vector<int32_t> big(10000, rank), total(10000, -1);
      SQZ_EXPECT_OK(
          sqzAllReduce(big.data(), total.data(), big.size(), sqzInt32, sqzMax, comm, nullptr),
          comm);
      EXPECT_EQ(total[0], nranks - 1);
      EXPECT_EQ(total[9999], nranks - 1);
    }
    EXPECT_EQ(sqzCommDestroy(child), sqzSuccess);
    checkParent(comm, rank, nranks, 42);
  });
}

TEST_P(P2pSplitTest, SplitChildFromSecondThreadWhileParentRuns) {
  const int nranks = 4;
  constexpr int kIters = 40;
  run(nranks, [&](sqzComm_t& comm, int rank) {
    sqzComm_t child = nullptr;
    SQZ_EXPECT_OK(sqzCommSplit(comm, rank % 2, -rank, &child, nullptr), comm);
    ASSERT_NE(child, nullptr);
    const int color = rank % 2;
    // The child's calls from a second thread, the parent's from this one, at the same time.
    std::thread side([&] {
      for (int it = 0; it < kIters; ++it) {
        std::vector<int32_t> v(3000, (rank + 1) * (it + 1)), sum(3000, 0);
        SQZ_EXPECT_OK(
            sqzAllReduce(v.data(), sum.data(), v.size(), sqzInt32, sqzSum, child, nullptr), child);
        EXPECT_EQ(sum[0], paritySum(nranks, color) * (it + 1)) << "child, rank " << rank;
        EXPECT_EQ(sum[2999], paritySum(nranks, color) * (it + 1)) << "child, rank " << rank;
      }
    });
    for (int it = 0; it < kIters; ++it) {
      setStatus("parent while child runs, it " + std::to_string(it));
      checkParent(comm, rank, nranks, it);
      std::vector<float> g(nranks * 500, -1.0f), mine(500, float(rank * 1000 + it));
      SQZ_EXPECT_OK(sqzAllGather(mine.data(), g.data(), 500, sqzFloat32, comm, nullptr), comm);
      for (int p = 0; p < nranks; ++p)
        EXPECT_EQ(g[p * 500 + 499], float(p * 1000 + it)) << "parent all-gather, rank " << rank;
    }
    side.join();
    checkParityChild(child, rank, nranks, /*reversed=*/true);
    EXPECT_EQ(sqzCommDestroy(child), sqzSuccess);
    checkParent(comm, rank, nranks, -1);
  });
}

TEST_P(P2pSplitTest, SplitNoColorGivesNull) {
  const int nranks = 5;
  run(nranks, [&](sqzComm_t& comm, int rank) {
    const bool out = rank == 0 || rank == 3;
    sqzComm_t child = reinterpret_cast<sqzComm_t>(uintptr_t{1});  // must be overwritten
    SQZ_EXPECT_OK(sqzCommSplit(comm, out ? SQZ_SPLIT_NOCOLOR : 7, 0, &child, nullptr), comm);
    if (out) {
      EXPECT_EQ(child, nullptr) << "rank " << rank << " passed SQZ_SPLIT_NOCOLOR";
    } else {
      ASSERT_NE(child, nullptr);
      ASSERT_NE(child, reinterpret_cast<sqzComm_t>(uintptr_t{1}));
      int n = -1, me = -1;
      SQZ_EXPECT_OK(sqzCommCount(child, &n), child);
      SQZ_EXPECT_OK(sqzCommUserRank(child, &me), child);
      EXPECT_EQ(n, 3);
      EXPECT_EQ(me, rank == 1 ? 0 : rank == 2 ? 1 : 2) << "rank " << rank;
      int32_t v = rank, sum = 0;
      SQZ_EXPECT_OK(sqzAllReduce(&v, &sum, 1, sqzInt32, sqzSum, child, nullptr), child);
      EXPECT_EQ(sum, 1 + 2 + 4);
      EXPECT_EQ(sqzCommDestroy(child), sqzSuccess);
    }
    // A negative color other than SQZ_SPLIT_NOCOLOR is refused (by every rank, so nobody waits).
    sqzComm_t bad = nullptr;
    EXPECT_EQ(sqzCommSplit(comm, -5, 0, &bad, nullptr), sqzInvalidArgument);
    EXPECT_EQ(bad, nullptr);
    checkParent(comm, rank, nranks, 3);
  });
}

// ---- (7) all-to-all with overlapping buffers
// ------------------------------------------------------

TEST_P(P2pSplitTest, AlltoAllOverlappingBuffersIsInvalidArgument) {
  for (int nranks : {1, 3}) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    run(nranks, [&](sqzComm_t& comm, int rank) {
      const size_t count = 5, total = count * nranks;
      std::vector<float> buf(3 * total, 0.0f);
      float* base = buf.data() + total;
      // Identical, shifted by one element either way, and recv ending inside send.
      const std::pair<const float*, float*> overlaps[] = {
          {base, base}, {base, base + 1}, {base + 1, base}, {base, base + total - 1}};
      for (const auto& [s, r] : overlaps) {
        EXPECT_EQ(sqzAlltoAll(s, r, count, sqzFloat32, comm, nullptr), sqzInvalidArgument)
            << "rank " << rank << ": recv - send = " << (r - s) << " elements";
        EXPECT_NE(lower(sqzGetLastError(comm)).find("overlap"), std::string::npos)
            << sqzGetLastError(comm);
      }
      // Adjacent but disjoint buffers are fine, and the communicator is still usable.
      float* send = base;
      float* recv = base + total;
      for (size_t i = 0; i < total; ++i) send[i] = float(rank * 100 + i);
      SQZ_EXPECT_OK(sqzAlltoAll(send, recv, count, sqzFloat32, comm, nullptr), comm);
      for (int p = 0; p < nranks; ++p)
        EXPECT_EQ(recv[p * count + 2], float(p * 100 + rank * count + 2))
            << "rank " << rank << " block from rank " << p;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, P2pSplitTest, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

const auto* const kLoopback = ::testing::AddGlobalTestEnvironment(new LoopbackEnvironment);

}  // namespace
}  // namespace sqztest
