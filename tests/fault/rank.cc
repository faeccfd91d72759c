// Rank mode: the checked all-reduces a rank runs and reports to the harness (see rank.h), and
// the recover case's survivors and joining process.
#include "rank.h"

#include <poll.h>
#include <squeeze/squeeze.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "census.h"
#include "device.h"
#include "protocol.h"

namespace squeeze::fault {
namespace {

// One line to the harness; the text is flattened to one line and cut to stay one atomic write.
void emit(const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  n = std::clamp(n, 0, static_cast<int>(sizeof buf) - 2);
  for (int i = 0; i < n; ++i)
    if (buf[i] == '\n' || buf[i] == '\r') buf[i] = ' ';
  buf[n++] = '\n';
  for (int off = 0; off < n;) {
    ssize_t w = write(kEventFd, buf + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) _exit(3);  // the harness is gone: nothing left to report to
    off += static_cast<int>(w);
  }
}

// Element i of rank r's input to call c: small integers, so every sum is exact in float and the
// result differs from call to call (a stale buffer cannot pass).
float inputValue(int rank, int call, size_t i) {
  return static_cast<float>((i + 31u * static_cast<unsigned>(call)) % 97 + rank);
}

// The sum over ranks 0 .. nranks - 1 (a communicator's ranks, however many are left).
float expectedValue(int call, size_t i, int nranks = kRanks) {
  float sum = 0;
  for (int r = 0; r < nranks; ++r) sum += inputValue(r, call, i);
  return sum;
}

struct Buffers {
  std::vector<float> send = std::vector<float>(kCount);
  std::vector<float> recv = std::vector<float>(kCount);
};

// Runs call number `call` (numbering spans the rank's communicators) and reports its end.
// Returns the result; on success the data has been checked and a mismatch reported as a failure.
sqzResult_t checkedAllReduce(sqzComm_t comm, int rank, int call, Buffers& b, bool* wrong,
                             int nranks = kRanks) {
  for (size_t i = 0; i < kCount; ++i) b.send[i] = inputValue(rank, call, i);
  std::memset(b.recv.data(), 0xff, kCount * sizeof(float));  // NaN: never an expected value
  sqzResult_t rc =
      sqzAllReduce(b.send.data(), b.recv.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
  const int64_t t = nowNs();
  emit("call %d %d %" PRId64 " %s", call, static_cast<int>(rc), t,
       rc == sqzSuccess ? "" : sqzGetLastError(comm));
  *wrong = false;
  if (rc != sqzSuccess) return rc;
  for (size_t i = 0; i < kCount; ++i) {
    const float want = expectedValue(call, i, nranks);
    if (std::memcmp(&b.recv[i], &want, sizeof want) != 0) {
      emit("fail call %d: element %zu is %g, expected %g (bit-exact sum of %d ranks)", call, i,
           static_cast<double>(b.recv[i]), static_cast<double>(want), nranks);
      *wrong = true;
      break;
    }
  }
  return rc;
}

// A later call after the asynchronous error `async` of call `call`: it must fail at once (nothing
// enqueued). Returns its message, which carries the asynchronous error's.
std::string laterCallText(sqzComm_t comm, int call, sqzResult_t async, DeviceBuffers& d) {
  sqzResult_t rc = sqzAllReduce(d.send, d.recv, kCount, sqzFloat, sqzSum, comm, d.stream);
  if (rc == sqzSuccess) {
    emit("fail the call after call %d's asynchronous error (%s) was enqueued, not refused", call,
         resultName(async));
    d.sync();  // the harness bounds this wait
    return "";
  }
  return sqzGetLastError(comm);
}

// checkedAllReduce on device buffers: the call is enqueued on the stream, which must be released
// (cudaStreamSynchronize returns) failed call or not; a failed call's error is the
// communicator's asynchronous error, and its time is when the stream was released. A CUDA
// failure is reported as a failure (*wrong). Every other call is a ring exchange instead (a group
// that sends the input to the next rank and receives the previous rank's), so a kill lands in
// sends and receives on device buffers too; and of each four calls two are small (16 KiB: a
// round's kernels are one block each then, device/reduce.h's kSmallRoundBytes).
sqzResult_t checkedDeviceAllReduce(sqzComm_t comm, int rank, int call, Buffers& b, DeviceBuffers& d,
                                   bool* wrong) {
  *wrong = false;
  for (size_t i = 0; i < kCount; ++i) b.send[i] = inputValue(rank, call, i);
  std::string problem = d.upload(b.send);
  sqzResult_t rc = sqzSuccess;
  std::string text;
  const bool exchange = call % 2 == 1;
  const size_t count = call % 4 >= 2 ? 4096 : kCount;
  const int prev = (rank + kRanks - 1) % kRanks;
  if (problem.empty()) {
    if (exchange) {
      sqzGroupStart();
      sqzSend(d.send, count, sqzFloat, (rank + 1) % kRanks, comm, d.stream);
      sqzRecv(d.recv, count, sqzFloat, prev, comm, d.stream);
      rc = sqzGroupEnd();
    } else {
      rc = sqzAllReduce(d.send, d.recv, count, sqzFloat, sqzSum, comm, d.stream);
    }
    if (rc != sqzSuccess) text = sqzGetLastError(comm);  // refused: nothing was enqueued
    if (rc == sqzSuccess) problem = d.sync();
  }
  if (problem.empty()) {
    // A refused call reports the communicator's error, if it has one, as an enqueued one does.
    sqzResult_t async = sqzSuccess;
    if (sqzCommGetAsyncError(comm, &async) != sqzSuccess)
      problem = std::string("sqzCommGetAsyncError: ") + sqzGetLastError(comm);
    else if (async != sqzSuccess)
      rc = async;
  }
  const int64_t t = nowNs();
  if (!problem.empty()) {
    emit("fail call %d: %s", call, problem.c_str());
    *wrong = true;
    return sqzSuccess;
  }
  if (rc != sqzSuccess && text.empty()) text = laterCallText(comm, call, rc, d);
  emit("call %d %d %" PRId64 " %s", call, static_cast<int>(rc), t, text.c_str());
  if (rc != sqzSuccess) return rc;
  if (!(problem = d.download(b.recv)).empty()) {
    emit("fail call %d: %s", call, problem.c_str());
    *wrong = true;
    return rc;
  }
  for (size_t i = 0; i < count; ++i) {
    const float want = exchange ? inputValue(prev, call, i) : expectedValue(call, i);
    if (std::memcmp(&b.recv[i], &want, sizeof want) != 0) {
      emit("fail call %d: element %zu is %g, expected %g (%s, device)", call, i,
           static_cast<double>(b.recv[i]), static_cast<double>(want),
           exchange ? "what the previous rank sent" : "bit-exact sum of 4 ranks");
      *wrong = true;
      break;
    }
  }
  return rc;
}

bool initComm(sqzComm_t* comm, const sqzUniqueId& id, int rank, const char* which) {
  sqzConfig_t config = SQZ_CONFIG_INITIALIZER;  // transport and timeout come from SQZ_* env
  sqzResult_t rc = sqzCommInitRankConfig(comm, kRanks, id, rank, &config);
  if (rc == sqzSuccess) return true;
  emit("fail sqzCommInitRankConfig (%s communicator): %s: %s", which, resultName(rc),
       sqzGetLastError(nullptr));
  return false;
}

// kill/stop: checked all-reduces until one fails (the fault) or the bound; then leave cleanly.
// cuda: on device buffers, enqueued on a stream (checkedDeviceAllReduce).
int rankLoop(int rank, const sqzUniqueId& id, bool cuda) {
  constexpr int kMaxCalls = 2000;
  constexpr int64_t kMaxNs = 60 * kSec;
  Buffers b;
  DeviceBuffers d;  // outlives the communicator
  if (cuda) {
    if (std::string problem = d.setUp(); !problem.empty()) {
      emit("fail device buffers: %s", problem.c_str());
      return 1;
    }
  }
  sqzComm_t comm = nullptr;
  if (!initComm(&comm, id, rank, "first")) return 1;
  const int64_t t0 = nowNs();
  int status = 0;
  for (int call = 0; call < kMaxCalls && nowNs() - t0 < kMaxNs; ++call) {
    bool wrong = false;
    const sqzResult_t rc = cuda ? checkedDeviceAllReduce(comm, rank, call, b, d, &wrong)
                                : checkedAllReduce(comm, rank, call, b, &wrong);
    if (rc != sqzSuccess) break;
    if (wrong) {
      status = 1;
      break;
    }
  }
  sqzResult_t rc = sqzCommDestroy(comm);
  if (rc != sqzSuccess) {
    emit("fail sqzCommDestroy after the loop: %s: %s", resultName(rc), sqzGetLastError(nullptr));
    status = 1;
  }
  emit("done");
  return status;
}

// Waits (bounded) until the process's fds and threads are back to `before`; reports what is left.
bool censusBackTo(const Census& before, const char* when) {
  Census now = takeCensus();
  for (int64_t settleEnd = nowNs() + kSec; nowNs() < settleEnd;) {
    if (now.fds <= before.fds && now.threads <= before.threads) break;
    sleepNs(20 * kMs);
    now = takeCensus();
  }
  bool ok = true;
  if (now.fds != before.fds) {
    emit("fail %s: %d open fds, %d before the communicator: %s", when, now.fds, before.fds,
         listFds().c_str());
    ok = false;
  }
  // More threads is a leak. Fewer is not: the census before may still list the thread joined just
  // above it, which the kernel drops from /proc/self/task a moment after pthread_join returns
  // (seen once: "1 threads, 2 before the communicator").
  if (now.threads > before.threads) {
    emit("fail %s: %d threads, %d before the communicator: %s", when, now.threads, before.threads,
         listThreads().c_str());
    ok = false;
  }
  std::vector<std::string> left = shmSegmentsOf(getpid());
  if (!left.empty()) {
    std::string names;
    for (const auto& n : left) names += " /dev/shm/" + n;
    emit("fail %s: shared-memory segments of this process left:%s", when, names.c_str());
    ok = false;
  }
  if (ok)
    emit("note %s: back to %d fds (%s), %d threads, no /dev/shm/sqz-*-%d-* segment", when, now.fds,
         listFds().c_str(), now.threads, static_cast<int>(getpid()));
  return ok;
}

// Rank 0's part of the abort case: a call nobody joins, aborted from another thread.
bool abortBlockedCall(sqzComm_t comm, Buffers& b) {
  constexpr int64_t kAbortAfterNs = 300 * kMs;
  int64_t abortAt = 0;
  sqzResult_t abortRc = sqzSuccess;
  std::thread aborter([&] {
    sleepNs(kAbortAfterNs);
    abortAt = nowNs();
    abortRc = sqzCommAbort(comm);
  });
  const int64_t start = nowNs();
  sqzResult_t rc =
      sqzAllReduce(b.send.data(), b.recv.data(), kCount, sqzFloat, sqzSum, comm, nullptr);
  const int64_t returnedAt = nowNs();
  // comm may be freed by now: the error text comes from this thread's record.
  std::string text = rc == sqzSuccess ? "" : sqzGetLastError(nullptr);
  aborter.join();
  emit("abort %" PRId64 " %d %s", returnedAt - abortAt, static_cast<int>(rc), text.c_str());
  bool ok = true;
  if (rc == sqzSuccess) {
    emit("fail the all-reduce nobody joined returned Success");
    ok = false;
  } else if (returnedAt < abortAt) {
    emit(
        "fail the all-reduce nobody joined returned %s %.0f ms after it started, before the "
        "abort: %s",
        resultName(rc), (returnedAt - start) / 1e6, text.c_str());
    ok = false;
  }
  if (abortRc != sqzSuccess) {
    emit("fail sqzCommAbort returned %s: %s", resultName(abortRc), sqzGetLastError(nullptr));
    ok = false;
  }
  return ok;
}

bool waitForGo() {
  pollfd p{kGoFd, POLLIN, 0};
  int n = poll(&p, 1, 60000);
  char c = 0;
  if (n == 1 && read(kGoFd, &c, 1) == 1) return true;
  emit("fail no go-ahead from the harness within 60 s");
  return false;
}

int rankAbort(int rank, const sqzUniqueId& first, const sqzUniqueId& second) {
  Buffers b;
  // A first thread makes the runtime start its own lazily created helpers (ThreadSanitizer's
  // background thread), which would otherwise be counted as a thread Squeeze left behind.
  std::thread([] {}).join();
  const Census before = takeCensus();
  bool ok = true;
  sqzComm_t comm = nullptr;
  if (!initComm(&comm, first, rank, "first")) return 1;
  bool wrong = false;
  if (checkedAllReduce(comm, rank, 0, b, &wrong) != sqzSuccess || wrong) return 1;
  if (rank == 0) {
    ok &= abortBlockedCall(comm, b);
    ok &= censusBackTo(before, "after sqzCommAbort");
    emit("stage aborted");
  } else {
    emit("stage waiting");
    if (!waitForGo()) return 1;
    sqzResult_t rc = sqzCommDestroy(comm);
    if (rc != sqzSuccess) {
      emit("fail sqzCommDestroy of the first communicator after rank 0 aborted: %s: %s",
           resultName(rc), sqzGetLastError(nullptr));
      ok = false;
    }
  }
  comm = nullptr;
  if (!initComm(&comm, second, rank, "second")) return 1;
  if (checkedAllReduce(comm, rank, 1, b, &wrong) != sqzSuccess || wrong) ok = false;
  sqzResult_t rc = sqzCommDestroy(comm);
  if (rc != sqzSuccess) {
    emit("fail sqzCommDestroy of the second communicator: %s", resultName(rc));
    ok = false;
  }
  ok &= censusBackTo(before, "after the second communicator");
  emit("done");
  return ok ? 0 : 1;
}

// ---- recover and join: a lost rank, then revoke, shrink and grow ---------------------------

constexpr int kAfterCalls = 50;  // on the shrunk communicator, and again on the grown one
constexpr int kShrunkCallBase = 1000, kGrownCallBase = 2000;

// FNV-1a of a result: the survivors' compressed results must agree bit for bit.
uint64_t resultHash(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// A compressed all-reduce of 0.001 x call `call`'s input; returns its result (or fails).
sqzResult_t compressedAllReduce(sqzComm_t comm, sqzCodec_t codec, int rank, int call, Buffers& b) {
  for (size_t i = 0; i < kCount; ++i) b.send[i] = 0.001f * inputValue(rank, call, i);
  return sqzAllReduceCompressed(b.send.data(), b.recv.data(), kCount, sqzFloat, sqzSum, codec,
                                comm, nullptr);
}

// The victim's rank, from the harness's go-ahead byte ('0' + rank).
int readVictim() {
  pollfd p{kGoFd, POLLIN, 0};
  char c = 0;
  if (poll(&p, 1, 60000) == 1 && read(kGoFd, &c, 1) == 1 && c >= '0' && c < '0' + kRanks)
    return c - '0';
  emit("fail no victim from the harness within 60 s");
  return -1;
}

// kAfterCalls checked dense all-reduces numbered from `base` on comm (nranks ranks).
bool checkedCalls(sqzComm_t comm, int rank, int nranks, int base, Buffers& b) {
  for (int k = 0; k < kAfterCalls; ++k) {
    bool wrong = false;
    if (checkedAllReduce(comm, rank, base + k, b, &wrong, nranks) != sqzSuccess || wrong)
      return false;
  }
  return true;
}

// A survivor: loops dense, top-k and int8 all-reduces (error feedback on) until the lost rank
// makes one fail, learns from the harness which rank it was, revokes and shrinks. Then, unless
// `second` (another rank is killed during the shrink: only the outcome is reported), makes
// kAfterCalls calls of each kind with the same codecs, grows back with `growId` and makes
// kAfterCalls dense calls on 4 ranks.
int rankRecover(int rank, const sqzUniqueId& id, const sqzUniqueId& growId, bool second) {
  Buffers b;
  sqzComm_t comm = nullptr;
  if (!initComm(&comm, id, rank, "first")) return 1;
  sqzCodec_t codecs[2] = {};
  const char* specs[2] = {"topk:ratio=0.01,auto_dense=0", "int8:auto_dense=0"};
  for (int k = 0; k < 2; ++k)
    if (sqzCodecCreate(&codecs[k], specs[k], kCount, sqzFloat, comm) != sqzSuccess) {
      emit("fail sqzCodecCreate %s: %s", specs[k], sqzGetLastError(comm));
      return 1;
    }
  const int64_t t0 = nowNs();
  bool lost = false;
  for (int call = 0; call < 2000 && nowNs() - t0 < 60 * kSec && !lost; ++call) {
    bool wrong = false;
    sqzResult_t rc = checkedAllReduce(comm, rank, call, b, &wrong);
    if (wrong) return 1;
    for (int k = 0; rc == sqzSuccess && k < 2; ++k) {
      rc = compressedAllReduce(comm, codecs[k], rank, call, b);
      if (rc != sqzSuccess)  // the harness times the first failed call, whichever kind
        emit("call %d %d %" PRId64 " %s", call, static_cast<int>(rc), nowNs(),
             sqzGetLastError(comm));
    }
    lost = rc != sqzSuccess;
  }
  if (!lost) {
    emit("fail no call failed within 60 s");
    return 1;
  }
  const int victim = readVictim();
  if (victim < 0) return 1;
  const int64_t revokeAt = nowNs();
  sqzResult_t rc = sqzCommRevoke(comm);
  if (rc != sqzSuccess) {
    emit("fail sqzCommRevoke: %s: %s", resultName(rc), sqzGetLastError(comm));
    return 1;
  }
  sqzComm_t small = nullptr;
  rc = sqzCommShrink(comm, &victim, 1, &small, nullptr);
  const int64_t shrunkAt = nowNs();
  if (rc != sqzSuccess) {
    emit("shrinkfail %d %s", static_cast<int>(rc), sqzGetLastError(comm));
    sqzCommDestroy(comm);
    emit("done");
    return 0;
  }
  sqzCommDestroy(comm);
  comm = small;
  int newRank = -1, size = 0;
  sqzCommUserRank(comm, &newRank);
  sqzCommCount(comm, &size);
  emit("stage shrunk %d %d %" PRId64 " %" PRId64, size, newRank, revokeAt, shrunkAt);
  if (second) {
    sqzCommDestroy(comm);
    for (sqzCodec_t c : codecs) sqzCodecDestroy(c);
    emit("done");
    return 0;
  }
  for (int k = 0; k < kAfterCalls; ++k) {
    bool wrong = false;
    const int call = kShrunkCallBase + k;
    if (checkedAllReduce(comm, newRank, call, b, &wrong, size) != sqzSuccess || wrong) return 1;
    for (int c = 0; c < 2; ++c) {
      if ((rc = compressedAllReduce(comm, codecs[c], newRank, call, b)) != sqzSuccess) {
        emit("fail %s call %d after the shrink: %s: %s", specs[c], call, resultName(rc),
             sqzGetLastError(comm));
        return 1;
      }
      emit("hash %d %d %016" PRIx64, call, c, resultHash(b.recv));
    }
  }
  emit("stage grow");
  sqzComm_t big = nullptr;
  if ((rc = sqzCommGrow(comm, 1, &growId, &big, nullptr)) != sqzSuccess) {
    emit("fail sqzCommGrow: %s: %s", resultName(rc), sqzGetLastError(comm));
    return 1;
  }
  sqzCommDestroy(comm);
  comm = big;
  if (!checkedCalls(comm, newRank, size + 1, kGrownCallBase, b)) return 1;
  for (sqzCodec_t c : codecs) sqzCodecDestroy(c);
  sqzCommDestroy(comm);
  emit("done");
  return 0;
}

// The process that replaces the lost rank: joins the survivors' grow as rank kRanks - 1.
int rankJoin(const sqzUniqueId& growId) {
  Buffers b;
  sqzComm_t comm = nullptr;
  if (!initComm(&comm, growId, kRanks - 1, "grown")) return 1;
  if (!checkedCalls(comm, kRanks - 1, kRanks, kGrownCallBase, b)) return 1;
  sqzCommDestroy(comm);
  emit("done");
  return 0;
}

}  // namespace

int rankMain(int argc, char** argv) {
  // argv: rank loop R ID [cuda] | rank abort R ID ID2 | rank recover R ID GROWID [second] |
  // rank join R GROWID
  sqzUniqueId first{}, second{};
  if (argc >= 6 && std::strcmp(argv[2], "recover") == 0 && hexDecode(argv[4], &first) &&
      hexDecode(argv[5], &second))
    return rankRecover(std::atoi(argv[3]), first, second,
                       argc == 7 && std::strcmp(argv[6], "second") == 0);
  if (argc == 5 && std::strcmp(argv[2], "join") == 0 && hexDecode(argv[4], &first))
    return rankJoin(first);
  const bool abortMode = argc == 6 && std::strcmp(argv[2], "abort") == 0;
  const bool cuda = argc == 6 && std::strcmp(argv[5], "cuda") == 0;
  const bool loopMode = (argc == 5 || cuda) && std::strcmp(argv[2], "loop") == 0;
  const int rank = argc > 3 ? std::atoi(argv[3]) : -1;
  if ((!abortMode && !loopMode) || rank < 0 || rank >= kRanks || !hexDecode(argv[4], &first) ||
      (abortMode && !hexDecode(argv[5], &second))) {
    std::fprintf(stderr,
                 "sqz-fault-harness: 'rank' mode is started by the harness itself "
                 "(rank loop R HEXID [cuda] | rank abort R HEXID HEXID); run a case instead, "
                 "e.g. 'kill tcp 20'\n");
    return 2;
  }
  return abortMode ? rankAbort(rank, first, second) : rankLoop(rank, first, cuda);
}

}  // namespace squeeze::fault
