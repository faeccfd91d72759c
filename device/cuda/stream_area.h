// The stream area's and window's layout and the stream-program helpers that the stream
// collectives (stream_collectives.cc) and their sends and receives (stream_sendrecv.cc) share;
// internal to device/cuda (see device/stream_collectives.h for what the words mean).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/strings.h"
#include "device/cuda/runtime.h"
#include "device/reduce.h"
#include "device/stream_collectives.h"

namespace squeeze::device {
namespace stream_area {

using cuda::reached;

// The stream area's layout (offsets in bytes; every word 32-bit, each on its own cache line).
constexpr size_t kPageBytes = 4096;
inline size_t publishedOff(int q) { return size_t(q) * 192; }
inline size_t consumedOff(int q) { return size_t(q) * 192 + 64; }
inline size_t reducedOff(int q) { return size_t(q) * 192 + 128; }
// Messages from and to q, in q's lines (written by q's stream too).
inline size_t sentOff(int q) { return size_t(q) * 192 + 4; }
inline size_t messageOff(int q, int slot) { return size_t(q) * 192 + 8 + size_t(slot) * 16; }
inline size_t takenOff(int q) { return size_t(q) * 192 + 64 + 4; }
inline size_t callOff(int set) { return 1536 + size_t(set) * 64; }
constexpr size_t kErrorOff = 1664;
constexpr size_t kDoneOff = 1728;
constexpr size_t kDetachedOff = 1792;  // written by the owner's host: it maps no peer window now
constexpr size_t kGroupStartedOff = 1856;
constexpr size_t kGroupDoneOff = 1860;
constexpr size_t kMessageErrorOff = 1920;
static_assert(kMessageErrorOff + 4 * kErrorWords <= kStreamAreaBytes);
static_assert(kCallWords * 4 * 2 + 8 <= 64, "a peer's message words share its first line");
static_assert(kMaxReduceRanks * 192 <= 1536);
static_assert(StreamCollectives::kMaxRanks <= kMaxReduceRanks);

// A window set: the input (capacity bytes), then the result of the part this rank reduces
// (parts are whole multiples of 64 elements, so at most capacity / ranks + 512 bytes). After the
// two sets, the verdict of this rank's current round (device/reduce.h).
inline size_t setBytes(size_t capacity, int nranks) {
  return capacity + (capacity / size_t(nranks) + 512 + 255) / 256 * 256;
}
// A slot: one chunk of a message to one peer (two a peer, after the verdicts).
inline size_t slotBytes(size_t capacity, int nranks) {
  return std::max<size_t>(256, capacity / size_t(nranks) / 256 * 256);
}
inline size_t verdictsOff(size_t capacity, int nranks) { return 2 * setBytes(capacity, nranks); }
inline size_t slotOff(size_t capacity, int nranks, int to, int slot) {
  return verdictsOff(capacity, nranks) + 256 +
         (size_t(to) * 2 + size_t(slot)) * slotBytes(capacity, nranks);
}
inline size_t windowBytes(size_t capacity, int nranks) {
  return slotOff(capacity, nranks, nranks, 0);
}

// The words that describe a message (CallCheck's four): its number in the pair's sequence, its
// size and its ends.
inline std::array<uint32_t, kCallWords> messageWords(uint32_t number, size_t bytes, int from,
                                                     int to) {
  return {number, static_cast<uint32_t>(bytes), static_cast<uint32_t>(uint64_t(bytes) >> 32),
          uint32_t(from) | uint32_t(to) << 8 | 0x50u << 24};
}

// A word of a stream area, as the host reads and writes it.
inline volatile uint32_t* areaWord(const uint8_t* area, size_t off) {
  return reinterpret_cast<volatile uint32_t*>(const_cast<uint8_t*>(area) + off);
}
inline uint32_t loadWord(const uint8_t* area, size_t off) {
  return __atomic_load_n(areaWord(area, off), __ATOMIC_ACQUIRE);
}
inline void storeWord(const uint8_t* area, size_t off, uint32_t v) {
  __atomic_store_n(areaWord(area, off), v, __ATOMIC_RELEASE);
}

}  // namespace stream_area

struct StreamCollectives::Cuda {
  void* window = nullptr;                  // this rank's two sets
  std::vector<const char*> windows;        // every rank's, in this address space
  std::vector<bool> opened;                // a peer window mapped with cudaIpcOpenMemHandle
  std::vector<void*> registered;           // pages this rank registered (areas)
  std::vector<uint64_t> areaDevice;        // every area's device address
  bool connected = false;
};

// The operations a stream program is written with, on the caller's stream; each raises kCuda
// naming the call where the driver refuses it.
struct StreamCollectives::Program {
  GpuStream stream;
  const std::string& what;
  const Cuda& c;
  const Peers& peers;

  // Word `off` of rank owner's stream area.
  cuda::StreamWord word(int owner, size_t off) const {
    return cuda::StreamWord{stream_area::areaWord(peers.areas[owner], off),
                            c.areaDevice[owner] + off};
  }
  void waitFor(const cuda::StreamWord& w, uint32_t value) const {
    if (!cuda::streamWaitWord(stream, w, value))
      raise(ErrorCode::kCuda, what, ": the driver refused cuStreamWaitValue32");
  }
  void write(const cuda::StreamWord& w, uint32_t value) const {
    if (!cuda::streamWriteWord(stream, w, value))
      raise(ErrorCode::kCuda, what, ": the driver refused cuStreamWriteValue32");
  }
  // *verdict = the error word at `errorOff` of this rank's area as the stream reaches it: what
  // this round writes that its peers read (copies into the window, published words) is made
  // under it, so a released stream, whose waits were moved past, writes none of it.
  void gate(int me, size_t errorOff, uint32_t* verdict) const {
    CallCheck gate{};
    gate.nranks = 0;
    gate.error = reinterpret_cast<volatile uint32_t*>(c.areaDevice[me] + errorOff);
    gpuCheckCalls(gate, verdict, stream);
  }
  // dst = src (bytes, device memory) where *verdict == 0.
  void copy(void* dst, const void* src, size_t bytes, const uint32_t* verdict) const {
    if (bytes == 0 || dst == src) return;
    RankInputs in{};
    in.in[0] = src;
    in.nranks = 1;
    in.verdict = verdict;
    gpuReduceRanks(DataType::kUint8, RedOp::kSum, dst, in, bytes, 1, stream);
  }
  // The words that store words[i] = values[i] (each (owner, offset) in a stream area) where
  // *verdict == 0, the last `signals` of them after the others.
  PublishWords words(const std::vector<std::pair<int, size_t>>& at,
                     const std::vector<uint32_t>& values, int signals,
                     const uint32_t* verdict) const {
    PublishWords w{};
    w.verdict = verdict;
    w.signals = signals;
    for (size_t i = 0; i < at.size(); ++i) {
      w.word[w.count] =
          reinterpret_cast<volatile uint32_t*>(c.areaDevice[at[i].first] + at[i].second);
      w.value[w.count++] = values[i];
    }
    return w;
  }
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  // What a round writes that its peers read: the gate, the copies (dst = src, device memory),
  // then the words. One launch where every copy is small (gpuGatedCopyPublish), else the gate,
  // a copy each and the publish.
  void gateCopyPublish(int me, size_t errorOff, uint32_t* verdict,
                       const std::vector<Copy>& copies, const PublishWords& w) const {
    RoundCopies round{};
    bool small = true;
    for (const Copy& k : copies) {
      if (k.bytes == 0 || k.dst == k.src) continue;
      small = small && round.count < kMaxRoundCopies && k.bytes <= kSmallRoundBytes;
      if (!small) break;
      round.dst[round.count] = k.dst;
      round.src[round.count] = k.src;
      round.bytes[round.count++] = k.bytes;
    }
    if (small) {
      gpuGatedCopyPublish(reinterpret_cast<volatile uint32_t*>(c.areaDevice[me] + errorOff),
                          verdict, round, w, stream);
      return;
    }
    gate(me, errorOff, verdict);
    for (const Copy& k : copies) copy(k.dst, k.src, k.bytes, verdict);
    if (w.count > 0) gpuPublishWords(w, stream);
  }
  // A round's check, then its first fold (r.verdict is `verdict`; n == 0: the check alone): one
  // launch where the fold is small (gpuCheckReduceRanks).
  void checkFold(const CallCheck& check, uint32_t* verdict, DataType dtype, RedOp op, void* out,
                 const RankInputs& r, size_t n, int divisor) const {
    if (n * dataTypeSize(dtype) <= kSmallRoundBytes) {
      gpuCheckReduceRanks(check, verdict, dtype, op, out, r, n, divisor, stream);
      return;
    }
    gpuCheckCalls(check, verdict, stream);
    gpuReduceRanks(dtype, op, out, r, n, divisor, stream);
  }
  // Rank owner's window in this address space, at `off`.
  char* window(int owner, size_t off) const { return const_cast<char*>(c.windows[owner]) + off; }
};

}  // namespace squeeze::device
