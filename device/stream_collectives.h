// StreamCollectives: the dense collectives, sends and receives on device buffers of ranks that
// share one host, run as stream programs alone (DESIGN.md, "Memory, streams, threads"): the
// caller's stream copies, waits on words, checks, reduces and writes words; no progress thread
// takes part, nothing is copied to the host, and no host thread waits for the device.
// All-reduce, broadcast, reduce, all-gather, reduce-scatter, all-to-all, and groups of sends and
// receives.
//
// Each rank owns a window on its GPU (two sets, each an input of `capacity` bytes and the result
// of the part it reduces, then the round's verdicts, then two outgoing slots a peer; exported to
// the peers with CUDA IPC, or by address to ranks that are threads of the same process) and a
// stream area in host memory every rank maps (the shared-memory window's control page,
// transports/shm/window.h), registered with CUDA so that streams wait on and write its words:
//   inbox[q]     published, reduced, consumed: the last round rank q's stream made its input
//                readable, made its part's result readable, and finished reading this rank's
//                window (written by q's stream); sent, taken: the last chunk of a message from q
//                that q's stream made readable in its slot, and the last chunk of one to q that
//                q's stream finished reading; the words that describe the message in each of
//                q's two slots to this rank (written by q's stream);
//   call[s]      the words that describe this rank's call in set s (CallCheck, device/reduce.h):
//                its number, count, datatype, op, collective and root, and for a compressed
//                call's collectives its codec method and 24 bits of its spec's hash (16 for
//                a dense all-reduce: the op byte is its op);
//   error        what this rank's checks found (device/reduce.h, kErrorWords), for the
//                collectives and for the messages apart;
//   done         the last round this rank's stream finished, and the last group of messages it
//                started and finished (for its own host side).
// Round t (numbered over every call, 32-bit, compared cyclically) uses set s = t % 2:
//   1. wait until every peer has read round t - 2 from this window (inbox[q].consumed >= t - 2),
//      then gate: the verdict = the error word as the stream finds it (gpuCheckCalls of no rank);
//   2. under the verdict, copy into set s what the peers read of this rank's input, then write
//      call[s] and each peer's inbox[me].published = t (gpuPublishWords); wait for every peer's
//      round t (inbox[q].published >= t);
//   3. check every rank's call words (gpuCheckCalls): the verdict, and the error word where one
//      differs; every reduction and copy below is gpuReduceRanks (device/reduce.h), which reads
//      the verdict and touches nothing unless all agree;
//   4. the collective's own step, reading the peers' sets:
//        all-reduce, one shot (under 512 KiB): fold every rank's set in rank order into the
//          output; two shots (from 512 KiB): fold this rank's part (its own input read in place)
//          into its set's result, write each peer's reduced = t (under the verdict), wait for
//          theirs, and copy every part's result into the output: about 4 n bytes of memory
//          traffic a rank where one shot moves (3 + ranks) n;
//        reduce: the root folds every set; broadcast: every rank copies the root's set;
//        all-gather: every rank copies every set; reduce-scatter: every rank folds its block of
//          every set; all-to-all: every rank copies its block of every set;
//   5. write each peer's inbox[me].consumed = t, and done = t.
// A small round is fewer launches with the same effects: where every copy of step 2 is at most
// kSmallRoundBytes (device/reduce.h), the gate, the copies and the words are one block
// (gpuGatedCopyPublish), and where the step's first reduction is, the check and it are one
// (gpuCheckReduceRanks); so are a small chunk's send (gate, copy, words) and receive (check,
// copy out) below.
// Every element is folded in rank order (then divided for avg), so every rank ends with the bits
// the host's direct all-reduce gives (src/core/direct_allreduce.h).
//
// A group of sends and receives is not collective: only the ranks it names take part. The
// messages between two ranks go in the order they were queued, each cut into chunks of the slot's
// size (an empty message: one empty chunk, so that its size is checked too), numbered in that
// pair's sequence (32-bit, cyclic); chunk c of a pair uses slot c % 2. A message's wave is its
// place among the group's messages to (from) the same peer; step (r, w) takes chunk r of every
// message of wave w, the sends first, so a pair has one chunk in flight a step:
//   send   wait until the peer has read chunk c - 2 of this pair (inbox[me].taken at the peer's
//          side: taken >= c - 2), gate, and under the verdict copy the chunk into the slot and
//          write the message's words and then sent = c into the peer's area;
//   receive  wait for sent >= c, check the slot's message words (its number in the pair's
//          sequence, its size, its ends) against this rank's receive (gpuCheckCalls, one rank's
//          words), copy the chunk out where they agree (gpuReduceRanks, one input), write
//          taken = c into the sender's area.
// A rank makes a step's sends before its receives, so two ranks that send to each other never
// wait for each other; a receive may overlap a send of its group only where it starts at or
// below the send's start (in place: the same buffer) and comes in the same wave or a later one,
// or chunk r would overwrite what a later step sends. Groups on any stream run in the order they
// were enqueued.
//
// The host side (a watcher thread, no CUDA) reads the error word and the peers' liveness: a
// disagreement, or a peer that failed, died or stayed away past timeoutMs while this rank's
// stream waits for it, fails the communicator with the reason; a failed or aborted communicator
// releases the stream (release(): the error word is set, then every word it waits on is moved
// past its rounds), so no stream waits for ever. A released stream reads no peer's window (the
// check's verdict) and writes nothing a peer reads (the gate's): no copy into its window, no
// published, reduced or sent word, since its waits no longer say that the peers are through
// with what it would overwrite. A peer left waiting for it sees it failed and fails in turn; a
// peer never takes another round's bytes for this one's. A stream that is only slow (busy with
// the caller's own work) is not an error.
//
// Thread safety: enqueue may be called from any thread (calls are numbered in enqueue order, which
// every rank must keep, as with NCCL); release from any thread, any number of times.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/types.h"
#include "device/hd.h"

namespace squeeze::device {

// Bytes of a rank's stream area (zeroed when the communicator is made).
constexpr size_t kStreamAreaBytes = 2048;
// What a rank tells its peers about its window (exportWindow), fixed-size.
constexpr size_t kWindowExportBytes = 128;
using WindowExport = std::array<uint8_t, kWindowExportBytes>;

class StreamCollectives {
 public:
  // The most ranks a communicator may have for them (each round reads every rank's window).
  static constexpr int kMaxRanks = 8;
  // Whether this build and driver can run it: a CUDA build whose driver offers stream memory
  // operations. `why` says why not.
  static bool available(std::string* why);

  // Allocates this rank's window on `device` and frees what earlier ones left (set-up:
  // cudaMalloc and cudaFree may wait for the whole device). `fail` records an error on the
  // communicator (called on the watcher thread); `timeoutMs` is how long a peer may keep this
  // rank's stream waiting, and bounds the wait at destruction.
  StreamCollectives(int device, int rank, int nranks, size_t capacity, int timeoutMs,
                    std::function<void(const Error&)> fail);
  // Waits (bounded; past it, releases) until this rank's stream is through its rounds, unmaps the
  // peers' windows and says so, and leaves its own window and registrations to be freed when
  // stream collectives are next made in this process, once every peer has said the same: no call
  // here may wait for the device.
  ~StreamCollectives();
  StreamCollectives(const StreamCollectives&) = delete;
  StreamCollectives& operator=(const StreamCollectives&) = delete;

  WindowExport exportWindow() const;

  // Every rank's stream area as mapped in this process (areas[rank], kStreamAreaBytes each) and
  // whether a rank failed or its process is gone (no CUDA; any thread).
  struct Peers {
    std::vector<uint8_t*> areas;
    std::function<bool(int)> down;
    std::shared_ptr<const void> keepAlive;  // the mappings of `areas`
  };
  // Opens every peer's window (exports[rank]), registers the stream areas and starts the
  // watcher. Throws Error(kCuda) or Error(kInvalidUsage) saying why it cannot.
  void connect(const std::vector<WindowExport>& exports, Peers peers);

  // Whether `kind` runs here (the collectives above; sends and receives: enqueueSendRecv).
  static bool runs(CollKind kind);
  // Enqueues one collective on `stream` (null: the legacy default stream): req's kind, buffers
  // (device memory), count (> 0, as CollRequest counts it), datatype, op and root. `what` names
  // the call in errors. Throws Error(kCuda) when CUDA refuses an operation (the communicator is
  // then failed).
  void enqueue(GpuStream stream, const CollRequest& req, const std::string& what);

  // One sqzSend or sqzRecv of a group, on device memory.
  struct Message {
    bool send;
    int peer;  // a rank of the communicator (this one: a send to itself)
    void* buffer;
    size_t bytes;
  };
  // Enqueues a group of sends and receives on `stream` (see above). The caller has checked the
  // peers and that the sends to itself pair with the receives from itself. Throws
  // Error(kInvalidUsage) for a receive that overlaps a send of the group starting above it, and
  // Error(kCuda) when CUDA refuses an operation (the communicator is then failed).
  void enqueueSendRecv(GpuStream stream, const std::vector<Message>& messages,
                       const std::string& what);

  // Payload bytes this rank has made readable to its peers so far (its copies into its window,
  // a two-shot all-reduce's part of the result, a message's chunks), each counted once however
  // many peers read it, as DirectAllReduce counts them: the communicator's traffic at close.
  uint64_t bytesPublished() const { return bytesPublished_.load(); }

  // The communicator failed or was aborted: no reduction reads a peer's window from now on and
  // every wait of this rank's stream ends. No CUDA; idempotent.
  void release();

  // Joins the watcher (no CUDA: may run in an exit handler); a stream that then fails or waits
  // is no longer watched. Idempotent.
  void stopWatcher();

 private:
  struct Cuda;  // CUDA types stay in the .cc
  struct Program;
  // A group of messages enqueued and not yet seen through by the watcher: the chunk each peer's
  // words must reach for this rank's stream to finish it.
  struct Group {
    uint32_t number;
    std::vector<std::pair<int, uint32_t>> sentBy;   // (peer, its sent word's last chunk)
    std::vector<std::pair<int, uint32_t>> takenBy;  // (peer, its taken word's last chunk)
  };
  // The last round this rank's stream finished (its done word).
  uint32_t roundsDone() const;
  // Whether this rank's stream is through every round and group enqueued so far.
  bool through() const;
  void watch();
  // The watcher's look at the oldest group not through: a peer that failed or stayed away.
  void watchGroups(std::unique_ptr<Error>& failure, bool liveness);
  void reassertRelease();
  std::string describeDisagreement() const;
  std::string describeMessageMismatch() const;

  const int device_;
  const int rank_;
  const int nranks_;
  size_t capacity_;  // bytes a round moves, agreed at connect: the smallest of every rank's
  const int timeoutMs_;
  std::function<void(const Error&)> fail_;
  std::unique_ptr<Cuda> cuda_;
  Peers peers_;
  std::mutex mu_;  // enqueue's numbering; the watcher's sleep
  std::condition_variable cv_;
  uint64_t calls_ = 0;
  std::atomic<uint32_t> issued_{0};
  // Messages: per peer, the messages queued to and from it (numbering them in the pair's
  // sequence; under mu_) and the chunks issued to and from it (read by release on any thread).
  std::vector<uint32_t> messagesTo_, messagesFrom_;
  std::unique_ptr<std::atomic<uint32_t>[]> chunksTo_, chunksFrom_;
  std::atomic<uint32_t> groups_{0};  // groups enqueued
  std::atomic<uint64_t> bytesPublished_{0};
  std::deque<Group> pending_;        // under mu_
  std::atomic<bool> released_{false};
  bool stop_ = false;
  bool reported_ = false;  // the watcher has failed the communicator
  // The watcher's view of the oldest group not through: when this rank's stream started it or
  // last saw a peer's word move.
  uint32_t watchedGroup_ = 0;
  uint64_t groupProgress_ = 0;
  std::chrono::steady_clock::time_point groupStarted_{};
  bool groupStalled_ = false;
  std::thread watcher_;
};

}  // namespace squeeze::device
