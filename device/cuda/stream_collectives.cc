// StreamCollectives (see device/stream_collectives.h) over the CUDA runtime: compiled for the CUDA
// build and the CUDA stand-in. The window, the collectives' stream programs, release, the watcher
// and destruction; the sends and receives are stream_sendrecv.cc, the layout both use
// stream_area.h. The stream program is written on the caller's thread; the watcher thread reads
// and writes host memory only.
#include "device/stream_collectives.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <initializer_list>
#include <chrono>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>

#include "base/logging.h"
#include "base/strings.h"
#include "base/wire.h"
#include "device/cuda/launch.cuh"
#include "device/cuda/runtime.h"
#include "device/cuda/stream_area.h"
#include "device/reduce.h"

namespace squeeze::device {

using namespace stream_area;

namespace {

using Clock = std::chrono::steady_clock;

// From this many bytes a call is reduced in two shots (each rank reduces its part, then every
// rank gathers the parts): 4 n bytes of memory traffic a rank at 2 ranks and about that at 8,
// against (3 + ranks) n for reading every rank's whole input, for one more wait.
constexpr uint64_t kTwoShotBytes = 512 << 10;
bool twoShot(uint64_t count, DataType dtype) {
  return count * dataTypeSize(dtype) >= kTwoShotBytes;
}

// The call words' third and fourth. Third: the count's bits 32-47, the datatype and the op.
// Fourth: the collective and its root. A compressed call's collectives (an all-gather of
// payloads, or the dense all-reduce of a call sent dense) add the codec method and its spec's
// hash, so ranks whose codecs or settings differ must not fold each other's bytes: the hash's
// low byte in the fourth word's top byte, its next where a collective has no root (the root
// byte), and its third where it has no op (the op byte): 24 bits for an all-gather, 16 for an
// all-reduce. (Random-k's payload is only values at indices drawn from its seed: a mismatch
// would pass every other check.)
std::pair<uint32_t, uint32_t> callWords(const CollRequest& req, size_t count, DataType dtype,
                                        RedOp op, int root, bool rooted, bool reduces) {
  const uint32_t h = req.specHash;
  const bool codec = req.codecMethod != 0;
  const uint32_t opByte = codec && !reduces ? (h >> 16) & 0xff : uint32_t(op);
  const uint32_t rootByte = codec && !rooted ? (h >> 8) & 0xff : uint32_t(root);
  const uint32_t third =
      static_cast<uint32_t>((count >> 32) & 0xffff) | uint32_t(dtype) << 16 | opByte << 24;
  const uint32_t fourth = uint32_t(req.kind) | rootByte << 8 | uint32_t(req.codecMethod) << 16 |
                          (codec ? h & 0xff : 0) << 24;
  return {third, fourth};
}

// Rank q's part of a round of n elements: [first, last).
struct Part {
  size_t first, last;
};
Part partOf(int q, int nranks, size_t n) {
  const size_t per = ((n + nranks - 1) / nranks + 63) / 64 * 64;
  return {std::min(n, q * per), std::min(n, (q + 1) * per)};
}

constexpr uint64_t kExportMagic = 0x58454d52'5a515153ull;  // "SQZRMEX"

struct ExportData {
  uint64_t magic;
  uint64_t processToken;  // ranks of one process read each other's window by address
  uint64_t address;
  uint64_t capacity;
  int32_t device;
  int32_t rank;
  cudaIpcMemHandle_t handle;
  char busId[16];  // the GPU, as every process names it (ordinals depend on the environment)
};
static_assert(sizeof(ExportData) <= kWindowExportBytes);

uint64_t processToken() {
  static const uint64_t token = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(::getpid());
  }();
  return token;
}

std::string describeCall(const uint32_t* w) {
  const uint64_t count = w[1] | (uint64_t(w[2] & 0xffff) << 32);
  const uint32_t dtype = (w[2] >> 16) & 0xff, op = w[2] >> 24, kind = w[3] & 0xff;
  const uint32_t method = (w[3] >> 16) & 0xff, root = (w[3] >> 8) & 0xff;
  const bool rooted = kind == uint32_t(CollKind::kBroadcast) || kind == uint32_t(CollKind::kReduce);
  const bool reduces = kind == uint32_t(CollKind::kAllReduce) ||
                       kind == uint32_t(CollKind::kReduce) ||
                       kind == uint32_t(CollKind::kReduceScatter);
  const bool known =
      kind >= uint32_t(CollKind::kAllReduce) && kind <= uint32_t(CollKind::kAlltoAll);
  // A compressed call's spec hash bits, as callWords placed them (the digest's first bytes, in
  // memory order on this little-endian host).
  uint32_t hash = w[3] >> 24;
  int hashBits = 8;
  if (!rooted) {
    hash |= root << 8;
    hashBits += 8;
  }
  if (!reduces) {
    hash |= op << 16;
    hashBits += 8;
  }
  return strCat(known ? collKindName(CollKind(kind)) : "?", " #",
                w[0], " of ", count, " ",
                dtype < uint32_t(kNumDataTypes) ? dataTypeName(DataType(dtype)) : "?",
                reduces ? strCat(" (", op < uint32_t(kNumRedOps) ? redOpName(RedOp(op)) : "?",
                                 ")")
                        : std::string(),
                rooted ? strCat(", root ", root) : std::string(),
                method ? strCat(" of codec ", codecName(uint8_t(method)),
                                " (its spec's SHA-256 begins ",
                                toHex(&hash, size_t(hashBits / 8)), ")")
                       : std::string());
}

// What a destroyed StreamCollectives leaves behind until nothing can use it: cudaFree and
// cudaHostUnregister may wait for the whole device, which a destroy must not (a peer's stream in
// this process may be held), so they run when a StreamCollectives is next made (set-up time).
struct Parked {
  int device = -1;
  void* window = nullptr;
  std::vector<uint8_t*> areas;  // every rank's stream area (empty: never connected)
  int rank = 0;
  uint32_t issued = 0;
  uint32_t groups = 0;
  bool detached = false;
  std::vector<const char*> opened;  // peers' windows this rank mapped (CUDA IPC)
  std::vector<void*> registered;
  std::shared_ptr<const void> keepAlive;

  bool through() const {
    return areas.empty() || (reached(loadWord(areas[rank], kDoneOff), issued) &&
                             reached(loadWord(areas[rank], kGroupDoneOff), groups));
  }
  // This rank's stream is through: it unmaps the peers' windows and tells them.
  bool detach() {
    bool ok = true;
    for (const char* w : opened)
      ok &= cudaIpcCloseMemHandle(const_cast<char*>(w)) == cudaSuccess;
    opened.clear();
    if (!areas.empty())
      storeWord(areas[rank], kDetachedOff, 1);
    detached = true;
    return ok;
  }
  // No peer's stream reads the window any more, and none maps it.
  bool peersDetached() const {
    for (size_t q = 0; q < areas.size(); ++q)
      if (int(q) != rank && loadWord(areas[q], kDetachedOff) == 0) return false;
    return true;
  }
};

std::mutex& graveyardMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<std::unique_ptr<Parked>>& graveyard() {
  static auto* parked = new std::vector<std::unique_ptr<Parked>>;  // never destroyed: exit runs
  return *parked;                                                  // no CUDA call
}

// Frees what destroyed StreamCollectives left once nothing uses it. Set-up time only.
void collectParked() {
  std::lock_guard<std::mutex> lock(graveyardMutex());
  auto& all = graveyard();
  for (auto it = all.begin(); it != all.end();) {
    Parked& p = **it;
    if (!p.detached && p.through()) (void)p.detach();
    if (!p.detached || !p.peersDetached()) {
      ++it;
      continue;
    }
    cuda::DeviceGuard guard(p.device);
    for (void* page : p.registered) (void)cudaHostUnregister(page);
    if (p.window) (void)cudaFree(p.window);
    it = all.erase(it);  // and the mappings with it
  }
}

}  // namespace

bool StreamCollectives::available(std::string* why) {
  if (cuda::streamWordsAvailable()) return true;
  if (why) *why = "the driver offers no stream memory operations (cuStreamWaitValue32)";
  return false;
}

StreamCollectives::StreamCollectives(int device, int rank, int nranks, size_t capacity,
                                     int timeoutMs, std::function<void(const Error&)> fail)
    : device_(device),
      rank_(rank),
      nranks_(nranks),
      capacity_(std::max<size_t>(capacity / 256 * 256, 256)),
      timeoutMs_(timeoutMs),
      fail_(std::move(fail)),
      cuda_(std::make_unique<Cuda>()),
      messagesTo_(nranks, 0),
      messagesFrom_(nranks, 0),
      chunksTo_(std::make_unique<std::atomic<uint32_t>[]>(nranks)),
      chunksFrom_(std::make_unique<std::atomic<uint32_t>[]>(nranks)) {
  SQZ_ENFORCE(nranks >= 2 && nranks <= kMaxRanks, "stream collectives over ", nranks,
              " ranks");
  cuda::DeviceGuard guard(device_);
  // Its reduction's first launch must not load the kernel while a stream waits on a peer.
  loadKernelModules();
  collectParked();
  cuda::check(cudaMalloc(&cuda_->window, windowBytes(capacity_, nranks_)),
              strCat("cudaMalloc of the stream collectives' window (",
                     windowBytes(capacity_, nranks_), " bytes, SQZ_DEVICE_DIRECT_BYTES)").c_str());
}


WindowExport StreamCollectives::exportWindow() const {
  ExportData d{};
  d.magic = kExportMagic;
  d.processToken = processToken();
  d.address = reinterpret_cast<uint64_t>(cuda_->window);
  d.capacity = capacity_;
  d.device = device_;
  d.rank = rank_;
  cuda::DeviceGuard guard(device_);
  cuda::check(cudaDeviceGetPCIBusId(d.busId, sizeof d.busId, device_), "cudaDeviceGetPCIBusId");
  cuda::check(cudaIpcGetMemHandle(&d.handle, cuda_->window),
              "cudaIpcGetMemHandle of the stream collectives' window");
  WindowExport out{};
  std::memcpy(out.data(), &d, sizeof d);
  return out;
}

void StreamCollectives::connect(const std::vector<WindowExport>& exports, Peers peers) {
  SQZ_ENFORCE(exports.size() == size_t(nranks_) && peers.areas.size() == size_t(nranks_),
              "stream collectives: ", exports.size(), " exports for ", nranks_, " ranks");
  cuda::DeviceGuard guard(device_);
  Cuda& c = *cuda_;
  peers_ = std::move(peers);  // kept whatever happens: registered pages must stay mapped
  c.windows.assign(nranks_, nullptr);
  c.opened.assign(nranks_, false);
  size_t capacity = capacity_;
  for (int q = 0; q < nranks_; ++q) {
    ExportData d;
    std::memcpy(&d, exports[q].data(), sizeof d);
    if (d.magic != kExportMagic || d.rank != q || d.capacity < 256)
      raise(ErrorCode::kRemote, "rank ", rank_, ": rank ", q, "'s stream collectives' window "
            "description is not one (a rank of another build?)");
    capacity = std::min<size_t>(capacity, d.capacity);
    if (q == rank_) {
      c.windows[q] = static_cast<const char*>(c.window);
      continue;
    }
    // The reduction reads every peer's window: its GPU must be this one or one this GPU reads.
    d.busId[sizeof d.busId - 1] = '\0';
    int peerDevice = -1;
    if (cudaDeviceGetByPCIBusId(&peerDevice, d.busId) != cudaSuccess) {
      (void)cudaGetLastError();
      raise(ErrorCode::kInvalidUsage, "rank ", rank_, ": rank ", q, "'s GPU (", d.busId,
            ") is not visible to this process");
    }
    if (peerDevice != device_) {
      int can = 0;
      cuda::check(cudaDeviceCanAccessPeer(&can, device_, peerDevice), "cudaDeviceCanAccessPeer");
      if (!can)
        raise(ErrorCode::kInvalidUsage, "rank ", rank_, ": GPU ", device_, " cannot read GPU ",
              peerDevice, " (rank ", q, "'s) directly");
      const cudaError_t rc = cudaDeviceEnablePeerAccess(peerDevice, 0);
      if (rc == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        cuda::check(rc, "cudaDeviceEnablePeerAccess");
    }
    if (d.processToken == processToken()) {
      // A thread of this process: its window by address (legacy IPC cannot open its own).
      c.windows[q] = reinterpret_cast<const char*>(d.address);
    } else {
      void* p = nullptr;
      cuda::check(cudaIpcOpenMemHandle(&p, d.handle, cudaIpcMemLazyEnablePeerAccess),
                  strCat("cudaIpcOpenMemHandle of rank ", q, "'s stream collectives' window")
                      .c_str());
      c.windows[q] = static_cast<const char*>(p);
      c.opened[q] = true;
    }
  }
  // The smallest capacity of all: every rank splits a call into the same rounds.
  capacity_ = capacity;
  c.areaDevice.assign(nranks_, 0);
  for (int q = 0; q < nranks_; ++q) {
    uint8_t* area = peers_.areas[q];
    auto* page = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(area) & ~(kPageBytes - 1));
    SQZ_ENFORCE(area + kStreamAreaBytes <= page + kPageBytes, "a stream area crosses a page");
    // Each mapping is this object's own, so nothing else has registered it.
    cuda::check(
        cudaHostRegister(page, kPageBytes, cudaHostRegisterPortable | cudaHostRegisterMapped),
        "cudaHostRegister of the stream collectives' words");
    c.registered.push_back(page);
    c.areaDevice[q] = cuda::devicePointer(page) + (area - page);
  }
  c.connected = true;
  watcher_ = std::thread([this] { watch(); });
}

uint32_t StreamCollectives::roundsDone() const {
  if (!cuda_->connected) return issued_.load();
  return loadWord(peers_.areas[rank_], kDoneOff);
}

bool StreamCollectives::runs(CollKind kind) {
  return kind >= CollKind::kAllReduce && kind <= CollKind::kAlltoAll;
}

void StreamCollectives::enqueue(GpuStream stream, const CollRequest& req,
                                const std::string& what) {
  SQZ_ENFORCE(cuda_->connected && req.count > 0 && runs(req.kind), "stream collective: ", what);
  const CollKind kind = req.kind;
  const DataType dtype = req.dtype;
  const size_t esz = dataTypeSize(dtype), count = req.count;
  const size_t set = setBytes(capacity_, nranks_);
  const bool blocks = kind == CollKind::kReduceScatter || kind == CollKind::kAlltoAll;
  // Elements a round moves of each rank's input (of each block, for the block collectives).
  const size_t per = capacity_ / esz / (blocks ? nranks_ : 1);
  const bool rooted = kind == CollKind::kBroadcast || kind == CollKind::kReduce;
  const bool reduces =
      kind == CollKind::kAllReduce || kind == CollKind::kReduce || kind == CollKind::kReduceScatter;
  const bool two = kind == CollKind::kAllReduce && twoShot(count, dtype);
  const RedOp op = reduces ? req.op : RedOp::kSum;
  const int root = rooted ? req.root : 0, me = rank_;
  const int divisor = op == RedOp::kAvg ? nranks_ : 1;
  const char* send = static_cast<const char*>(req.sendbuf);
  char* recv = static_cast<char*>(req.recvbuf);
  const Cuda& c = *cuda_;
  const Program p{stream, what, c, peers_};
  auto word = [&](int owner, size_t off) { return p.word(owner, off); };
  auto waitFor = [&](const cuda::StreamWord& w, uint32_t value) { p.waitFor(w, value); };
  auto wait = [&](size_t (*off)(int), uint32_t value) {  // every peer's word in this rank's area
    for (int q = 0; q < nranks_; ++q)
      if (q != me) waitFor(word(me, off(q)), value);
  };
  auto write = [&](const cuda::StreamWord& w, uint32_t value) { p.write(w, value); };
  auto tell = [&](size_t (*off)(int), uint32_t value) {  // this rank's word in every peer's area
    for (int q = 0; q < nranks_; ++q)
      if (q != me) write(word(q, off(me)), value);
  };
  auto input = [&](int q, int s) { return p.window(q, s * set); };
  auto result = [&](int q, int s) { return input(q, s) + capacity_; };
  uint32_t* verdict = reinterpret_cast<uint32_t*>(p.window(me, verdictsOff(capacity_, nranks_)));
  std::vector<Program::Copy> copies;  // a round's copies into the window
  auto copy = [&](void* dst, const void* src, size_t elems) {
    copies.push_back({dst, src, elems * esz});
  };
  // This rank's call words in set s (`words` of them: 0 or kCallWords) and then its word `off`
  // in every peer's area, under the verdict.
  auto wordsOf = [&](int words, int s, const uint32_t* expect, size_t (*off)(int),
                     uint32_t value) {
    std::vector<std::pair<int, size_t>> at;
    std::vector<uint32_t> values;
    for (int w = 0; w < words; ++w) {
      at.push_back({me, callOff(s) + 4 * w});
      values.push_back(expect[w]);
    }
    for (int q = 0; q < nranks_; ++q)
      if (q != me) {
        at.push_back({q, off(me)});
        values.push_back(value);
      }
    return p.words(at, values, nranks_ - 1, verdict);
  };
  // A round's check runs with its first fold (Program::checkFold), or alone after the folds if
  // there is none.
  CallCheck check{};
  bool checked = false;
  auto reduce = [&](char* out, const RankInputs& r, size_t elems, int div) {
    if (checked) {
      gpuReduceRanks(dtype, op, out, r, elems, div, stream);
      return;
    }
    checked = true;
    p.checkFold(check, verdict, dtype, op, out, r, elems, div);
  };
  // Folds `ranks` inputs (one: a copy) into out, if the round's verdict allows.
  auto fold = [&](char* out, std::initializer_list<const char*> ins, size_t elems, int div) {
    RankInputs r{};
    r.verdict = verdict;
    for (const char* in : ins) r.in[r.nranks++] = in;
    // A copy onto itself moves nothing (the check still runs).
    reduce(out, r, ins.size() == 1 && *ins.begin() == out ? 0 : elems, div);
  };
  auto foldAll = [&](char* out, auto inputOf, size_t elems) {  // every rank's, in rank order
    RankInputs r{};
    r.verdict = verdict;
    r.nranks = nranks_;
    for (int q = 0; q < nranks_; ++q) r.in[q] = inputOf(q);
    reduce(out, r, elems, divisor);
  };
  std::unique_ptr<Error> failed;
  {
    cuda::DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(mu_);
    if (released_) raise(ErrorCode::kRemote, what, ": the communicator was aborted or failed");
    const uint64_t call = ++calls_;
    check.nranks = nranks_;
    check.expect[0] = static_cast<uint32_t>(call);
    check.expect[1] = static_cast<uint32_t>(count);
    std::tie(check.expect[2], check.expect[3]) =
        callWords(req, count, dtype, op, root, rooted, reduces);
    check.error = reinterpret_cast<volatile uint32_t*>(c.areaDevice[me] + kErrorOff);
    uint32_t t = issued_.load();
    try {
      // The calls before, on any stream, are through: rounds run in their numbers' order (the
      // verdict and done are one word each), as every rank numbers them.
      waitFor(word(me, kDoneOff), t);
      for (size_t off = 0; off < count; off += per) {
        const size_t n = std::min(per, count - off);
        const int s = static_cast<int>(++t & 1);
        const Part mine = two ? partOf(me, nranks_, n) : Part{0, 0};
        wait(consumedOff, t - 2);  // the peers are through with this set's last round
        copies.clear();
        // What the peers read of this rank's input.
        switch (kind) {
          case CollKind::kAllReduce:
            copy(input(me, s), send + off * esz, two ? mine.first : n);
            if (two) copy(input(me, s) + mine.last * esz, send + (off + mine.last) * esz,
                          n - mine.last);
            break;
          case CollKind::kBroadcast:
            if (me == root) copy(input(me, s), send + off * esz, n);
            break;
          case CollKind::kReduce:
          case CollKind::kAllGather:
            copy(input(me, s), send + off * esz, n);
            break;
          case CollKind::kReduceScatter:  // block q of each rank's input goes to rank q
            // This rank's own block too: in place, the output is that block, which the fold
            // must not read while it writes it.
            for (int q = 0; q < nranks_; ++q)
              copy(input(me, s) + q * per * esz, send + (q * count + off) * esz, n);
            break;
          default:  // all-to-all: block q of each rank's input goes to rank q
            for (int q = 0; q < nranks_; ++q)
              if (q != me) copy(input(me, s) + q * per * esz, send + (q * count + off) * esz, n);
        }
        // Under the gate: the copies, the call's words in set s (from its third round on, the
        // set already holds them), then published.
        const int callWords = off < 2 * per ? kCallWords : 0;
        p.gateCopyPublish(me, kErrorOff, verdict, copies,
                          wordsOf(callWords, s, check.expect, publishedOff, t));
        for (const Program::Copy& cp : copies) bytesPublished_ += cp.bytes;
        if (two) bytesPublished_ += (mine.last - mine.first) * esz;  // the part's result
        wait(publishedOff, t);
        for (int q = 0; q < nranks_; ++q)
          check.call[q] = reinterpret_cast<const volatile uint32_t*>(c.areaDevice[q] + callOff(s));
        checked = false;
        switch (kind) {
          case CollKind::kAllReduce:
            if (!two) {
              foldAll(recv + off * esz, [&](int q) { return input(q, s); }, n);
              break;
            }
            // This rank's part, its own input read in place; then every rank's part.
            foldAll(result(me, s),
                    [&](int q) {
                      return (q == me ? send + off * esz : input(q, s)) + mine.first * esz;
                    },
                    mine.last - mine.first);
            gpuPublishWords(wordsOf(0, s, check.expect, reducedOff, t), stream);
            wait(reducedOff, t);
            for (int q = 0; q < nranks_; ++q) {
              const Part p = partOf(q, nranks_, n);
              fold(recv + (off + p.first) * esz, {result(q, s)}, p.last - p.first, 1);
            }
            break;
          case CollKind::kBroadcast:
            fold(recv + off * esz, {me == root ? send + off * esz : input(root, s)}, n, 1);
            break;
          case CollKind::kReduce:
            if (me == root) foldAll(recv + off * esz, [&](int q) { return input(q, s); }, n);
            break;
          case CollKind::kAllGather:
            for (int q = 0; q < nranks_; ++q)
              fold(recv + (q * count + off) * esz, {input(q, s)}, n, 1);
            break;
          case CollKind::kReduceScatter:
            foldAll(recv + off * esz, [&](int q) { return input(q, s) + me * per * esz; }, n);
            break;
          default:  // all-to-all
            for (int q = 0; q < nranks_; ++q)
              fold(recv + (q * count + off) * esz,
                   {q == me ? send + (me * count + off) * esz : input(q, s) + me * per * esz}, n,
                   1);
        }
        if (!checked) gpuCheckCalls(check, verdict, stream);  // a reduce's other ranks
        tell(consumedOff, t);
        write(word(me, kDoneOff), t);
        issued_.store(t);
      }
    } catch (const Error& e) {
      // Part of the round is on the stream: the peers may wait for the rest. The communicator
      // fails (every rank is told), and release() lets this stream through.
      issued_.store(t);
      failed = std::make_unique<Error>(e);
    }
  }
  if (failed) {
    fail_(*failed);
    release();
    throw *failed;
  }
  cv_.notify_all();
}


void StreamCollectives::release() {
  released_ = true;
  if (!cuda_->connected) return;
  for (size_t off : {kErrorOff, kMessageErrorOff}) {
    uint32_t expected = 0;
    __atomic_compare_exchange_n(const_cast<uint32_t*>(areaWord(peers_.areas[rank_], off)),
                                &expected, kReleased, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  reassertRelease();
  cv_.notify_all();
}

void StreamCollectives::reassertRelease() {
  // Past every round issued: a peer's stream may still store an older value over it, so the
  // watcher stores it again until this rank's stream is through.
  const uint32_t t = issued_.load();
  const uint8_t* mine = peers_.areas[rank_];
  for (int q = 0; q < nranks_; ++q) {
    const std::pair<size_t, uint32_t> messages[] = {{sentOff(q), chunksFrom_[q].load()},
                                                     {takenOff(q), chunksTo_[q].load()}};
    for (auto [off, last] : messages)
      if (!reached(loadWord(mine, off), last)) storeWord(mine, off, last);
    if (q == rank_) continue;
    for (size_t off : {publishedOff(q), consumedOff(q), reducedOff(q)})
      if (!reached(loadWord(mine, off), t)) storeWord(mine, off, t);
  }
}


bool StreamCollectives::through() const {
  if (!cuda_->connected) return true;
  return reached(roundsDone(), issued_.load()) &&
         reached(loadWord(peers_.areas[rank_], kGroupDoneOff), groups_.load());
}


std::string StreamCollectives::describeDisagreement() const {
  const volatile uint32_t* e = areaWord(peers_.areas[rank_], kErrorOff);
  const uint32_t q = loadWord(peers_.areas[rank_], kErrorOff) - 1;
  uint32_t theirs[kCallWords], mine[kCallWords];
  for (int w = 0; w < kCallWords; ++w) {
    theirs[w] = e[1 + w];
    mine[w] = e[1 + kCallWords + w];
  }
  return strCat("rank ", rank_, ": the ranks' collectives on device buffers do not match: rank ",
                q, "'s is ", describeCall(theirs), ", this rank's ", describeCall(mine),
                ". Every rank must make the same calls, with the same count, datatype, op, "
                "root and codec spec (method and settings), in the same order. That call's output ",
                (mine[3] >> 16) & 0xff ? "holds no result (a compressed call's)"
                                       : "was not written",
                "; destroy the communicator.");
}

void StreamCollectives::watch() {
  pthread_setname_np(pthread_self(), "sqz-stream-watch");
  setLogRank(rank_);
  const uint8_t* mine = peers_.areas[rank_];
  const int firstPeer = rank_ == 0 ? 1 : 0;
  // The round this rank's stream is in and when it arrived there: it has written its part of
  // round t to the peers (their inbox[me].published), so from then on it waits only for them.
  uint32_t round = 0;
  Clock::time_point arrived{};
  bool stalled = false;
  auto nextLiveness = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const bool pending = !through();
    cv_.wait_for(lock, std::chrono::milliseconds(pending ? 1 : 20));
    if (stop_) break;
    if (released_) {
      reassertRelease();
      continue;
    }
    const uint32_t issued = issued_.load(), done = roundsDone(), t = done + 1;
    std::unique_ptr<Error> failure;
    const bool liveness = Clock::now() >= nextLiveness;
    if (liveness) nextLiveness = Clock::now() + std::chrono::milliseconds(50);
    const uint32_t e = loadWord(mine, kErrorOff);
    // Whether this rank's stream has written its part of round t (each peer's published): from
    // then on it waits only for the peers, and its call words of round t are written.
    const bool here = reached(loadWord(peers_.areas[firstPeer], publishedOff(rank_)), t);
    const uint32_t w1 = loadWord(mine, callOff(t & 1) + 4),
                   w2 = loadWord(mine, callOff(t & 1) + 8),
                   w3 = loadWord(mine, callOff(t & 1) + 12);
    const bool two = here && (w3 & 0xff) == uint32_t(CollKind::kAllReduce) &&
                     ((w2 >> 16) & 0xff) < uint32_t(kNumDataTypes) &&
                     twoShot(w1 | (uint64_t(w2 & 0xffff) << 32), DataType((w2 >> 16) & 0xff));
    // What a peer still owes this stream: its round t (in two shots, its part too), and its
    // read of round t - 2.
    auto owes = [&](int q) {
      return !reached(loadWord(mine, publishedOff(q)), t) ||
             !reached(loadWord(mine, consumedOff(q)), t - 2) ||
             (two && !reached(loadWord(mine, reducedOff(q)), t));
    };
    if (e != 0 && e != kReleased && !reported_) {
      failure = std::make_unique<Error>(ErrorCode::kInvalidUsage, describeDisagreement());
    } else if (!reached(done, issued)) {
      if (liveness) {
        for (int q = 0; q < nranks_ && !failure; ++q)
          if (q != rank_ && owes(q) && peers_.down(q))
            failure = std::make_unique<Error>(
                ErrorCode::kRemote,
                strCat("rank ", rank_, ": rank ", q, " failed or exited while this rank's stream "
                       "waits for its part of a collective on device buffers (round ", t,
                       "); the communicator is failed"));
      }
      if (!here || round != t) {
        round = here ? t : round;
        arrived = Clock::now();
        stalled = false;
      } else if (!failure && !stalled &&
                 Clock::now() - arrived > std::chrono::milliseconds(timeoutMs_)) {
        stalled = true;
        std::string late;
        for (int q = 0; q < nranks_; ++q)
          if (q != rank_ && owes(q)) late += strCat(late.empty() ? "" : ", ", q);
        if (!late.empty())
          failure = std::make_unique<Error>(
              ErrorCode::kTimeout,
              strCat("rank ", rank_, ": a collective on device buffers waited ", timeoutMs_,
                     " ms (SQZ_TIMEOUT_MS) for rank(s) ", late, " to make the same call (round ",
                     t, "); the communicator is failed"));
        else
          SQZ_WARN(kDevice, "rank ", rank_, ": a collective on device buffers has had every "
                   "peer's part for ", timeoutMs_, " ms, and its reduction has not finished");
      }
    }
    const uint32_t m = loadWord(mine, kMessageErrorOff);
    if (!failure && m != 0 && m != kReleased && !reported_)
      failure = std::make_unique<Error>(ErrorCode::kInvalidUsage, describeMessageMismatch());
    if (!failure) watchGroups(failure, liveness);
    if (failure) {
      reported_ = true;
      lock.unlock();
      fail_(*failure);  // the communicator releases this stream (release())
      release();
      lock.lock();
    }
  }
}

void StreamCollectives::stopWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable() && watcher_.get_id() != std::this_thread::get_id()) watcher_.join();
}

StreamCollectives::~StreamCollectives() {
  stopWatcher();
  Cuda& c = *cuda_;
  auto parked = std::make_unique<Parked>();
  parked->device = device_;
  parked->window = c.window;
  parked->registered = c.registered;
  parked->keepAlive = peers_.keepAlive;
  for (size_t q = 0; q < c.opened.size(); ++q)
    if (c.opened[q]) parked->opened.push_back(c.windows[q]);
  if (c.connected) {
    // No CUDA call that may wait for the whole device: another rank's stream in this process
    // may be held (its peers still calling). This rank's own stream gets through first.
    const int waitMs = std::min(timeoutMs_, 2000);
    const uint32_t issued = issued_.load(), groups = groups_.load();
    auto through = [&] { return this->through(); };
    auto waitUntil = [&](auto done) {
      const auto deadline = Clock::now() + std::chrono::milliseconds(waitMs);
      while (!done() && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      return done();
    };
    if (!waitUntil(through)) {
      release();
      (void)waitUntil([&] {
        reassertRelease();
        return through();
      });
    }
    parked->areas = peers_.areas;
    parked->rank = rank_;
    parked->issued = issued;
    parked->groups = groups;
    if (through()) {
      if (!parked->detach())
        SQZ_INFO(kDevice, "rank ", rank_, ": could not unmap a peer's stream collectives' window");
    } else {
      SQZ_INFO(kDevice, "rank ", rank_, ": this rank's stream is not through its last stream "
               "collective; its window stays until it is");
    }
  }
  std::lock_guard<std::mutex> lock(graveyardMutex());
  graveyard().push_back(std::move(parked));
}

}  // namespace squeeze::device
