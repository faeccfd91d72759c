// CodecHandle (see handle.h): the compressed call's frame around the schedule, statistics, and
// the state's byte format.
#include "compress/handle.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <thread>

#include "base/crypto.h"
#include "base/error.h"
#include "base/logging.h"
#include "base/strings.h"
#include "compress/codecs.h"
#include "compress/state_bytes.h"

namespace squeeze {

// The device mirror of a handle's state (handle.h, "State on the device").
struct CodecHandle::DeviceState {
  enum class Current { kHost, kDevice, kBoth };  // which copy holds the state
  int device = -1;                               // the GPU the buffers are on
  Current current = Current::kHost;
  std::vector<std::unique_ptr<device::Allocation>> arrays;  // by stateArrays() index
  // fetchState's downloads: a context with a non-blocking stream of its own, so a download
  // waits for nothing else on the device (the legacy default stream would wait for the
  // caller's streams).
  std::unique_ptr<device::Context> downloads;
  // enqueueOnStream's last call: the context it ran in (the communicator's) and the mark after it.
  device::Context* streamCalls = nullptr;
  device::Context::Mark lastStreamCall = 0;
  // The guard's timing of those calls, in call order, until their stamps have run: a
  // compressed call's start, its boundaries between codec work and exchanges (streamCompressed),
  // and its end; a dense call's run, start and end.
  struct Timed {
    bool compressed = false;
    size_t stamps = 0;
    device::Context::Stamp at[kMaxStreamStamps] = {};
  };
  std::deque<Timed> timed;
  // The last call's gain, where it was a compressed call on the stream that measured one
  // (gainOnDevice): its encode's norms, added on the device (Context::sumsOnDevice, routed
  // from `norms`, whose host doubles stay 0) into two doubles of callScratch's
  // kStreamNormsSlot, which stats reads back once the call has run.
  device::Norms norms;
  bool gainOnDevice = false;
};

CodecHandle::CodecHandle(const CodecSpec& spec, size_t count, DataType dtype,
                         std::unique_ptr<Codec> chunk)
    : spec_(spec), count_(count), dtype_(dtype), chunk_(std::move(chunk)) {
  const CodecMethod* method = findCodecMethod(spec_.method);
  methodId_ = method ? method->id : 0;  // createCodecHandle has checked the method
  if (methodId_ != 0) {  // dense has no settings: its calls are plain calls
    const std::string canonical = spec_.str();
    const Digest digest = sha256(canonical.data(), canonical.size());
    std::memcpy(&specHash_, digest.data(), sizeof specHash_);
  }
  callName_ = strCat("sqzAllReduceCompressed of ", count_, " ", dataTypeName(dtype_),
                     " with codec ", spec_.str());
  figureExchangeName_ = strCat(callName_, " (the codec's exchange of figures, before any data)");
  const bool lossy = !chunk_ || !chunk_->rawWire();
  errorFeedback_ = lossy && spec_.get("ef", 1, 0, 1) != 0;
  if (errorFeedback_) residual_.assign(count_, 0.0f);
  autoDense_ = method && method->lossy;
  if (autoDense_ && spec_.autoDense) spec_.getWhole("auto_dense", 1, 0, 1);  // 0 or 1
}

void CodecHandle::adopt(const CodecSpec& outer, std::unique_ptr<AdaptivePolicy> policy) {
  spec_ = outer;
  const CodecMethod* method = findCodecMethod(spec_.method);
  methodId_ = method ? method->id : 0;
  const std::string canonical = spec_.str();
  const Digest digest = sha256(canonical.data(), canonical.size());
  std::memcpy(&specHash_, digest.data(), sizeof specHash_);
  policy_ = std::move(policy);
}

CodecHandle::~CodecHandle() = default;

std::vector<std::pair<std::string, std::vector<float>*>> CodecHandle::stateArrays() const {
  auto arrays = const_cast<CodecHandle*>(this)->extraState();
  arrays.insert(arrays.begin(), {"residual", const_cast<std::vector<float>*>(&residual_)});
  return arrays;
}

void CodecHandle::placeState(device::Context& ctx) {
  using Current = DeviceState::Current;
  if (!ctx.onDevice()) {
    fetchState();
    if (device_) device_->current = Current::kHost;
    return;
  }
  if (device_ && device_->device != ctx.device()) {  // another GPU: move the state over
    fetchState();
    device_.reset();
  }
  if (!device_) {
    device_ = std::make_unique<DeviceState>();
    device_->device = ctx.device();
    device_->downloads = device::makeCudaContext(ctx.device(), nullptr);
  }
  DeviceState& d = *device_;
  const auto arrays = stateArrays();
  d.arrays.resize(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    const size_t bytes = arrays[i].second->size() * sizeof(float);
    if (!d.arrays[i] || d.arrays[i]->size() < bytes) {  // first use (sizes are fixed)
      SQZ_ENFORCE(d.current == Current::kHost, "codec state array ", arrays[i].first,
                  " grew while its device copy was the current one");
      ctx.reserve(d.arrays[i], bytes, device::Space::kDevice);
    }
  }
  if (d.current == Current::kHost)
    for (size_t i = 0; i < arrays.size(); ++i) {
      const std::vector<float>& host = *arrays[i].second;
      const size_t bytes = host.size() * sizeof(float);
      // An array of zero bits (a new codec's, a residual after a dense call) is a memset: a copy
      // from pageable memory would wait for the stream.
      const bool zero = (i == 0 && residualClear_) ||
                        std::all_of(host.begin(), host.end(),
                                    [](float v) { return std::bit_cast<uint32_t>(v) == 0; });
      if (zero)
        ctx.zero(d.arrays[i]->data(), bytes);
      else
        ctx.copy(d.arrays[i]->data(), host.data(), bytes);
    }
  d.current = Current::kDevice;
}

void CodecHandle::fetchState() const {
  if (!device_ || device_->current != DeviceState::Current::kDevice) return;
  // The device call that wrote the state has finished before its call returned.
  const auto arrays = stateArrays();
  for (size_t i = 0; i < arrays.size(); ++i)
    device_->downloads->copy(arrays[i].second->data(), device_->arrays[i]->data(),
                             arrays[i].second->size() * sizeof(float));
  device_->downloads->wait("downloading codec state from the GPU");
  device_->current = DeviceState::Current::kBoth;
}

float* CodecHandle::stateData(std::vector<float>& array, device::Context& ctx) {
  if (!ctx.onDevice()) return array.data();
  SQZ_ENFORCE(device_ && device_->current == DeviceState::Current::kDevice,
              "codec state used on the GPU before placeState");
  const auto arrays = stateArrays();
  for (size_t i = 0; i < arrays.size(); ++i)
    if (arrays[i].second == &array) return reinterpret_cast<float*>(device_->arrays[i]->data());
  raise(ErrorCode::kInternal, "stateData: an array that is not part of the codec's state");
}

void CodecHandle::clearState(std::vector<float>& array, device::Context& ctx) {
  ctx.zero(stateData(array, ctx), array.size() * sizeof(float));
}

void* CodecHandle::callScratch(device::Context& ctx, int slot, size_t bytes) {
  if (scratch_.size() <= static_cast<size_t>(slot)) scratch_.resize(slot + 1);
  Scratch& s = scratch_[slot];
  if (s.memory && s.space != ctx.workSpace()) s.memory.reset();
  s.space = ctx.workSpace();
  ctx.reserve(s.memory, bytes, s.space);
  return s.memory->data();
}

void CodecHandle::prepare(const float* g, float* x, int, device::Context& ctx) {
  if (errorFeedback_)
    ctx.addResidual(g, stateData(residual_, ctx), x, count_);
  else if (x != g)
    ctx.copy(x, g, count_ * sizeof(float));
}

void CodecHandle::runChunked(CodecComm& comm, const void* in, void* out, size_t count, RedOp op,
                             Codec& codec, CodecCall& call) {
  CollRequest req = codecRequest(CollKind::kAllReduce, in, out, count, dtype_, op);
  req.codec = &codec;
  req.codecCall = &call;
  comm.collective(req);
}

namespace {

double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool CodecHandle::guardOn(const CodecComm& comm) const {
  return autoDense_ &&
         (spec_.autoDense ? *spec_.autoDense != 0 : comm.codecSettings().codecAutoDense);
}

void CodecHandle::settleStreams(CodecComm& comm) {
  if (device_ && device_->streamCalls && device_->streamCalls == comm.streamContext()) {
    device_->streamCalls->waitFor(device_->lastStreamCall,
                                  "a compressed all-reduce on the caller's stream");
    takeStreamSeconds(*device_->streamCalls);
  }
}

void CodecHandle::takeStreamSeconds(device::Context& ctx) {
  if (!device_) return;
  while (!device_->timed.empty()) {
    const DeviceState::Timed& t = device_->timed.front();
    double seconds[kMaxStreamStamps - 1] = {};
    if (!ctx.takeSeconds(t.at, t.stamps, seconds)) return;  // still running: the next call's
    RunSums& r = runs_[t.compressed ? 0 : 1];
    r.calls += 1;
    for (size_t i = 0; i + 1 < t.stamps; ++i) {
      r.seconds += seconds[i];
      // A compressed call's codec work: the intervals between its exchanges.
      if (t.compressed && i % 2 == 0) r.codecSeconds += seconds[i];
    }
    device_->timed.pop_front();
  }
}

bool CodecHandle::enqueueOnStream(CodecComm& comm, const void* in, void* out, RedOp op,
                                  void* stream) {
  const int ranks = comm.size();
  device::Context* const on = comm.streamContext();
  const bool dense = methodId_ == 0;  // the dense method (PowerSGD's chunk codec is dense too)
  if (!on || !(dense || runsOnStream(*on)) || policy_ ||
      comm.codecSettings().codecDelayUs > 0)
    return false;
  device::Context& ctx = *on;
  if (dense) {  // exactly sqzAllReduce, any datatype and op; no state
    CodecCall call;
    call.call = calls_;
    comm.enqueueOnStream(codecRequest(CollKind::kAllReduce, in, out, count_, dtype_, op), stream);
    call.wireBytes = call.denseBytes = count_ * dataTypeSize(dtype_) * (ranks - 1);
    account(call);
    ++calls_;
    return true;
  }
  // After the calls before, whatever their stream (the state is theirs); the slots (pinned
  // headers, header checks) of those that have run come back, and a check that failed there
  // raises here, as a GPU's errors come with a later call. The guard's figures of the calls
  // that have run come back too: it decides from what has run, with no wait.
  ctx.follow(static_cast<device::GpuStream>(stream));
  takeStreamSeconds(ctx);
  CodecCall call;
  call.call = calls_;
  const bool eligible = compressible(comm);
  // Too small (or a method's degenerate case): dense, with no adapt step. Else the guard's
  // decision, which on the calls it names exchanges the figures (a small all-reduce of host
  // memory); compressed where it is off.
  const bool compress = eligible && adapt(comm, nullptr, ctx, call);
  DeviceState::Timed timed;
  timed.compressed = compress;
  // GPU events cost a few microseconds a call: only the calls the guard's figures need.
  const bool timing = eligible && guardOn(comm) && guard_.timesLastCall();
  const std::function<void()> stamp = [&] {
    if (!timing) return;
    SQZ_ENFORCE(timed.stamps < kMaxStreamStamps, "a stream call of more than ",
                kMaxStreamStamps, " stamps");
    timed.at[timed.stamps++] = ctx.stamp();
  };
  placeState(ctx);
  device_->streamCalls = &ctx;
  device_->gainOnDevice = false;  // until a compressed call's encode measures one
  compressedCall_ = compress;
  try {
    const float* g = static_cast<const float*>(in);
    float* x = static_cast<float*>(out);
    if (compress) {
      stamp();
      streamCompressed(comm, g, x, op, ctx, stream, stamp, call);
    } else {  // as sqzAllReduce, of x = g + e, or of g where the residual is empty
      const bool direct = runsDirect(false);
      // A dense call's time is its run, as on the host, and its prepare where every dense call
      // needs one (DGC's momentum).
      if (!plainPrepare()) stamp();
      if (!direct) prepare(g, x, ranks, ctx);
      if (plainPrepare()) stamp();
      const void* from = direct ? in : out;
      comm.enqueueOnStream(
          codecRequest(CollKind::kAllReduce, from, x, count_, DataType::kFloat32, op), stream);
      call.wireBytes = call.denseBytes = count_ * sizeof(float) * (ranks - 1);
    }
    finish(x, ctx);
    stamp();
  } catch (...) {
    // What was enqueued still uses the state: settleStreams waits for it.
    try {
      device_->lastStreamCall = ctx.mark();
    } catch (const Error&) {
    }
    throw;
  }
  if (timing) device_->timed.push_back(timed);
  device_->lastStreamCall = ctx.mark();
  endRun(false, compress, 0, call);  // the guard's figures come from the stamps
  // A compressed call's norms stay on the device (gainOnDevice: stats reads them back), or
  // unmeasured (PowerSGD's): the statistics then keep the last gain a call measured. A dense
  // call's is 1.
  const double gain = stats_.gain;
  account(call);
  if (compress) stats_.gain = gain;
  ++calls_;
  return true;
}

CollRequest CodecHandle::codecRequest(CollKind kind, const void* in, void* out, size_t count,
                                       DataType dtype, RedOp op) const {
  CollRequest req;
  req.kind = kind;
  req.sendbuf = in;
  req.recvbuf = out;
  req.count = count;
  req.dtype = dtype;
  req.op = op;
  req.codecMethod = methodId_;  // ranks whose codecs differ are told
  req.specHash = specHash_;
  return req;
}

bool CodecHandle::runsOnStream(const device::Context& ctx) const {
  return chunk_->fixedPayload(ctx);
}

void CodecHandle::streamCompressed(CodecComm& comm, const float* g, float* x, RedOp op,
                                   device::Context& ctx, void* stream,
                                   const std::function<void()>& stamp, CodecCall& call) {
  const int ranks = comm.size();
  prepare(g, x, ranks, ctx);
  const size_t bytes = chunk_->maxEncodedBytes(count_, dtype_);
  // Slots past any a method uses for itself.
  auto* mine = static_cast<char*>(callScratch(ctx, kStreamPayloadSlot, bytes));
  ChunkInfo at;
  at.call = calls_;
  at.rank = comm.rank();
  at.ctx = &ctx;
  // The encode's norms stay on the device for stats (nothing waits for them).
  auto* sums = static_cast<double*>(callScratch(ctx, kStreamNormsSlot, 2 * sizeof(double)));
  ctx.zero(sums, 2 * sizeof(double));
  device::Norms& norms = device_->norms;
  ctx.sumsOnDevice(&norms.inputSq, &norms.sentSq, sums);
  struct Unroute {  // whatever the encode does: the context outlives the handle's scratch
    device::Context& ctx;
    device::Norms& norms;
    ~Unroute() { ctx.sumsOnDevice(&norms.inputSq, &norms.sentSq, nullptr); }
  };
  size_t wrote = 0;
  {
    const Unroute unroute{ctx, norms};
    wrote = chunk_->encodeFeedback(x, count_, dtype_, at, mine,
                                   errorFeedback_ ? stateData(residual_, ctx) : nullptr, &norms);
  }
  device_->gainOnDevice = true;
  SQZ_ENFORCE(wrote == bytes, chunk_->name(), ": a fixed payload of ", wrote, " bytes, not ",
              bytes);
  const char* all = mine;  // one rank decodes its own payload, as the host's schedule does
  if (ranks > 1) {
    auto* gathered = static_cast<char*>(callScratch(ctx, kStreamPayloadSlot + 1, bytes * ranks));
    stamp();
    comm.enqueueOnStream(
        codecRequest(CollKind::kAllGather, mine, gathered, bytes, DataType::kUint8, RedOp::kSum),
        stream);
    stamp();
    all = gathered;
  }
  for (int q = 0; q < ranks; ++q) {
    at.peer = q;
    if (q == 0)
      chunk_->decode(all, bytes, count_, dtype_, at, x);
    else
      chunk_->combine(x, x, all + q * bytes, bytes, count_, dtype_, RedOp::kSum, at);
  }
  if (op == RedOp::kAvg && ranks > 1) ctx.divide(x, count_, DataType::kFloat32, ranks);
  call.wireBytes = bytes * (ranks - 1);
  call.denseBytes = count_ * sizeof(float) * (ranks - 1);
}

bool CodecHandle::tooSmall(const CodecComm& comm) const {
  const double minBytes = spec_.minBytes ? *spec_.minBytes : double(comm.codecSettings().codecMinBytes);
  return double(count_) * dataTypeSize(dtype_) < minBytes;
}

void CodecHandle::allReduce(CodecComm& comm, const void* in, void* out, RedOp op,
                            device::Context& ctx) {
  CodecCall call;
  call.call = calls_;
  if (device_) device_->gainOnDevice = false;  // this call's gain is the host's
  if (chunk_->rawWire()) {  // dense: exactly sqzAllReduce, any datatype and op
    runChunked(comm, in, out, count_, op, *chunk_, call);
  } else {
    const bool small = tooSmall(comm);
    placeState(ctx);
    const float* g = static_cast<const float*>(in);
    float* x = static_cast<float*>(out);
    probeSeconds_ = 0;
    gradientSq_ = 0;
    if (policy_ && !small && policy_->needsGradientNorm()) {  // before prepare overwrites g
      const double t0 = nowSeconds();
      gradientSq_ = ctx.squaredNorm(g, count_);
      probeSeconds_ += nowSeconds() - t0;
      call.encodeSeconds += nowSeconds() - t0;
    }
    // Without a policy the decision needs no look at the values: it comes first, so that a dense
    // call with nothing in the residual skips prepare's pass and runs exactly as sqzAllReduce,
    // from in to out (the guard then compares a compressed call with plain dense).
    std::optional<bool> compress;
    if (small)
      compress = false;
    else if (!policy_)
      compress = adapt(comm, nullptr, ctx, call);
    // What the call costs in its mode, for the guard: a compressed call's prepare and run; a
    // dense call's run, and its prepare only where every dense call needs one (DGC): a dense
    // call after compressed ones adds the residual once, and the ones after it go direct.
    double seconds = 0;
    double t0 = nowSeconds();
    if (compress.has_value() && runsDirect(*compress)) {
      runChunked(comm, g, x, count_, op, denseCodec(), call);
    } else {
      prepare(g, x, comm.size(), ctx);
      const double prepareSeconds = nowSeconds() - t0;
      call.encodeSeconds += prepareSeconds;
      call.residual = errorFeedback_ ? stateData(residual_, ctx) : nullptr;
      if (!compress) compress = adapt(comm, x, ctx, call);
      if (*compress || !plainPrepare()) seconds += prepareSeconds;
      t0 = nowSeconds();
      // A device call's collective runs in the same context, after prepare's kernels.
      runChunked(comm, x, x, count_, op, *compress ? *chunk_ : denseCodec(), call);
    }
    if (*compress && comm.codecSettings().codecDelayUs > 0) {  // SQZ_CODEC_DELAY_US: a slower codec
      std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(
          comm.codecSettings().codecDelayUs));
      call.encodeSeconds += comm.codecSettings().codecDelayUs * 1e-6;
    }
    compressedCall_ = *compress;
    finish(x, ctx);
    ctx.wait("a compressed all-reduce's last pass on the GPU");
    endRun(!small, *compress, seconds + (nowSeconds() - t0), call);
  }
  account(call);
  ++calls_;
}

bool CodecHandle::adapt(CodecComm& comm, const float* x, device::Context& ctx,
                        CodecCall& call) {
  const double callStart = nowSeconds();
  const bool guardOn = this->guardOn(comm);
  if (!policy_ && !guardOn) return true;
  const int ranks = comm.size();
  if (policy_) {  // this call's measures, kept by the policy until the next exchange
    const double stepSeconds = lastCallStart_ > 0 ? callStart - lastCallStart_ : 0;
    lastCallStart_ = callStart;
    const size_t stride = policy_->sampleStride(count_);
    std::vector<float> sample(stride ? (count_ + stride - 1) / stride : 0);
    ctx.gatherStrided(sample.data(), x, sample.size(), stride);
    policy_->measure(gradientSq_, sample.data(), sample.size(), stride, calls_, stepSeconds);
    probeSeconds_ += nowSeconds() - callStart;
    call.encodeSeconds += nowSeconds() - callStart;
  }
  // [per mode: calls, seconds, codec seconds since the last exchange; then the policy's figures]
  constexpr size_t kOwn = 6;
  std::vector<double> figures;
  if ((policy_ && policy_->exchangesNow()) || (guardOn && guard_.syncs())) {
    figures.assign(kOwn + (policy_ ? policy_->figureCount() : 0), 0.0);
    for (int mode = 0; mode < 2; ++mode) {
      figures[3 * mode] = runs_[mode].calls;
      figures[1 + 3 * mode] = runs_[mode].seconds;
      figures[2 + 3 * mode] = runs_[mode].codecSeconds;
      runs_[mode] = RunSums{};
    }
    if (policy_) policy_->figures(figures.data() + kOwn);
    // One small dense all-reduce: every rank then holds the same figures (a rank on another
    // codec, or none, is told which, as ever).
    CollRequest req = codecRequest(CollKind::kAllReduce, figures.data(), figures.data(),
                                   figures.size(), DataType::kFloat64, RedOp::kSum);
    req.partOf = figureExchangeName_.c_str();
    comm.hostCollective(req);

    if (guardOn)
      for (int mode = 0; mode < 2; ++mode)
        if (const double n = figures[3 * mode]; n > 0) {
          PayoffGuard::Sample sample;
          sample.compressed = mode == 0;
          sample.seconds = figures[1 + 3 * mode] / n;
          sample.codecSeconds = figures[2 + 3 * mode] / n;
          guard_.record(sample, double(count_) * sizeof(float));
        }
  }
  if (policy_) {
    const double cf = policy_->decide(figures.empty() ? nullptr : figures.data() + kOwn, ranks);
    stats_.cf = cf;
    if (cf <= 1) return false;
    SQZ_ENFORCE(setDensity(1.0 / cf), "adaptive codec without a density knob");
  }
  const bool compress = !guardOn || guard_.nextCompresses();
  if (guardOn) reportGuard(compress);
  if (!compress) {
    stats_.guardDenseCalls++;
    if (policy_) stats_.cf = 1;  // the call runs dense whatever the policy chose
    return false;
  }
  return true;
}

void CodecHandle::reportGuard(bool compress) {
  // A user who asked for a codec sees when, and why, its calls go dense (SQZ_DEBUG=INFO), once
  // for the warm-up's dense calls and once for each decision that differs from the last.
  const PayoffGuard::Reason reason = guard_.lastReason();
  if (reason == PayoffGuard::Reason::kProbe) return;
  static constexpr const char* kOff =
      "auto_dense=0 in the codec's spec (or SQZ_CODEC_AUTO_DENSE=0) compresses every call";
  if (reason == PayoffGuard::Reason::kWarmup) {
    if (compress || guardToldWarmup_) return;
    guardToldWarmup_ = true;
    SQZ_INFO(kCompress, callName_, ": the pay-off guard runs this call and the 4th dense, to "
             "measure what compression saves, then sends calls dense while compressing costs "
             "more time than it saves; ", kOff, ".");
    return;
  }
  if (guardDecided_ && compress == guardCompresses_) return;
  guardDecided_ = true;
  guardCompresses_ = compress;
  const double bytes = double(count_) * sizeof(float);
  const double dense = guard_.linkDensePerByte() * bytes * 1e6;
  const double link = guard_.linkCompressedPerByte() * bytes * 1e6;
  const double codec = guard_.codecPerByte() * bytes * 1e6;
  SQZ_INFO(kCompress, callName_, ": the pay-off guard ",
           compress ? "compresses its calls" : "sends its calls dense", ": measured, a call "
           "takes ", dense, " us dense, and ", link + codec, " us compressed (", codec,
           " us of it codec work)", compress ? "" : strCat("; ", kOff),
           ". It re-measures the other mode now and then.");
}

void CodecHandle::endRun(bool adapted, bool compressed, double seconds, const CodecCall& call) {
  // A dense call leaves the residual empty (prepare moved it into x, and nothing was dropped).
  residualClear_ = !compressed || !errorFeedback_;
  if (!compressed) stats_.denseCalls++;
  if (!adapted) {  // too small: dense with no adapt step
    if (policy_) stats_.cf = 1;
    return;
  }
  RunSums& r = runs_[compressed ? 0 : 1];
  r.calls += 1;
  r.seconds += seconds;
  // The policy's probe runs whatever the mode: not part of what compressing costs.
  r.codecSeconds += call.encodeSeconds + call.combineSeconds + call.decodeSeconds - probeSeconds_;
}

void CodecHandle::account(const CodecCall& call) {
  stats_.calls++;
  stats_.wireBytes += call.wireBytes;
  stats_.denseBytes += call.denseBytes;
  stats_.lastRatio = call.wireBytes ? double(call.denseBytes) / double(call.wireBytes) : 1.0;
  stats_.gain = call.norms.inputSq > 0 ? call.norms.sentSq / call.norms.inputSq : 1.0;
  stats_.encodeSeconds += call.encodeSeconds;
  stats_.combineSeconds += call.combineSeconds;
  stats_.decodeSeconds += call.decodeSeconds;
}

CodecStats CodecHandle::stats() const {
  fetchState();
  CodecStats s = stats_;
  if (device_ && device_->gainOnDevice) {  // the call has run (fetchState's caller waited)
    double norms[2] = {};
    device_->downloads->copy(norms, scratch_[kStreamNormsSlot].memory->data(), sizeof norms);
    device_->downloads->wait("downloading a compressed call's norms from the GPU");
    s.gain = norms[0] > 0 ? norms[1] / norms[0] : 1.0;
  }
  if (policy_) {
    s.phase = policy_->phase();
    s.cfMin = policy_->cfMin();
  }
  s.linkDensePerByte = guard_.linkDensePerByte();
  s.linkCompressedPerByte = guard_.linkCompressedPerByte();
  s.codecPerByte = guard_.codecPerByte();
  double sq = 0;
  for (float v : residual_) sq += double(v) * v;
  s.residualNorm = std::sqrt(sq);
  return s;
}

// State format (native byte order; checkpoints move between runs, not architectures):
//   "SQZCODEC" u32 version u32 dtype u64 count u64 calls  u32 n + spec string
//   u32 arrays, each: u32 n + name, u64 elements, float[elements]
//   version 2: u64 n + the adaptive policy's fields (n = 0 for other methods)
// Version 1 (no policy section) still loads into a method without a policy. The pay-off guard's
// figures are not saved: they describe this run's links, and a loaded codec measures afresh.
namespace {

constexpr char kStateMagic[8] = {'S', 'Q', 'Z', 'C', 'O', 'D', 'E', 'C'};
constexpr uint32_t kStateVersion = 2;

}  // namespace

std::vector<char> CodecHandle::saveState() const {
  fetchState();
  std::vector<char> out;
  StateWriter w{out};
  w.bytes(kStateMagic, sizeof kStateMagic);
  w.pod(kStateVersion);
  w.pod(static_cast<uint32_t>(dtype_));
  w.pod(static_cast<uint64_t>(count_));
  w.pod(static_cast<uint64_t>(calls_));
  w.str(spec_.str());
  const auto arrays = stateArrays();
  w.pod(static_cast<uint32_t>(arrays.size()));
  for (auto& [name, vec] : arrays) {
    w.str(name);
    w.pod(static_cast<uint64_t>(vec->size()));
    w.bytes(vec->data(), vec->size() * sizeof(float));
  }
  const std::vector<char> policy = policy_ ? policy_->save() : std::vector<char>{};
  w.pod(static_cast<uint64_t>(policy.size()));
  w.bytes(policy.data(), policy.size());
  return out;
}

void CodecHandle::loadState(const void* data, size_t bytes) {
  fetchState();  // a bad buffer leaves the codec as it was, in host memory too
  StateReader r{static_cast<const char*>(data), bytes};
  char magic[8];
  r.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kStateMagic, sizeof magic) != 0)
    raise(ErrorCode::kInvalidArgument, "this is not a codec state (bad magic); pass a buffer "
          "written by sqzCodecSaveState.");
  const uint32_t version = r.pod<uint32_t>();
  if (version != kStateVersion && !(version == 1 && !policy_))
    raise(ErrorCode::kInvalidArgument, "codec state version ", version, " is not supported "
          "(this library reads version ", kStateVersion, policy_ ? "" : " and 1", ").");
  uint32_t dtype = r.pod<uint32_t>();
  uint64_t count = r.pod<uint64_t>();
  uint64_t calls = r.pod<uint64_t>();
  std::string spec = r.str();
  if (dtype != static_cast<uint32_t>(dtype_) || count != count_ ||
      CodecSpec::parse(spec).method != spec_.method)
    raise(ErrorCode::kInvalidArgument, "codec state is for '", spec, "' over ", count,
          " elements of type ", dtype, "; this codec is '", spec_.str(), "' over ", count_,
          " elements of type ", static_cast<int>(dtype_), ". Load it into a codec created "
          "the same way.");
  const auto arrays = stateArrays();
  uint32_t n = r.pod<uint32_t>();
  if (n != arrays.size())
    raise(ErrorCode::kInvalidArgument, "codec state has ", n, " arrays; '", spec_.method,
          "' keeps ", arrays.size(), " (was it saved with error feedback set differently?)");
  // Read into temporaries first: a bad buffer leaves the codec as it was.
  std::vector<std::vector<float>> loaded(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::string name = r.str();
    uint64_t len = r.pod<uint64_t>();
    if (name != arrays[i].first || len != arrays[i].second->size())
      raise(ErrorCode::kInvalidArgument, "codec state array ", i, " is '", name, "' of ", len,
            " values; expected '", arrays[i].first, "' of ", arrays[i].second->size(), ".");
    loaded[i].resize(len);
    r.bytes(loaded[i].data(), len * sizeof(float));
  }
  std::vector<char> policy;
  if (version >= 2) {
    const uint64_t len = r.pod<uint64_t>();
    r.need(len);
    policy.assign(r.p, r.p + len);
    r.bytes(policy.data(), len);
  }
  if (r.left != 0)
    raise(ErrorCode::kInvalidArgument, "codec state has ", r.left, " trailing bytes.");
  if (policy_) {
    policy_->load(policy.data(), policy.size());  // checks; the last step that can fail
  } else if (!policy.empty()) {
    raise(ErrorCode::kInvalidArgument, "codec state has an adaptive method's section; '",
          spec_.method, "' has none. Load it into a codec created the same way.");
  }
  for (uint32_t i = 0; i < n; ++i) *arrays[i].second = std::move(loaded[i]);
  guard_ = PayoffGuard{};
  residualClear_ = false;  // whatever the loaded residual holds: the next call adds it
  runs_[0] = runs_[1] = RunSums{};
  lastCallStart_ = 0;
  if (device_) {
    device_->current = DeviceState::Current::kHost;  // the next device call uploads
    device_->gainOnDevice = false;
  }
  calls_ = calls;
  stats_ = CodecStats{};
}

}  // namespace squeeze
