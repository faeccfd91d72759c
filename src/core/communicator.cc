// Communicator (see communicator.h).
#include "core/communicator.h"

#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "algorithms/algorithm.h"
#include "base/logging.h"
#include "bootstrap/rendezvous.h"
#include "compress/codec.h"
#include "core/calibrate.h"
#include "core/failure_notice.h"
#include "core/shrink_agreement.h"
#include "transports/shm/shm_transport.h"
#include "transports/shm/window.h"

namespace squeeze {
namespace {

// An agreement on n int64 fields in one max all-reduce: each field as (v, -v) into v[0..2n), so
// that afterwards v[2i] is the largest and -v[2i + 1] the smallest any rank passed.
CollRequest minMaxAgreement(const int64_t* mine, size_t n, int64_t* v) {
  for (size_t i = 0; i < n; ++i) {
    v[2 * i] = mine[i];
    v[2 * i + 1] = -mine[i];
  }
  CollRequest agree;
  agree.kind = CollKind::kAllReduce;
  agree.sendbuf = agree.recvbuf = v;
  agree.count = 2 * n;
  agree.dtype = DataType::kInt64;
  agree.op = RedOp::kMax;
  return agree;
}

// Where this rank listens for peers: SQZ_SOCKET_IFNAME's choice, except that a rendezvous on
// loopback means every rank is on this host, so loopback it is.
SockAddr peerListenAddress(const UniqueIdData& id, const CommConfig& config) {
  if (config.socketIfname.empty() && id.root.isLoopback()) {
    SockAddr a;
    if (id.root.storage.ss_family == AF_INET6) {
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
      v6->sin6_family = AF_INET6;
      v6->sin6_addr = in6addr_loopback;
      a.len = sizeof(sockaddr_in6);
    } else {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
      v4->sin_family = AF_INET;
      v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.len = sizeof(sockaddr_in);
    }
    return a;
  }
  SockAddr a = chooseInterfaceAddress(config.socketIfname);
  a.setPort(0);
  return a;
}

// An init that ran out of time says which setting bounds it; so does one whose peer closed the
// connection, since that is what a peer that ran out of time first does.
Error withInitTimeoutHint(const Error& e, int timeoutMs) {
  const std::string what = e.what();
  if (what.find("SQZ_TIMEOUT_MS") != std::string::npos) return e;
  if (e.code() == ErrorCode::kTimeout)
    return Error(e.code(), strCat(what, " (init waits at most SQZ_TIMEOUT_MS = ", timeoutMs,
                                  " ms for each step; raise it, or sqzConfig_t.timeoutMs, if "
                                  "ranks start or connect slowly)"));
  if (e.code() == ErrorCode::kRemote)
    return Error(e.code(), strCat(what, " (during init; a peer that waits longer than "
                                  "SQZ_TIMEOUT_MS = ", timeoutMs, " ms for a step gives up and "
                                  "closes: if ranks start slowly, raise it, or "
                                  "sqzConfig_t.timeoutMs)"));
  return e;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::create(const UniqueIdData& id, int rank, int nranks,
                                                   const CommConfig& config) {
  setLogRank(rank);
  std::unique_ptr<Communicator> comm(new Communicator(rank, nranks, config));
  Tuner validate(config.algoSpec, config.tcpModel);  // a bad SQZ_ALGO fails before any network
  std::optional<TunerFile> tunerFile;  // so does a bad SQZ_TUNER_FILE
  if (!config.tunerFile.empty()) tunerFile = loadTunerFile(config.tunerFile);
  comm->listener_ = Socket::listenOn(peerListenAddress(id, config));
  PeerInfo self;
  self.rank = rank;
  self.listenAddr = comm->listener_.localAddr();
  comm->selfAddr_ = self.listenAddr;
  comm->p2pSent_.assign(nranks, 0);
  comm->p2pRecvd_.assign(nranks, 0);
  self.hostId = localHostId();
  self.pid = getpid();
  // Before the rendezvous: no rank of this job can have a call in flight yet, so what may wait
  // for the whole device (a stream, pinned counters, the kernels' fixed scratch) is made now.
  if (config.device >= 0) comm->setUpDevice(id.commHash(0));
  try {
    comm->connect(id, self, tunerFile ? &*tunerFile : nullptr);
  } catch (const Error& e) {
    throw withInitTimeoutHint(e, config.timeoutMs);
  }
  return comm;
}

void Communicator::connect(const UniqueIdData& id, const PeerInfo& self,
                           const TunerFile* tunerFile) {
  const int rank = rank_, nranks = nranks_;
  const CommConfig& config = config_;
  RendezvousResult table = joinRendezvous(id, rank, nranks, self, config.timeoutMs);
  commHash_ = id.commHash(table.round);
  peers_ = connectPeers(rank, table.peers, listener_, id.secret, commHash_, config);
  // listener_ stays open: a shrink's leader takes the survivors' links on it.
  secret_ = id.secret;
  for (const PeerInfo& p : table.peers) listenAddrs_.push_back(p.listenAddr);
  // Every rank must price algorithms alike or they would pick different schedules: whether the
  // ranks span hosts comes from the rendezvous table, the same on every rank.
  bool anyNetwork = false, manyHosts = false;
  // Network transports (tcp, ucx, ib) price with the tcp rows; the calibration below scales
  // them to what this transport measures. Memory transports (shm, cuda_ipc) with the shm rows.
  for (const auto& c : peers_.conns) {
    if (!c) continue;
    const std::string name = c->transportName();
    anyNetwork |= name != "shm" && name != "cuda_ipc";
  }
  for (const PeerInfo& p : table.peers) manyHosts |= p.hostId != table.peers[0].hostId;
  buildTuner(manyHosts ? "net" : anyNetwork ? "tcp" : "shm",
             manyHosts ? config.netModel : anyNetwork ? config.tcpModel : config.shmModel,
             tunerFile, table.peers);
  if (nranks > 1) setUpDirect();
  if (rank == 0) {
    std::string transports;
    for (int p = 1; p < nranks; ++p)
      transports += strCat(p == 1 ? "" : " ", p, ":", peers_.conns[p]->transportName());
    SQZ_INFO(kInit, "communicator ", toHex(&commHash_, 8), " ready: ", nranks,
             " ranks; rank 0's peers ", transports.empty() ? "(none)" : transports);
  }
}

namespace {

// The size at which calibration times every all-reduce algorithm between hosts: small enough
// that latency decides, large enough to be a real payload.
constexpr size_t kAnchorBytes = 4 << 10;

// " all-reduce at 4096 B: naive 61.2 us, ..." for the calibration's log line; "" without.
std::string anchorNote(const CostModel& m) {
  if (m.anchorBytes <= 0) return "";
  std::string out = strCat("; all-reduce at ", size_t(m.anchorBytes), " B:");
  for (const AlgorithmEntry& a : algorithms())
    if (a.coll == CollKind::kAllReduce && a.id != AlgoId::kDirect)
      out += strCat(" ", a.name, " ", m.anchorSeconds[static_cast<int>(a.id)] * 1e6, " us");
  return out;
}

}  // namespace

void Communicator::buildTuner(const char* transport, const CostModel& configured,
                              const TunerFile* file, const std::vector<PeerInfo>& peers) {
  const TransportRows* fileRows = file ? file->find(transport) : nullptr;
  const TransportRows& rows = fileRows ? *fileRows : builtinRows(transport);
  tunerTransport_ = transport;
  tunerRows_ = fileRows ? config_.tunerFile : std::string("built-in");
  tuner_ = std::make_unique<Tuner>(config_.algoSpec, withRows(configured, rows));
  // Calibrate unless told not to, or nothing would use it (SQZ_ALGO decides); with a file, the
  // ranks still check that they read the same rows. On one host every pair of ranks is alike:
  // rank 0 and a partner measure, as the one-host rows' references were measured. Across hosts
  // every ring link is measured and the slowest governs.
  const bool calibrate = config_.tunerCalibrate && config_.algoSpec.empty() && nranks_ > 1;
  if (!calibrate && !(fileRows && nranks_ > 1)) return;
  const bool manyHosts = std::string(transport) == "net";
  const Probe probe = !calibrate ? Probe::kNone : manyHosts ? Probe::kRingLinks : Probe::kPair;
  // kPair's partner: a peer over the slowest transport, which prices the communicator.
  int partner = 1;
  for (int p = 1; p < nranks_; ++p)
    if (peers[p].hostId != peers[0].hostId) {
      partner = p;
      break;
    }
  calibration_ = measureCostTerms(*this, probe, partner, hashRows(rows));
  // Between hosts, where latency decides the rows' per-step terms were never fit (the "net"
  // rows are from 64 KiB up): the algorithms' own small calls are timed instead (tuner.h,
  // priceOf). After the links' probe, so that init ends with small calls, as the caller's
  // first calls will be (timeAllReduces says why that matters).
  std::vector<double> anchors;
  if (calibrate && manyHosts) {
    const CostModel prior = tuner_->model();
    anchors = timeAllReduces(*this, kAnchorBytes, [&](const AlgorithmEntry& a) {
      tuner_ = std::make_unique<Tuner>(strCat("allreduce:", a.name), prior);
    });
  }
  if (calibrate) {
    const MeasuredTerms& measured = calibration_.terms;
    CostModel model = withRows(configured, rows, &measured);
    if (!anchors.empty()) {
      model.anchorBytes = kAnchorBytes;
      std::copy(anchors.begin(), anchors.end(), model.anchorSeconds);
    }
    tuner_ = std::make_unique<Tuner>(config_.algoSpec, model);
    const CostModel& m = tuner_->model();
    if (rank_ == 0)
      SQZ_INFO(kTuning, "tuner calibration: transport=", transport, " alpha_us=",
               measured.alpha * 1e6, " beta_gbps=", 1e-9 / measured.beta, " gamma_gbps=",
               1e-9 / measured.gamma, " ms=", measured.seconds * 1e3, " cores=", m.cores,
               " rows=", tunerRows_, " links: ", describeLinks(calibration_), anchorNote(m),
               "; prices with alpha ", m.alpha * 1e6, " us, beta ", 1e-9 / m.beta,
               " GB/s, reduce ", 1e-9 / m.gamma, " GB/s");
  }
  forgetInitCalls();
}

void Communicator::setUpDirect() {
  std::shared_ptr<ShmWindow> window;
  for (const auto& t : peers_.transports)
    if (auto w = shmWindow(*t)) window = w;
  const bool all = allReduceByte(window ? 1 : 0, RedOp::kMin) == 1;
  if (all) direct_ = std::make_unique<DirectAllReduce>(window);
  SQZ_INFO(kInit, "rank ", rank_, ": direct all-reduce ",
           all      ? "on"
           : window ? "off (a peer has no shared-memory window)"
                    : "off (no shared-memory window to every peer)");
  if (callQueue_) setUpStreamCollectives(all ? window : nullptr);
  forgetInitCalls();
}

static_assert(ShmWindow::kStreamAreaBytes == device::kStreamAreaBytes);

void Communicator::setUpStreamCollectives(const std::shared_ptr<ShmWindow>& window) {
  std::string why;
  bool able = true;
  if (!window) {
    able = false;
    why = "no shared-memory window to every peer";
  } else if (nranks_ > device::StreamCollectives::kMaxRanks) {
    able = false;
    why = strCat("more than ", device::StreamCollectives::kMaxRanks, " ranks");
  } else if (config_.deviceDirectBytes == 0) {
    able = false;
    why = "SQZ_DEVICE_DIRECT_BYTES=0";
  } else {
    able = device::StreamCollectives::available(&why);
  }
  std::unique_ptr<device::StreamCollectives> stream;
  device::WindowExport mine{};
  if (able) {
    try {
      stream = std::make_unique<device::StreamCollectives>(
          config_.device, rank_, nranks_, config_.deviceDirectBytes, config_.timeoutMs,
          [this](const Error& e) { fail(e); });
      mine = stream->exportWindow();
      // Before the ranks agree: no rank of this communicator has a call in flight yet.
      codecContext_ = device::makeCodecContext(config_.device);
    } catch (const Error& e) {
      able = false;
      why = e.what();
      stream.reset();
    }
  }
  bool on = allReduceByte(able ? 1 : 0, RedOp::kMin) == 1;
  if (on) {
    std::vector<uint8_t> all(nranks_ * device::kWindowExportBytes);
    CollRequest req;
    req.kind = CollKind::kAllGather;
    req.sendbuf = mine.data();
    req.recvbuf = all.data();
    req.count = device::kWindowExportBytes;
    req.dtype = DataType::kUint8;
    run(req, nullptr);
    std::vector<device::WindowExport> exports(nranks_);
    for (int q = 0; q < nranks_; ++q)
      std::memcpy(exports[q].data(), all.data() + q * device::kWindowExportBytes,
                  device::kWindowExportBytes);
    device::StreamCollectives::Peers peers;
    for (int q = 0; q < nranks_; ++q) peers.areas.push_back(window->streamArea(q));
    peers.down = [window](int q) { return window->peerDown(q); };
    peers.keepAlive = window->holdMappings();
    try {
      stream->connect(exports, std::move(peers));
    } catch (const Error& e) {
      able = false;
      why = e.what();
    }
    on = allReduceByte(able ? 1 : 0, RedOp::kMin) == 1;
  }
  if (on)
    streamColls_ = std::move(stream);
  else
    device::parkCodecContext(std::move(codecContext_));
  SQZ_INFO(kInit, "rank ", rank_, ": dense collectives on device buffers run ",
           on    ? "on the caller's stream alone (stream collectives)"
           : able ? "through the host (a peer cannot run the stream collectives)"
                  : strCat("through the host (", why, ")"));
}

void Communicator::forgetInitCalls() {
  calibrationBytes_ = executor_.payloadBytesSent();
  seq_ = 0;
  std::fill(p2pSent_.begin(), p2pSent_.end(), 0);
  std::fill(p2pRecvd_.begin(), p2pRecvd_.end(), 0);
  lastAlgorithm_ = "";
  loggedChoice_ = false;
}

Communicator::~Communicator() {
  callQueue_.reset();  // its enqueued calls complete first, so the count below includes them
  device::parkCodecContext(std::move(codecContext_));
  // Traffic, for users comparing runs with and without a codec (SQZ_DEBUG=INFO).
  const uint64_t direct = (direct_ ? direct_->bytesPublished() : 0) +
                          (streamColls_ ? streamColls_->bytesPublished() : 0);
  SQZ_INFO(kInit, "rank ", rank_, ": communicator ", toHex(&commHash_, 8), " closed after ", seq_,
           " calls; sent ", executor_.payloadBytesSent() - calibrationBytes_ + direct,
           " payload bytes");
}

void Communicator::fail(const Error& e) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(errorMu_);
    if (!asyncError_) {
      asyncError_ = e;
      first = true;
    }
  }
  // Peers learn why before they find the connections closed (once: the first cause is the one).
  if (first)
    for (auto& s : peers_.controls) sendFailureNotice(s, e);
  // Peers blocked on us learn at once that this rank is out.
  if (direct_) direct_->shutdown();
  if (streamColls_) streamColls_->release();
  for (auto& c : peers_.conns)
    if (c) c->shutdown();
  for (auto& s : peers_.controls) s.shutdownBoth();
}

Error Communicator::failCall(const Error& e) {
  Error cause = e;
  // A closed connection (or a peer's message this rank cannot read) is how a peer that failed
  // looks from here: its notice, sent before it closed, says why.
  if (e.code() == ErrorCode::kRemote && !aborted_)
    if (auto notice = readFailureNotice(peers_.controls, rank_,
                                        deadlineAfterMs(std::min(config_.timeoutMs,
                                                                 kNoticeWaitMs))))
      cause = *notice;
  fail(cause);
  // The communicator's first cause: a revoke or abort on another thread is why this call ended.
  return asyncError().value_or(cause);
}

std::optional<Error> Communicator::asyncError() const {
  std::lock_guard<std::mutex> lock(errorMu_);
  return asyncError_;
}

void Communicator::abort() {
  aborted_ = true;
  fail(Error(ErrorCode::kRemote, strCat("rank ", rank_, ": the communicator was aborted")));
  if (callQueue_) callQueue_->abort();
  std::lock_guard<std::mutex> wait(callMu_);  // a call in flight notices and returns
}

void Communicator::revoke() {
  fail(Error(ErrorCode::kRemote, strCat("rank ", rank_, " revoked the communicator "
                                        "(sqzCommRevoke); shrink it, or destroy it")));
  if (callQueue_) callQueue_->abort();
}

std::unique_ptr<Communicator> Communicator::shrink(const std::vector<int>& exclude,
                                                   const CommConfig& config) {
  std::vector<int> gone = exclude;
  std::sort(gone.begin(), gone.end());
  for (size_t i = 0; i < gone.size(); ++i) {
    if (gone[i] < 0 || gone[i] >= nranks_)
      raise(ErrorCode::kInvalidArgument, "sqzCommShrink: rank ", gone[i], " in the exclude list "
            "is not a rank of this communicator (0..", nranks_ - 1, ")");
    if (i > 0 && gone[i] == gone[i - 1])
      raise(ErrorCode::kInvalidArgument, "sqzCommShrink: rank ", gone[i], " is in the exclude "
            "list twice");
  }
  if (static_cast<int>(gone.size()) >= nranks_)
    raise(ErrorCode::kInvalidArgument, "sqzCommShrink: the exclude list has every rank of the "
          "communicator; at least one must stay");
  if (std::binary_search(gone.begin(), gone.end(), rank_))
    raise(ErrorCode::kInvalidArgument, "sqzCommShrink: rank ", rank_, " excludes itself; a "
          "rank that leaves does not call sqzCommShrink (it destroys its communicator)");
  // A healthy communicator's calls must be over: they would hold connections the excluded ranks
  // still use. A revoked or failed one's calls are ending by themselves.
  std::unique_lock<std::mutex> idle(callMu_, std::try_to_lock);
  if (!idle.owns_lock() && !asyncError())
    raise(ErrorCode::kInvalidUsage, "sqzCommShrink: rank ", rank_, " has a call in flight on "
          "this communicator; revoke it first (sqzCommRevoke), or wait for the call to end");
  if (!asyncError()) drainDevice();
  std::vector<int> survivors;
  for (int r = 0; r < nranks_; ++r)
    if (!std::binary_search(gone.begin(), gone.end(), r)) survivors.push_back(r);
  ShrinkParty party;
  party.rank = rank_;
  party.nranks = nranks_;
  party.commHash = commHash_;
  party.secret = secret_;
  party.listenAddrs = listenAddrs_;
  party.listener = &listener_;
  party.timeoutMs = config_.timeoutMs;
  const UniqueIdData id = agreeOnShrink(party, survivors);
  const int newRank = static_cast<int>(
      std::lower_bound(survivors.begin(), survivors.end(), rank_) - survivors.begin());
  std::unique_ptr<Communicator> child;
  try {
    child = create(id, newRank, static_cast<int>(survivors.size()), config);
  } catch (const Error& e) {
    setLogRank(rank_);
    raise(e.code(), "sqzCommShrink: the survivors agreed on ", survivors.size(), " ranks, but "
          "the new communicator's init failed (a rank lost during the shrink fails every "
          "member's): ", e.what());
  }
  setLogRank(rank_);
  return child;
}

std::unique_ptr<Communicator> Communicator::grow(int newRanks, const UniqueIdData& id,
                                                 const CommConfig& config) {
  throwIfFailed();
  if (newRanks < 1)
    raise(ErrorCode::kInvalidArgument, "sqzCommGrow: newRanks is ", newRanks, "; at least 1 "
          "process must join");
  drainDevice();
  // Every rank's id and count, agreed on.
  const int64_t mine[2] = {static_cast<int64_t>(id.commHash(0) >> 1), newRanks};
  int64_t v[4];
  run(minMaxAgreement(mine, 2, v), nullptr);
  if (v[0] != -v[1])
    raise(ErrorCode::kInvalidUsage, "sqzCommGrow: the ranks passed different unique ids; every "
          "rank passes the one id the joining processes use. Nothing was changed.");
  if (v[2] != -v[3])
    raise(ErrorCode::kInvalidUsage, "sqzCommGrow: the ranks passed different counts of joining "
          "processes (", -v[3], " to ", v[2], "). Nothing was changed.");
  auto child = create(id, rank_, nranks_ + newRanks, config);
  setLogRank(rank_);
  return child;
}

void Communicator::stopThreads() {
  if (streamColls_) streamColls_->stopWatcher();
  if (callQueue_) callQueue_->stopThread();
}

void Communicator::throwIfFailed() const {
  if (auto err = asyncError())
    raise(ErrorCode::kInvalidUsage, "rank ", rank_, ": the communicator is unusable after an "
          "earlier error (", err->what(), "); destroy it and create a new one.");
}

void Communicator::drainDevice() {
  if (callQueue_) callQueue_->drain();
}

void Communicator::setUpDevice(uint64_t group) {
  callQueue_ = std::make_unique<device::CallQueue>(
      config_.device, group, rank_, config_.deviceStagingBytes, config_.timeoutMs,
      [this](const Error& e) { fail(e); });
  // One rank's compressed calls run on the caller's stream (ranks on one host: made with the
  // stream collectives, which they need; elsewhere the context would go unused: its slots and
  // cuBLAS handle are not free).
  if (nranks_ == 1 && config_.deviceDirectBytes > 0)
    codecContext_ = device::makeCodecContext(config_.device);
}

device::CallQueue& Communicator::callQueue() {
  SQZ_ENFORCE(callQueue_, "rank ", rank_, ": a device call on a communicator without a GPU");
  return *callQueue_;
}

void Communicator::collective(const CollRequest& req) {
  // On the progress thread the call is a device call's host side: the queue is its caller.
  if (!callQueue_ || !callQueue_->onProgressThread()) drainDevice();
  run(req, nullptr);
}

void Communicator::hostCollective(const CollRequest& req) { collective(req); }

void Communicator::enqueueTask(void* stream, const std::vector<device::DeviceSpan>& spans,
                               std::function<void(const device::HostCopies&)> task,
                               std::string what) {
  throwIfFailed();
  callQueue().enqueue(static_cast<device::GpuStream>(stream), spans, std::move(task),
                      std::move(what));
}

namespace {

// The device buffers a collective reads and writes, as this rank's part of it uses them (a
// broadcast's sendbuf on its root only, a reduce's recvbuf on its root only).
std::vector<device::DeviceSpan> spansOf(const CollRequest& req, int rank, int nranks) {
  const size_t esz = dataTypeSize(req.dtype), n = req.count * esz;
  size_t in = n, out = n;
  bool reads = true, writes = true;
  switch (req.kind) {
    case CollKind::kBroadcast: reads = rank == req.root; break;
    case CollKind::kReduce: writes = rank == req.root; break;
    case CollKind::kAllGather: out = n * nranks; break;
    case CollKind::kReduceScatter: in = n * nranks; break;
    case CollKind::kAlltoAll: in = out = n * nranks; break;
    default: break;
  }
  std::vector<device::DeviceSpan> spans;
  if (reads) spans.push_back({req.sendbuf, in, true, false});
  if (writes) spans.push_back({req.recvbuf, out, false, true});
  return spans;
}

}  // namespace

void Communicator::enqueueCollective(const CollRequest& req, void* stream) {
  // One rank and no codec: every rank's schedule would be localOnlySchedule (copy, then avg's
  // division by 1), so the result is the input. One copy on the caller's stream does it in a
  // few microseconds, where the progress thread's hand-off takes tens.
  const bool copyOnly = req.kind == CollKind::kAllReduce || req.kind == CollKind::kReduce ||
                        req.kind == CollKind::kReduceScatter;
  const std::string what =
      strCat(collKindName(req.kind), " of ", req.count, " ", dataTypeName(req.dtype));
  if (nranks_ == 1 && copyOnly && !req.codecCall && (!req.codec || req.codec->rawWire())) {
    throwIfFailed();
    callQueue().copyOnStream(static_cast<device::GpuStream>(stream), req.recvbuf, req.sendbuf,
                             req.bytes(), what);
    ranOnStream();
    return;
  }
  // A dense collective of ranks on one host: on the caller's stream alone. Unless SQZ_ALGO
  // forces the algorithms (an all-reduce: unless it names another than direct), since the
  // alternative is a trip through the host.
  auto forcedDirect = [&] {  // SQZ_ALGO's rule for this all-reduce is the direct algorithm
    CollRequest probe = req;
    probe.windowed = true;
    if (!probe.codec) probe.codec = &denseCodec();
    return req.kind == CollKind::kAllReduce && !tuner_->choose(probe, nranks_).build;
  };
  if (streamColls_ && device::StreamCollectives::runs(req.kind) && req.count > 0 &&
      !req.codecCall && (!req.codec || req.codec->rawWire()) &&
      (config_.algoSpec.empty() || forcedDirect())) {
    throwIfFailed();
    streamColls_->enqueue(static_cast<device::GpuStream>(stream), req, what);
    ranOnStream();
    return;
  }
  enqueueTask(stream, spansOf(req, rank_, nranks_),
              [this, req](const device::HostCopies& copies) {
                CollRequest host = req;
                host.sendbuf = copies.at(req.sendbuf);
                host.recvbuf = copies.at(req.recvbuf);
                // A buffer this rank's part does not use (a non-root's broadcast input) stays
                // distinct from the output unless the call named the same one.
                if (req.sendbuf == req.recvbuf) host.sendbuf = host.recvbuf;
                run(host, nullptr);
              },
              what);
}

device::Context* Communicator::streamContext() {
  // One rank exchanges nothing: its compressed calls are its codec's passes alone (unless
  // SQZ_DEVICE_DIRECT_BYTES=0 sends device calls through the host).
  // codecContext_ is made where they can run there (setUpDevice, setUpStreamCollectives).
  return nranks_ > 1 && !config_.algoSpec.empty() ? nullptr : codecContext_.get();
}

void Communicator::enqueueOnStream(const CollRequest& req, void* stream) {
  const bool gather = req.kind == CollKind::kAllGather;
  SQZ_ENFORCE((streamColls_ || (nranks_ == 1 && !gather)) &&
                  (gather || req.kind == CollKind::kAllReduce) && req.count > 0,
              "enqueueOnStream");
  throwIfFailed();
  const std::string codec = strCat("compressed all-reduce (", codecName(req.codecMethod), ")");
  if (nranks_ == 1) {  // its all-reduce is its input: sqzAllReduce's one copy (none in place)
    if (req.sendbuf != req.recvbuf)
      callQueue().copyOnStream(static_cast<device::GpuStream>(stream), req.recvbuf, req.sendbuf,
                               req.bytes(), strCat(codec, " sent dense"));
    return;
  }
  streamColls_->enqueue(static_cast<device::GpuStream>(stream), req,
                        gather ? strCat(codec, ": the all-gather of ", req.count, " payload bytes")
                               : strCat(codec, " sent dense: ", req.count, " ",
                                        dataTypeName(req.dtype)));
}

void Communicator::enqueueSendRecv(const std::vector<P2pCall>& calls, void* stream) {
  // Ranks on one host: on the caller's stream alone, like the dense collectives.
  if (streamColls_) {
    checkSendsToSelf(calls, rank_);
    throwIfFailed();
    std::vector<device::StreamCollectives::Message> messages;
    for (const P2pCall& c : calls) messages.push_back({c.isSend, c.peer, c.buffer, c.bytes});
    streamColls_->enqueueSendRecv(static_cast<device::GpuStream>(stream), messages,
                                  strCat("a group of ", calls.size(), " sends and receives"));
    ranOnStream();
    return;
  }
  std::vector<device::DeviceSpan> spans;
  for (const P2pCall& c : calls) spans.push_back({c.buffer, c.bytes, c.isSend, !c.isSend});
  enqueueTask(stream, spans,
              [this, calls](const device::HostCopies& copies) {
                std::vector<P2pCall> host = calls;
                for (P2pCall& c : host) c.buffer = copies.at(c.buffer);
                runSendRecv(host, nullptr);
              },
              strCat("a group of ", calls.size(), " sends and receives"));
}

void Communicator::sendRecv(const std::vector<P2pCall>& calls) {
  drainDevice();
  runSendRecv(calls, nullptr);
}

void Communicator::runSendRecv(const std::vector<P2pCall>& calls, device::Context* ctx) {
  CollRequest req;
  req.kind = CollKind::kSendRecv;
  req.dtype = DataType::kUint8;
  for (const P2pCall& c : calls)
    if (c.peer < 0 || c.peer >= nranks_)
      raise(ErrorCode::kInvalidArgument, "rank ", rank_, ": peer ", c.peer,
            " is out of range for a communicator of ", nranks_, " ranks.");
  Schedule sched = buildSendRecv(calls, rank_, p2pSent_, p2pRecvd_);
  run(req, &sched, ctx);
}

uint8_t Communicator::allReduceByte(uint8_t value, RedOp op) {
  CollRequest req;
  req.kind = CollKind::kAllReduce;
  req.sendbuf = req.recvbuf = &value;
  req.count = 1;
  req.dtype = DataType::kUint8;
  req.op = op;
  run(req, nullptr);
  return value;
}

void Communicator::barrier() {
  drainDevice();
  allReduceByte(0, RedOp::kMax);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const CommConfig& config) {
  drainDevice();
  // Round 1: everyone's (color, key).
  std::vector<int32_t> mine = {color, key}, all(2 * nranks_);
  CollRequest gather;
  gather.kind = CollKind::kAllGather;
  gather.sendbuf = mine.data();
  gather.recvbuf = all.data();
  gather.count = 2;
  gather.dtype = DataType::kInt32;
  run(gather, nullptr);
  std::vector<std::pair<int, int>> members;  // (key, parent rank) of my color
  for (int p = 0; p < nranks_; ++p)
    if (color >= 0 && all[2 * p] == color) members.push_back({all[2 * p + 1], p});
  std::sort(members.begin(), members.end());
  // Round 2: each color's leader (first member) starts a rendezvous and shares its id.
  char idBytes[UniqueIdData::kBytes] = {};
  const bool leader = !members.empty() && members[0].second == rank_;
  if (leader) {
    SockAddr bind = selfAddr_;
    bind.setPort(0);
    RendezvousRoot::start(bind, 1, config.timeoutMs).serialize(idBytes);
  }
  std::vector<char> ids(UniqueIdData::kBytes * nranks_);
  gather.sendbuf = idBytes;
  gather.recvbuf = ids.data();
  gather.count = UniqueIdData::kBytes;
  gather.dtype = DataType::kUint8;
  run(gather, nullptr);
  if (members.empty()) return nullptr;
  int newRank = 0;
  while (members[newRank].second != rank_) ++newRank;
  UniqueIdData id = UniqueIdData::parse(&ids[UniqueIdData::kBytes * members[0].second]);
  auto child = create(id, newRank, static_cast<int>(members.size()), config);
  setLogRank(rank_);
  return child;
}

WireHeader Communicator::headerFor(const CollRequest& req, uint64_t seq) const {
  WireHeader h;
  h.coll = static_cast<uint8_t>(req.kind);
  h.codec = req.codec->id();
  h.method = req.codecMethod;
  h.specHash = req.specHash;
  h.dtype = static_cast<uint8_t>(req.dtype);
  h.op = static_cast<uint8_t>(req.op);
  h.commHash = commHash_;
  h.seq = seq;
  h.count = req.count;
  h.root = req.root;
  return h;
}

void Communicator::agreeOnRootedCall(const CollRequest& req, const WireHeader& base) {
  const int64_t mine[4] = {req.root, static_cast<int64_t>(req.count), int64_t(req.dtype),
                           int64_t(req.op)};
  int64_t v[8];
  CollRequest agree = minMaxAgreement(mine, 4, v);
  agree.codec = &denseCodec();
  agree.specHash = kRootedAgreementSpec;
  agree.windowed = direct_ != nullptr;
  // The call's own collective and number: a rank in another call is told which one this is.
  WireHeader h = headerFor(agree, base.seq);
  h.coll = base.coll;
  const AlgorithmEntry* algo = &tuner_->choose(agree, nranks_);
  if (!algo->build && !direct_) algo = findAlgorithm(CollKind::kAllReduce, "ring");
  if (!algo->build) {
    direct_->run(agree, h, config_.timeoutMs, config_.spinUs, aborted_);
  } else {
    ScheduleParams params{rank_, nranks_, agree.count};
    CallEnv env{rank_,          nranks_,  peers_.conns, config_.timeoutMs,
                config_.spinUs, aborted_, *hostCtx_};
    executor_.run(agree, algo->build(agree, params), h, env);
  }
  static const char* const kField[] = {"root", "count", "datatype", "op"};
  for (int i = 0; i < 4; ++i) {
    const int64_t hi = v[2 * i], lo = -v[2 * i + 1];
    if (hi == lo) continue;
    auto name = [&](int64_t x) -> std::string {
      if (i == 2) return x >= 0 && x < kNumDataTypes ? dataTypeName(DataType(x)) : "?";
      if (i == 3) return x >= 0 && x < kNumRedOps ? redOpName(RedOp(x)) : "?";
      return strCat(kField[i], "=", x);
    };
    raise(ErrorCode::kInvalidUsage, "ranks disagree on the ", kField[i], " of ",
          collKindName(req.kind), " #", base.seq, ": rank ", rank_, " passed ", name(mine[i]),
          ", and the ranks passed from ", name(lo), " to ", name(hi),
          ". Every rank must pass the same root, count, datatype and op; nothing was sent.");
  }
}

void Communicator::run(const CollRequest& reqIn, Schedule* prebuilt, device::Context* ctx) {
  std::lock_guard<std::mutex> lock(callMu_);
  setLogRank(rank_);
  throwIfFailed();
  CollRequest req = reqIn;
  if (!req.codec) req.codec = &denseCodec();
  Schedule sched;
  uint64_t seq = 0;
  bool direct = false;  // the direct all-reduce runs it, over the window
  if (prebuilt) {
    sched = std::move(*prebuilt);
    lastAlgorithm_ = "p2p";
  } else {
    seq = seq_++;
    // A dense codec's call (the dense method, or a lossy handle's dense run) goes direct too:
    // it must give sqzAllReduce's bits, and direct sums in another order than the schedules.
    req.windowed = direct_ && !ctx && req.kind == CollKind::kAllReduce && req.codec->rawWire();
    const AlgorithmEntry& algo = tuner_->choose(req, nranks_);
    lastAlgorithm_ = algo.name;
    if (req.count == 0) return;
    if (!loggedChoice_) {
      SQZ_INFO(kTuning, "rank ", rank_, ": ", collKindName(req.kind), " of ", req.bytes(),
               " bytes uses ", algo.name, ", codec ", req.codec->name());
      loggedChoice_ = true;
    }
    direct = !algo.build;
    ScheduleParams params{rank_, nranks_,
                          std::max<size_t>(1, config_.chunkBytes / dataTypeSize(req.dtype))};
    if (!direct) sched = algo.build(req, params);
  }

  const WireHeader base = headerFor(req, seq);
  EncodePool* pool = nullptr;  // a compressed call on host memory may encode on more threads
  if (config_.encodeThreads > 1 && !ctx && req.codecCall && !req.codec->rawWire()) {
    if (!encodePool_) encodePool_ = std::make_unique<EncodePool>(config_.encodeThreads);
    pool = encodePool_.get();
  }
  CallEnv env{rank_,          nranks_,  peers_.conns,          config_.timeoutMs,
              config_.spinUs, aborted_, ctx ? *ctx : *hostCtx_, pool};
  const bool rooted = req.kind == CollKind::kBroadcast || req.kind == CollKind::kReduce;
  try {
    if (rooted && !prebuilt && nranks_ > 1) agreeOnRootedCall(req, base);
    if (config_.fullCheck && !rooted && !prebuilt && nranks_ > 1) {
      CollRequest agree = req;  // the same call, its description on empty dense messages
      agree.codec = &denseCodec();
      agree.codecCall = nullptr;
      executor_.run(agree, agreementSchedule(rank_, nranks_), base, env);
    }
    if (direct) {
      const uint64_t published = direct_->bytesPublished();
      direct_->run(req, base, config_.timeoutMs, config_.spinUs, aborted_);
      if (req.codecCall) {  // what the executor counts for a dense call's sends
        const uint64_t sent = direct_->bytesPublished() - published;
        req.codecCall->wireBytes += sent;
        req.codecCall->denseBytes += sent;
      }
    } else
      executor_.run(req, sched, base, env);
  } catch (const Error& e) {
    // An inner call's disagreement is the user's call's: say which call that is.
    if (req.partOf && e.code() == ErrorCode::kInvalidUsage)
      throw failCall(Error(e.code(), strCat("in ", req.partOf, ": ", e.what())));
    throw failCall(e);
  }
}

}  // namespace squeeze
