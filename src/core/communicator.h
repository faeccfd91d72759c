// Communicator: one rank's membership in a group of ranks: its peers' connections, its
// configuration, the call sequence number and the executor. Collective entry points turn a
// CollRequest into a schedule (through the algorithm registry) and run it.
//
// Thread safety: one collective at a time (callMu_); abort() may come from any thread.
// A failed collective leaves the communicator in error: its connections are shut so peers learn
// of it at once, and later calls fail with the original cause.
// It is the CodecComm a codec handle runs its calls on (compress/codec_comm.h).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "algorithms/tuner.h"
#include "base/error.h"
#include "bootstrap/unique_id.h"
#include "core/calibrate.h"
#include "compress/codec_comm.h"
#include "core/config.h"
#include "core/direct_allreduce.h"
#include "device/stream_collectives.h"
#include "core/encode_pool.h"
#include "core/executor.h"
#include "core/peer_setup.h"
#include "device/call_queue.h"
#include "device/context.h"

namespace squeeze {

class Communicator final : public CodecComm {
 public:
  // Joins the rendezvous of `id` and connects to every peer. Collective over nranks ranks.
  static std::unique_ptr<Communicator> create(const UniqueIdData& id, int rank, int nranks,
                                              const CommConfig& config);
  ~Communicator();

  int rank() const override { return rank_; }
  int size() const override { return nranks_; }
  const CommConfig& config() const { return config_; }
  const CodecSettings& codecSettings() const override { return config_; }

  // Any collective but send/recv; req.kind says which. Host buffers: runs now. On the progress
  // thread (inside a device call, whose buffers are host copies by then): runs now as well.
  void collective(const CollRequest& req) override;
  // On host buffers, also on the progress thread (a codec handle's figures inside a device call).
  void hostCollective(const CollRequest& req) override;
  // One group's queued sends and receives, all posted at once. Host buffers: runs now.
  void sendRecv(const std::vector<P2pCall>& calls);
  // The same on device buffers (CUDA builds): enqueued on `stream` (a cudaStream_t of
  // config().device) as a stream program; returns at once. Ranks on one host without a codec:
  // the stream collectives (device/stream_collectives.h), the GPU alone; otherwise the call
  // queue's (device/call_queue.h), which copies the buffers through pinned staging for the
  // progress thread to run the call on host copies.
  void enqueueCollective(const CollRequest& req, void* stream);
  void enqueueSendRecv(const std::vector<P2pCall>& calls, void* stream);
  // A compressed device call on the caller's stream (CodecComm): the context its passes run in,
  // on one rank (no exchange), or where every rank runs the stream collectives and SQZ_ALGO
  // names no algorithm (compressed calls through the host follow it), else null; and its
  // collectives there (the all-gather of its payloads, or its dense all-reduce).
  device::Context* streamContext() override;
  // Held by whoever uses streamContext() (a compressed call's passes, a codec's settle): calls
  // may come from several threads, and the context is one.
  std::mutex& streamContextMutex() { return streamContextMu_; }
  void enqueueOnStream(const CollRequest& req, void* stream) override;
  // Any work on device buffers that makes calls on this communicator (a compressed all-reduce:
  // its codec handle's passes and its collectives): enqueued on `stream` like a collective;
  // task(copies) runs on the progress thread with host copies of `spans`, where collective()
  // runs at once.
  void enqueueTask(void* stream, const std::vector<device::DeviceSpan>& spans,
                   std::function<void(const device::HostCopies& copies)> task, std::string what);
  // Waits for every device call enqueued so far (host calls come after them: ranks number calls
  // in issue order). Not on the progress thread.
  void drainDevice();
  // Throws the error that put the communicator in error state, if any.
  void throwIfFailed() const;
  void barrier();
  // Collective over this communicator: ranks with the same color form a new communicator,
  // ordered by (key, rank); color < 0 takes part and gets nullptr.
  std::unique_ptr<Communicator> split(int color, int key, const CommConfig& config);
  // The algorithm the last collective used ("" before the first).
  const char* lastAlgorithm() const { return lastAlgorithm_.load(); }
  // A call ran on the caller's stream alone (a stream collective, a one-rank copy, a compressed
  // call the codec ran there): lastAlgorithm() says "stream".
  void ranOnStream() { lastAlgorithm_ = "stream"; }
  const Tuner& tuner() const { return *tuner_; }
  // What init-time calibration learned (probe kNone when it did not run), the transport the
  // tuner prices ("shm", "tcp" or "net") and where its rows came from (a file, or "built-in").
  const Calibration& calibration() const { return calibration_; }
  const std::string& tunerTransport() const { return tunerTransport_; }
  const std::string& tunerRows() const { return tunerRows_; }

  // Marks the communicator aborted and shuts its connections; waits for a call in flight on
  // another thread to return. Thread-safe.
  void abort();
  // Puts the communicator in error with "rank R revoked the communicator": calls in flight here
  // end with it, and device calls release their streams; peers learn it from this rank's notice
  // (failure_notice.h), which each passes on as it fails in turn. Thread-safe; the communicator
  // stays until destroyed, and is good only for shrink().
  void revoke();
  // Collective over the ranks not in `exclude` (distinct ranks of this communicator, not this
  // one, not all): they agree on who stays (core/shrink_agreement.h) and form a new
  // communicator, ranked in their order here, with its own connections, tuner and windows.
  // This one is left as it was. Refused while a call is in flight unless revoked or failed.
  std::unique_ptr<Communicator> shrink(const std::vector<int>& exclude, const CommConfig& config);
  // Collective over this communicator: with `newRanks` processes that join through `id`
  // (sqzCommInitRank with ranks size() .. size() + newRanks - 1), forms a communicator of
  // size() + newRanks ranks in which every rank here keeps its number. Every rank must pass the
  // same id and count (checked first: a difference fails them all, and changes nothing).
  std::unique_ptr<Communicator> grow(int newRanks, const UniqueIdData& id,
                                     const CommConfig& config);
  // The error that put the communicator in error state, if any. Thread-safe.
  std::optional<Error> asyncError() const;
  // Joins the progress thread (device communicators) once its running call returns; later
  // device calls fail. For a communicator still alive at exit: no thread of it runs after main.
  // Makes no CUDA call. Thread-safe, idempotent.
  void stopThreads();

 private:
  Communicator(int rank, int nranks, const CommConfig& config)
      : rank_(rank), nranks_(nranks), config_(config), hostCtx_(device::makeHostContext()) {}
  // A rooted call (broadcast, reduce) first all-reduces its root, count, datatype and op, so
  // that every rank, the root included, fails at once when they differ: a root that only sends
  // would never learn from its own traffic that nobody took its data. One small all-reduce.
  // Its messages carry the call's collective and number (base) and kRootedAgreementSpec.
  void agreeOnRootedCall(const CollRequest& req, const WireHeader& base);
  // The identity every message of call number `seq` carries (the executor adds the rest).
  WireHeader headerFor(const CollRequest& req, uint64_t seq) const;
  // Init's collective part: the rendezvous, the peers' connections, the tuner, the direct
  // all-reduce's agreement and the device barrier.
  void connect(const UniqueIdData& id, const PeerInfo& self, const TunerFile* tunerFile);
  // Runs one call on this thread in ctx (null: the host context).
  void run(const CollRequest& req, Schedule* prebuilt, device::Context* ctx = nullptr);
  void runSendRecv(const std::vector<P2pCall>& calls, device::Context* ctx);
  // Device communicators: the pinned staging and the progress thread (device/call_queue.h),
  // and on one rank the context of compressed calls on the callers' streams; group: the same on
  // every rank of this communicator (its unique id's hash).
  void setUpDevice(uint64_t group);
  // Puts the communicator in error state (the first cause stays), tells every peer why (a
  // failure notice) and shuts the connections. Thread-safe.
  void fail(const Error& e);
  // A call's failure: a closed connection becomes the cause a peer's notice gives, when one
  // arrives within kNoticeWaitMs; then fail(). Returns what the call throws.
  static constexpr int kNoticeWaitMs = 200;
  Error failCall(const Error& e);
  // The direct all-reduce, when every rank has a complete shared-memory window (one small
  // all-reduce agrees on it, so that all use it or none). Collective; leaves no trace.
  void setUpDirect();
  // The stream collectives of device buffers over `window` (device/stream_collectives.h), when
  // every rank has a GPU, the window and a driver for it (agreed like the direct all-reduce).
  // Collective; leaves no trace.
  void setUpStreamCollectives(const std::shared_ptr<ShmWindow>& window);
  // Init's own calls (the tuner's measurement, the direct agreement, the device barrier) leave
  // no trace: the first user call is call 0, and the traffic count at close is the user's.
  void forgetInitCalls();
  // One byte all-reduced on the host: a barrier, or an agreement. Collective.
  uint8_t allReduceByte(uint8_t value, RedOp op);
  // Builds tuner_ for the communicator's slowest transport ("shm", "tcp" or "net"): `configured`
  // with the efficiency rows of `file` (SQZ_TUNER_FILE) or the built-in ones, its alpha, beta and
  // gamma scaled by an init-time measurement (core/calibrate.h) when SQZ_TUNER_CALIBRATE=1.
  // Collective; every rank ends with the same model.
  void buildTuner(const char* transport, const CostModel& configured, const TunerFile* file,
                  const std::vector<PeerInfo>& peers);
  // The progress thread of device calls (throws when the communicator has no GPU).
  device::CallQueue& callQueue();

  int rank_;
  int nranks_;
  CommConfig config_;
  uint64_t commHash_ = 0;
  uint64_t seq_ = 0;
  std::vector<uint64_t> p2pSent_, p2pRecvd_;  // per peer: point-to-point messages so far
  SockAddr selfAddr_;  // where this rank listened: the interface split's new root binds
  // For shrink: every rank's listening address (listener_ stays open for it), and the secret.
  std::vector<SockAddr> listenAddrs_;
  Secret secret_{};
  bool loggedChoice_ = false;
  // Written by the thread that runs or enqueues a call (a device call's host side runs on the
  // progress thread), read by the API's caller.
  std::atomic<const char*> lastAlgorithm_{""};
  std::unique_ptr<Tuner> tuner_;
  Calibration calibration_;
  std::string tunerTransport_, tunerRows_;
  uint64_t calibrationBytes_ = 0;  // payload bytes the tuner's init-time measurement sent
  Socket listener_;
  PeerSet peers_;
  Executor executor_;
  std::unique_ptr<DirectAllReduce> direct_;  // null: no window, dense calls run schedules
  std::atomic<bool> aborted_{false};
  std::mutex callMu_;              // held for the duration of a collective
  std::mutex streamContextMu_;     // streamContextMutex()
  mutable std::mutex errorMu_;     // protects asyncError_
  std::optional<Error> asyncError_;
  std::unique_ptr<device::Context> hostCtx_;  // host calls' execution context
  std::unique_ptr<EncodePool> encodePool_;    // SQZ_ENCODE_THREADS > 1: made at the first use
  // Dense all-reduces on device buffers of ranks on one host: on the caller's stream alone.
  std::unique_ptr<device::StreamCollectives> streamColls_;
  // The context of compressed calls on the callers' streams (streamContext), made at init where
  // they can run there (one rank; the stream collectives); parked at the end
  // (device::parkCodecContext).
  std::unique_ptr<device::Context> codecContext_;
  // Device communicators (config().device >= 0), made at init: the queue of device calls. The
  // last member: it is destroyed first, while what its progress thread uses still exists.
  std::unique_ptr<device::CallQueue> callQueue_;
};

}  // namespace squeeze
