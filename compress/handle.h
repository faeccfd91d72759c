// CodecHandle: what sqzCodec_t points at. It belongs to one tensor (count elements of one
// datatype, on one communicator) and carries that tensor's state across calls (DESIGN.md,
// "Codec state and error feedback"): the error-feedback residual, the call number, statistics,
// and whatever a method adds (DGC's momentum, PowerSGD's Q).
//
// One compressed all-reduce, for chunk codecs:
//   prepare   x = g + e into recvbuf, e = 0 (a method may change this: DGC's momentum)
//   run       the tuner's algorithm, in place on recvbuf, with the chunk codec and a CodecCall
//             whose residual receives what every encode on this rank drops
//   finish    statistics; method hooks (DGC's momentum factor masking)
// Composite methods (PowerSGD) override allReduce and call the communicator's dense all-reduce.
//
// State on the device. The host vectors (residual_ and what extraState lists) are the state's
// home: saveState, loadState and stats read and write them. A call on device buffers runs on a
// device mirror of every state array (one device buffer each, on the stream's GPU): placeState
// uploads the arrays whose host copy is newer, and marks the device copy the current one; a host
// call, stats, saveState and loadState first download what the device holds newer (fetchState).
// Between calls of the same kind nothing moves. Methods reach the copy a call runs on through
// stateData, and device scratch of their own (DGC's mask, PowerSGD's P) through deviceScratch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/spec.h"
#include "core/types.h"

namespace squeeze {

class Communicator;

struct CodecStats {
  uint64_t calls = 0;
  uint64_t wireBytes = 0;
  uint64_t denseBytes = 0;
  double gain = 0;          // last call
  double residualNorm = 0;  // after the last call
  double encodeSeconds = 0, combineSeconds = 0, decodeSeconds = 0;
  double lastRatio = 0;
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
  // stream: null for host buffers; for device buffers, the communicator's internal stream (the
  // call then runs on its progress thread, core/device_queue.h): every pass runs on the GPU
  // (the chunk codec's kernels, and the handle's own on the state's device mirror), and the
  // stream is synchronized before the call returns.
  virtual void allReduce(Communicator& comm, const void* in, void* out, RedOp op,
                         device::GpuStream stream = nullptr);

  // The state as bytes (checkpoint) and back; load checks method, count and datatype.
  std::vector<char> saveState() const;
  void loadState(const void* data, size_t bytes);

 protected:
  // x = g + residual (when error feedback is on), residual = 0. x may alias g. stream: the
  // device call's stream (g, x and the state are then device memory), or null.
  virtual void prepare(const float* g, float* x, int nranks, device::GpuStream stream);
  // After a call's schedule ran; out holds the result.
  virtual void finish(float* out, device::GpuStream stream) {
    (void)out;
    (void)stream;
  }
  // Arrays saved and loaded with the state, beyond the residual (e.g. DGC's momentum), each
  // mirrored on the device for device calls.
  virtual std::vector<std::pair<std::string, std::vector<float>*>> extraState() { return {}; }

  // Before a call's passes: makes the copy of the state the call runs on current (the host
  // vectors for stream null, else the device mirror on the stream's GPU, uploading what is
  // stale there) and the only current one from then on (the call changes it).
  void placeState(device::GpuStream stream);
  // The host vectors hold the state (downloads what the device holds newer; both stay current).
  void fetchState() const;
  // Where `array` (residual_ or one of extraState's) lives for the call placeState placed: its
  // host data, or its device mirror.
  float* stateData(std::vector<float>& array, device::GpuStream stream);
  // array = 0 where the call runs (host, or the device mirror on the stream).
  void clearState(std::vector<float>& array, device::GpuStream stream);
  // Device memory of at least `bytes` owned by the handle (slot: 0, 1, ...; contents are kept
  // between calls only while the size does not grow). Device calls only.
  void* deviceScratch(int slot, size_t bytes);
  // Waits for the work enqueued on a device call's stream (nothing for null).
  static void synchronize(device::GpuStream stream, const char* what);
  // Runs the tuner's all-reduce of count values of dtype_ over comm with `codec`, filling call.
  void runChunked(Communicator& comm, const void* in, void* out, size_t count, RedOp op,
                  Codec& codec, CodecCall& call);
  // Adds a call's figures to the statistics.
  void account(const CodecCall& call);

  CodecSpec spec_;
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

 private:
  // The state arrays, residual first (empty ones included), as saved.
  std::vector<std::pair<std::string, std::vector<float>*>> stateArrays() const;
  struct DeviceState;  // the device mirror (handle.cc); null until the first device call
  mutable std::unique_ptr<DeviceState> device_;
};

// Builds the handle for a spec (registry.cc: one line per method). Throws kInvalidArgument
// naming what is wrong (unknown method or key, value out of range, wrong datatype).
std::unique_ptr<CodecHandle> createCodecHandle(const CodecSpec& spec, size_t count,
                                               DataType dtype);

// "name - description" per method, for sqz-info and error messages.
std::string codecMethodList();

}  // namespace squeeze
