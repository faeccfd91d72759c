// CodecHandle: what sqzCodec_t points at. It belongs to one tensor (count elements of one
// datatype, on one communicator) and carries that tensor's state across calls (DESIGN.md,
// "Codec state and error feedback"): the error-feedback residual, the call number, statistics,
// and whatever a method adds (DGC's momentum, PowerSGD's Q).
//
// One compressed all-reduce, for chunk codecs:
//   prepare   x = g + e into recvbuf, e = 0 (a method may change this: DGC's momentum)
//   adapt     (tensors of min_bytes and more) figures the ranks agree on, summed by one small
//             all-reduce on the calls that need them: an adaptive method's policy (GraVAC, once
//             per window; Accordion, every call: adaptive.cc) picks the CF, and the pay-off
//             guard (payoff_guard.h, auto_dense; on the calls syncs() names) whether
//             compressing pays.
//             Without a policy it comes before prepare: a dense call with an empty residual then
//             skips prepare and runs from in to out
//   run       the tuner's algorithm, in place on recvbuf, with the chunk codec (or dense) and a
//             CodecCall whose residual receives what every encode on this rank drops
//   finish    statistics; method hooks (DGC's momentum factor masking)
// Composite methods (PowerSGD) override allReduce and call the communicator's dense all-reduce.
//
// State on the device. The host vectors (residual_ and what extraState lists) are the state's
// home: saveState, loadState and stats read and write them. A call on device buffers runs on a
// device mirror of every state array (one device buffer each, on the context's GPU): placeState
// uploads the arrays whose host copy is newer, and marks the device copy the current one; a host
// call, stats, saveState and loadState first download what the device holds newer (fetchState).
// Between calls of the same kind nothing moves. Methods reach the copy a call runs on through
// stateData, and scratch of their own where the call runs (DGC's mask, PowerSGD's P) through
// callScratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/types.h"
#include "compress/codec.h"
#include "compress/codec_comm.h"
#include "compress/payoff_guard.h"
#include "compress/spec.h"

namespace squeeze {


// What an adaptive method (gravac, accordion) is doing, for the stats.
enum class AdaptivePhase : int {
  kStatic = 0,     // not an adaptive method
  kExploring = 1,  // GraVAC: evaluating candidate CFs
  kSettled = 2,    // GraVAC: every candidate evaluated, a CF chosen
  kCritical = 3,   // Accordion: critical regime, low CF
  kStable = 4,     // Accordion: stable regime, high CF
};

// An adaptive method's policy as the handle drives it on each call (adaptive.cc holds GraVAC's and
// Accordion's). Figures are what this rank measured, kept by the policy until an exchange sums
// them over the ranks; decisions read only summed figures, so every rank decides the same. The
// handle does the measuring where the call's memory is (host or GPU), so a policy sees host
// numbers only: the gradient's squared norm, and a strided sample of x = g + e (the whole of x
// for small tensors).
class AdaptivePolicy {
 public:
  virtual ~AdaptivePolicy() = default;
  virtual size_t figureCount() const = 0;
  // |g|^2 of the gradient as passed, before error feedback (Accordion's).
  virtual bool needsGradientNorm() const { return false; }
  // The stride of the sample of x it reads (1: every value; 0: none).
  virtual size_t sampleStride(size_t n) const {
    (void)n;
    return 0;
  }
  // This rank's measures of this call (the codec's call number), added to its figures since the
  // last exchange: |g|^2 (0 unless asked), the sample x[0], x[stride], ... (m values, host
  // memory), and the seconds from this rank's previous call's start to this one's (0: not known).
  virtual void measure(double gradientSq, const float* sample, size_t m, size_t stride,
                       uint64_t call, double stepSeconds) = 0;
  // Whether this call's decision needs the figures summed over the ranks now (GraVAC: at a
  // window's end; Accordion: every call). The handle also exchanges when the guard needs to.
  virtual bool exchangesNow() const = 0;
  // This rank's figures since the last exchange (figureCount doubles), for the exchange.
  virtual void figures(double* out) const = 0;
  // The CF of this call (1: dense). summed: when this call exchanged, the figures summed over
  // nranks ranks (the policy then drops its own, now counted); else null.
  virtual double decide(const double* summed, int nranks) = 0;
  virtual AdaptivePhase phase() const = 0;
  virtual double cfMin() const { return 0; }  // GraVAC's current lower CF
  virtual std::vector<char> save() const = 0;
  virtual void load(const char* data, size_t bytes) = 0;  // all or nothing
};

struct CodecStats {
  uint64_t calls = 0;
  uint64_t wireBytes = 0;
  uint64_t denseBytes = 0;
  double gain = 0;          // last call
  double residualNorm = 0;  // after the last call
  double encodeSeconds = 0, combineSeconds = 0, decodeSeconds = 0;
  double lastRatio = 0;
  // Adaptive methods: the CF the last call used (1: dense; 0 for static methods), the phase, and
  // GraVAC's current lower CF.
  double cf = 0;
  AdaptivePhase phase = AdaptivePhase::kStatic;
  double cfMin = 0;
  uint64_t denseCalls = 0;       // calls that ran dense: too small, the policy's or the guard's
  uint64_t guardDenseCalls = 0;  // of which the pay-off guard's
  // The guard's figures, seconds per tensor byte (0: not measured).
  double linkDensePerByte = 0, linkCompressedPerByte = 0, codecPerByte = 0;
};

class CodecHandle {
 public:
  CodecHandle(const CodecSpec& spec, size_t count, DataType dtype, std::unique_ptr<Codec> chunk);
  virtual ~CodecHandle();
  CodecHandle(const CodecHandle&) = delete;
  CodecHandle& operator=(const CodecHandle&) = delete;

  const CodecSpec& spec() const { return spec_; }
  size_t count() const { return count_; }
  DataType dtype() const { return dtype_; }
  // The residual's norm is computed here, when asked, not after every call: it is a pass over
  // the whole tensor that would otherwise cost as much as the encode. After device calls it
  // downloads the state first (the caller has waited for them: the API's settle).
  CodecStats stats() const;
  bool errorFeedback() const { return errorFeedback_; }
  // The chunk codec the schedule runs (for benchmarks). A composite method (PowerSGD) overrides
  // allReduce and holds the dense codec of its inner all-reduces here, not its compression.
  Codec* chunkCodec() const { return chunk_.get(); }

  // One compressed all-reduce of in (count values) into out; op is sum or avg. Collective.
  // ctx: the call's execution context, the host's for host buffers (a staged device call runs
  // here on host copies, device/call_queue.h); on a CUDA context every pass runs on the GPU (the
  // chunk codec's kernels, and the handle's own on the state's device mirror), and the work is
  // done when the call returns. A device call on one host may run on its stream instead
  // (enqueueOnStream).
  virtual void allReduce(CodecComm& comm, const void* in, void* out, RedOp op,
                         device::Context& ctx = device::hostContext());

  // A call on device buffers whose every pass runs on the caller's stream alone, where the
  // communicator exchanges on the stream (ranks that share one host, or one rank alone:
  // CodecComm::streamContext): a method that runsOnStream (a chunk codec with a fixed payload
  // size, Codec::fixedPayload, whose prepare and finish read nothing back to the host; or
  // PowerSGD), no adaptive policy, no SQZ_CODEC_DELAY_US. The dense method is exactly
  // sqzAllReduce there. A compressed call (streamCompressed): x = g + e into out
  // (prepare), the codec's encode with feedback of the whole tensor (ChunkInfo::call the call
  // number, rank this rank's, offset 0), an all-gather of every rank's payload on the stream,
  // out = the payloads decoded and added in rank order (decode of rank 0's, combine of each
  // next), divided for avg, then finish: the same bits on every rank, and no byte through the
  // host. One rank decodes its own payload (as the host's one-rank schedule keeps the payload's
  // values). A dense call (not compressible, or the pay-off guard's choice): the stream's dense
  // all-reduce of x = g + e (or of in where the residual is empty and prepare is plain; one
  // rank: a copy), then finish. The guard decides as
  // on the host, from figures the ranks exchange on the calls it names (a small all-reduce of
  // host memory), but a call's times come from GPU events (Context::stamp) read, without a wait,
  // at a later call once they have run. Returns at once (true), or false with nothing enqueued
  // where the call does not qualify.
  bool enqueueOnStream(CodecComm& comm, const void* in, void* out, RedOp op, void* stream);
  // Waits until the calls enqueueOnStream enqueued through comm have run (their state is theirs
  // until then), and takes their times for the guard.
  void settleStreams(CodecComm& comm);

  // The state as bytes (checkpoint) and back; load checks method, count and datatype.
  std::vector<char> saveState() const;
  void loadState(const void* data, size_t bytes);

  // The sparsifier's strength: the fraction of values sent from the next call on. False when the
  // method has no such knob (adaptive methods need one: topk, randk, dgc).
  virtual bool setDensity(double ratio) { return chunk_ && chunk_->setRatio(ratio); }
  // Makes this handle the adaptive method `outer` (its spec, header id and hash) driven by
  // policy (adaptive.cc, after building the base method's handle).
  void adopt(const CodecSpec& outer, std::unique_ptr<AdaptivePolicy> policy);

 protected:
  // x = g + residual (when error feedback is on), residual = 0. x may alias g; g, x and the
  // state are in ctx's memory.
  virtual void prepare(const float* g, float* x, int nranks, device::Context& ctx);
  // True when prepare is this class's x = g + e and finish does nothing: a dense call with an
  // empty residual may then skip both and run from in to out (DGC's momentum needs both).
  virtual bool plainPrepare() const { return true; }
  // After a call's schedule ran; out holds the result. compressedCall_ says whether it ran
  // through the codec (false: dense, every value sent in full).
  virtual void finish(float* out, device::Context& ctx) {
    (void)out;
    (void)ctx;
  }
  // Arrays saved and loaded with the state, beyond the residual (e.g. DGC's momentum), each
  // mirrored on the device for device calls.
  virtual std::vector<std::pair<std::string, std::vector<float>*>> extraState() { return {}; }

  // Before a call's passes: makes the copy of the state the call runs on current (the host
  // vectors for a host context, else the device mirror on the context's GPU, uploading what is
  // stale there) and the only current one from then on (the call changes it).
  void placeState(device::Context& ctx);
  // The host vectors hold the state (downloads what the device holds newer; both stay current).
  void fetchState() const;
  // Where `array` (residual_ or one of extraState's) lives for the call placeState placed: its
  // host data, or its device mirror.
  float* stateData(std::vector<float>& array, device::Context& ctx);
  // array = 0 where the call runs (host, or the device mirror).
  void clearState(std::vector<float>& array, device::Context& ctx);
  // Memory of at least `bytes` in ctx's space owned by the handle (slot: 0, 1, ...; contents
  // are kept between calls only while the size and the space stay).
  void* callScratch(device::Context& ctx, int slot, size_t bytes);
  // enqueueOnStream's two (this rank's payload, every rank's) and its encode's norms on the
  // device: past the slots methods use.
  static constexpr int kStreamPayloadSlot = 8;
  static constexpr int kStreamNormsSlot = 10;
  // What enqueueOnStream asks of a method. runsOnStream: whether its device calls may run on the
  // caller's stream in ctx (here: a chunk codec whose payload has a fixed size; prepare and finish
  // must read nothing back to the host). compressible: whether this call has an adapt step (else it
  // runs dense; here: min_bytes). streamCompressed: a compressed call's work between the adapt step
  // and finish (here: prepare, the encode, on ranks > 1 the all-gather of every rank's payload,
  // and each payload decoded and added in rank order, divided for avg), calling stamp()
  // between its codec work and each exchange (at most kMaxStreamStamps - 2 times: the call's start
  // and end are stamped around it), so that the guard counts the intervals before, between and
  // after the exchanges as codec time.
  virtual bool runsOnStream(const device::Context& ctx) const;
  virtual bool compressible(const CodecComm& comm) const { return !tooSmall(comm); }
  virtual void streamCompressed(CodecComm& comm, const float* g, float* x, RedOp op,
                                device::Context& ctx, void* stream,
                                const std::function<void()>& stamp, CodecCall& call);
  static constexpr size_t kMaxStreamStamps = 6;
  // A collective of this handle's call (its schedule, the figures' exchange, a stream call's),
  // carrying the codec's method and spec hash so ranks whose codecs differ are told.
  CollRequest codecRequest(CollKind kind, const void* in, void* out, size_t count,
                           DataType dtype, RedOp op) const;
  // The times of the stream calls whose stamps have run, into runs_ (the guard's next figures).
  void takeStreamSeconds(device::Context& ctx);
  // Runs the tuner's all-reduce of count values of dtype_ over comm with `codec`, filling call.
  void runChunked(CodecComm& comm, const void* in, void* out, size_t count, RedOp op,
                  Codec& codec, CodecCall& call);
  // Adds a call's figures to the statistics.
  void account(const CodecCall& call);
  // The adapt step (see the top): x is the call's input after prepare (gradientSq_ holds the
  // gradient's norm from before it, when the policy asked); without a policy x is not read and
  // may be null (the call decides before prepare). Sets the base's density and returns whether
  // the call compresses; false: it runs dense. Only for tensors of min_bytes and more.
  bool adapt(CodecComm& comm, const float* x, device::Context& ctx, CodecCall& call);
  // An INFO line when the guard first sends calls dense, and when its decision changes.
  void reportGuard(bool compress);
  // Whether a call that runs dense (!compress) may skip prepare and run from in to out: its
  // residual is empty and prepare is the plain x = g + e.
  bool runsDirect(bool compress) const { return !compress && residualClear_ && plainPrepare(); }
  // After a call's run step: whether the residual is empty now, the dense-call counts, and for a
  // call that had an adapt step (adapted) its time, for the guard's next decision.
  void endRun(bool adapted, bool compressed, double seconds, const CodecCall& call);
  // Whether this call's tensor is under min_bytes (it then travels dense, with no adapt step).
  bool tooSmall(const CodecComm& comm) const;
  // Whether the pay-off guard decides this handle's calls (a lossy method, auto_dense on).
  bool guardOn(const CodecComm& comm) const;

  CodecSpec spec_;
  // What the pay-off guard has told the log (reportGuard).
  bool guardToldWarmup_ = false, guardDecided_ = false, guardCompresses_ = true;
  std::string callName_;  // "sqzAllReduceCompressed of 4096 float with codec int8", for logs
  std::string figureExchangeName_;  // its exchange of figures, for CollRequest::partOf
  size_t count_;
  DataType dtype_;
  std::unique_ptr<Codec> chunk_;
  bool errorFeedback_;
  std::vector<float> residual_;  // error feedback; empty when off
  uint64_t calls_ = 0;
  // Carried in every call's message headers, so ranks whose codecs differ are told so.
  uint8_t methodId_ = 0;
  uint32_t specHash_ = 0;
  CodecStats stats_;
  std::unique_ptr<AdaptivePolicy> policy_;  // adaptive methods only
  bool autoDense_ = false;                  // the pay-off guard (lossy methods)
  bool compressedCall_ = true;              // the current call's run step (for finish)
  bool residualClear_ = true;               // the residual is all zero (as created; after dense)
  PayoffGuard guard_;
  // This rank's run steps since the figures were last exchanged, per mode (0: compressed, 1:
  // dense); the guard gets their means over the ranks at the next exchange.
  struct RunSums {
    double calls = 0, seconds = 0, codecSeconds = 0;
  } runs_[2];
  double lastCallStart_ = 0;  // steady-clock seconds at the previous adapt step (0: none yet)
  double gradientSq_ = 0;     // this call's |g|^2, for a policy that asks
  double probeSeconds_ = 0;   // this call's time measuring for the policy (counted as encode time)

 private:
  // The state arrays, residual first (empty ones included), as saved.
  std::vector<std::pair<std::string, std::vector<float>*>> stateArrays() const;
  struct DeviceState;  // the device mirror (handle.cc); null until the first device call
  mutable std::unique_ptr<DeviceState> device_;
  struct Scratch {
    device::Space space;
    std::unique_ptr<device::Allocation> memory;
  };
  std::vector<Scratch> scratch_;  // callScratch's slots
};

// Builds the handle for a spec (registry.cc: one line per method). Throws kInvalidArgument
// naming what is wrong (unknown method or key, value out of range, wrong datatype).
std::unique_ptr<CodecHandle> createCodecHandle(const CodecSpec& spec, size_t count,
                                               DataType dtype);

// "name - description" per method, for sqz-info and error messages.
std::string codecMethodList();

}  // namespace squeeze
