// StreamCollectives' groups of sends and receives (see device/stream_collectives.h): the stream
// program of a group, and the watcher's look at the groups its stream has not finished. The
// collectives, the window and the watcher's loop are stream_collectives.cc.
#include <algorithm>
#include <chrono>
#include <vector>

#include "base/logging.h"
#include "base/strings.h"
#include "device/cuda/stream_area.h"

namespace squeeze::device {

using namespace stream_area;
using Clock = std::chrono::steady_clock;

void StreamCollectives::enqueueSendRecv(GpuStream stream, const std::vector<Message>& messages,
                                        const std::string& what) {
  SQZ_ENFORCE(cuda_->connected, "stream collectives: ", what, " before connect");
  const int me = rank_;
  // A receive that starts above a send it overlaps would overwrite, in round r, bytes the send
  // reads in a later round.
  // A message's wave: its place among the group's messages to (from) the same peer. Step (r, w)
  // takes chunk r of every message of wave w, sends first, so that a pair has at most one chunk
  // in flight a step and its two slots never run out, however many messages it carries.
  std::vector<size_t> wave(messages.size());
  size_t waves = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      wave[i] += messages[j].send == messages[i].send && messages[j].peer == messages[i].peer;
    waves = std::max(waves, wave[i] + 1);
  }
  // A receive writes chunk r at step (r, its wave), a send reads chunk r at step (r, its wave):
  // where they overlap, the receive must start at or below the send and not come in an earlier
  // wave, or it would overwrite what the send reads later.
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& r = messages[i];
    if (r.send || r.bytes == 0) continue;
    const char* r0 = static_cast<const char*>(r.buffer);
    for (size_t j = 0; j < messages.size(); ++j) {
      const Message& m = messages[j];
      const char* s0 = static_cast<const char*>(m.buffer);
      if (!m.send || m.bytes == 0 || r0 >= s0 + m.bytes || s0 >= r0 + r.bytes) continue;
      if (s0 < r0)
        raise(ErrorCode::kInvalidUsage, "rank ", me, ": ", what, ": the receive of ", r.bytes,
              " bytes from rank ", r.peer, " overlaps the send to rank ", m.peer, " that starts ",
              r0 - s0, " bytes below it. On device buffers a receive may overlap a send of its "
              "group only from the send's start on (in place: the same buffer); receive into "
              "another buffer.");
      if (wave[i] < wave[j])
        raise(ErrorCode::kInvalidUsage, "rank ", me, ": ", what, ": the receive of ", r.bytes,
              " bytes from rank ", r.peer, " overlaps the send to rank ", m.peer, ", and it is "
              "message ", wave[i] + 1, " from its peer where the send is message ", wave[j] + 1,
              " to its peer: on device buffers it would overwrite what that send has not read. "
              "Queue that send among the first to its peer, or receive into another buffer.");
    }
  }
  const Cuda& c = *cuda_;
  const Program p{stream, what, c, peers_};
  const size_t slot = slotBytes(capacity_, nranks_);
  uint32_t* verdict =
      reinterpret_cast<uint32_t*>(p.window(me, verdictsOff(capacity_, nranks_) + 128));
  std::unique_ptr<Error> failed;
  {
    cuda::DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(mu_);
    if (released_) raise(ErrorCode::kRemote, what, ": the communicator was aborted or failed");
    struct Planned {
      const Message* m;
      uint32_t number;  // in the pair's sequence
      size_t chunks;
      size_t wave;
    };
    std::vector<Planned> plan;
    size_t rounds = 0;
    for (size_t i = 0; i < messages.size(); ++i) {
      const Message& m = messages[i];
      const uint32_t number = ++(m.send ? messagesTo_ : messagesFrom_)[m.peer];
      // An empty message is one empty chunk: its words are checked like any other's.
      plan.push_back({&m, number, std::max<size_t>(1, (m.bytes + slot - 1) / slot), wave[i]});
      rounds = std::max(rounds, plan.back().chunks);
    }
    const uint32_t group = groups_.load() + 1;
    try {
      // The groups before, on any stream, are through (a pair's chunks are numbered in order).
      p.waitFor(p.word(me, kGroupDoneOff), group - 1);
      p.write(p.word(me, kGroupStartedOff), group);
      // Chunk r of message m, n bytes of it.
      auto sendChunk = [&](const Planned& m, size_t r, size_t n) {
        const int q = m.m->peer;
        const uint32_t chunk = chunksTo_[q].load() + 1;
        const int s = static_cast<int>(chunk & 1);
        p.waitFor(p.word(me, takenOff(q)), chunk - 2);  // q has read the slot's last one
        const auto words = messageWords(m.number, m.m->bytes, me, q);
        std::vector<std::pair<int, size_t>> at;
        for (int w = 0; w < kCallWords; ++w) at.push_back({q, messageOff(me, s) + 4 * w});
        at.push_back({q, sentOff(me)});
        p.gateCopyPublish(me, kMessageErrorOff, verdict,
                          {{p.window(me, slotOff(capacity_, nranks_, q, s)),
                            static_cast<const char*>(m.m->buffer) + r * slot, n}},
                          p.words(at, {words[0], words[1], words[2], words[3], chunk}, 1, verdict));
        chunksTo_[q].store(chunk);
        if (q != me) bytesPublished_ += n;
      };
      auto receiveChunk = [&](const Planned& m, size_t r, size_t n) {
        const int q = m.m->peer;
        const uint32_t chunk = chunksFrom_[q].load() + 1;
        const int s = static_cast<int>(chunk & 1);
        p.waitFor(p.word(me, sentOff(q)), chunk);
        CallCheck check{};
        check.nranks = 1;
        check.call[0] =
            reinterpret_cast<const volatile uint32_t*>(c.areaDevice[me] + messageOff(q, s));
        const auto expect = messageWords(m.number, m.m->bytes, q, me);
        std::copy(expect.begin(), expect.end(), check.expect);
        check.error = reinterpret_cast<volatile uint32_t*>(c.areaDevice[me] + kMessageErrorOff);
        RankInputs in{};
        in.in[0] = p.window(q, slotOff(capacity_, nranks_, me, s));
        in.nranks = 1;
        in.verdict = verdict;
        p.checkFold(check, verdict, DataType::kUint8, RedOp::kSum,
                    static_cast<char*>(m.m->buffer) + r * slot, in, n, 1);
        p.write(p.word(q, takenOff(me)), chunk);
        chunksFrom_[q].store(chunk);
      };
      for (size_t r = 0; r < rounds; ++r)
        for (size_t w = 0; w < waves; ++w)
          for (const bool sends : {true, false})
            for (const Planned& m : plan) {
              if (m.m->send != sends || m.wave != w || r >= m.chunks) continue;
              const size_t n = std::min(slot, m.m->bytes - r * slot);
              sends ? sendChunk(m, r, n) : receiveChunk(m, r, n);
            }
      p.write(p.word(me, kGroupDoneOff), group);
    } catch (const Error& e) {
      failed = std::make_unique<Error>(e);  // as in enqueue: the communicator fails, released
    }
    Group record{group, {}, {}};
    for (const Planned& m : plan)
      (m.m->send ? record.takenBy : record.sentBy)
          .push_back({m.m->peer, (m.m->send ? chunksTo_ : chunksFrom_)[m.m->peer].load()});
    pending_.push_back(std::move(record));
    groups_.store(group);
  }
  if (failed) {
    fail_(*failed);
    release();
    throw *failed;
  }
  cv_.notify_all();
}

std::string StreamCollectives::describeMessageMismatch() const {
  const volatile uint32_t* e = areaWord(peers_.areas[rank_], kMessageErrorOff);
  const uint32_t theirs[kCallWords] = {e[1], e[2], e[3], e[4]};
  const uint32_t mine[kCallWords] = {e[5], e[6], e[7], e[8]};
  auto bytes = [](const uint32_t* w) { return w[1] | uint64_t(w[2]) << 32; };
  const uint32_t q = mine[3] & 0xff;
  return strCat("rank ", rank_, ": a send and its receive on device buffers do not match: ",
                theirs[0] == mine[0] ? "" : strCat("rank ", q, "'s message #", theirs[0], " (",
                                                   bytes(theirs), " bytes) arrived where "),
                "this rank's receive #", mine[0], " from rank ", q, " expects ", bytes(mine),
                " bytes", theirs[0] == mine[0] ? strCat(", and rank ", q, " sent ",
                                                        bytes(theirs))
                                               : std::string(),
                ". The messages between two ranks match in the order they were queued, and a "
                "receive must have its send's size. That receive's buffer was not written; "
                "destroy the communicator.");
}

void StreamCollectives::watchGroups(std::unique_ptr<Error>& failure, bool liveness) {
  const uint8_t* mine = peers_.areas[rank_];
  const uint32_t done = loadWord(mine, kGroupDoneOff);
  while (!pending_.empty() && reached(done, pending_.front().number)) pending_.pop_front();
  if (pending_.empty() || reported_) return;
  const Group& g = pending_.front();
  // Not started: the stream is busy with what the caller gave it before (not an error).
  if (!reached(loadWord(mine, kGroupStartedOff), g.number)) return;
  std::vector<int> owing;  // peers this rank's stream still waits for
  uint64_t progress = 0;   // the peers' words: a long group that moves is not stalled
  for (auto [q, last] : g.sentBy) {
    const uint32_t w = loadWord(mine, sentOff(q));
    progress += w;
    if (!reached(w, last)) owing.push_back(q);
  }
  for (auto [q, last] : g.takenBy) {
    const uint32_t w = loadWord(mine, takenOff(q));
    progress += w;
    if (!reached(w, last - 2)) owing.push_back(q);
  }
  std::sort(owing.begin(), owing.end());
  owing.erase(std::unique(owing.begin(), owing.end()), owing.end());
  if (watchedGroup_ != g.number || groupProgress_ != progress) {
    watchedGroup_ = g.number;
    groupProgress_ = progress;
    groupStarted_ = Clock::now();
    groupStalled_ = false;
  }
  if (liveness)
    for (int q : owing)
      if (q != rank_ && peers_.down(q)) {
        failure = std::make_unique<Error>(
            ErrorCode::kRemote,
            strCat("rank ", rank_, ": rank ", q, " failed or exited while this rank's stream "
                   "waits for it in a group of sends and receives on device buffers; the "
                   "communicator is failed"));
        return;
      }
  if (groupStalled_ || Clock::now() - groupStarted_ <= std::chrono::milliseconds(timeoutMs_))
    return;
  groupStalled_ = true;
  std::string late;
  for (int q : owing) late += strCat(late.empty() ? "" : ", ", q);
  if (late.empty()) {
    SQZ_WARN(kDevice, "rank ", rank_, ": a group of sends and receives on device buffers has had "
             "every peer's part for ", timeoutMs_, " ms, and its copies have not finished");
    return;
  }
  failure = std::make_unique<Error>(
      ErrorCode::kTimeout,
      strCat("rank ", rank_, ": a group of sends and receives on device buffers waited ",
             timeoutMs_, " ms (SQZ_TIMEOUT_MS) for rank(s) ", late, " to make the matching "
             "call; the communicator is failed"));
}

}  // namespace squeeze::device
