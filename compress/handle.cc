// CodecHandle (see handle.h): the compressed call's frame around the schedule, statistics, and
// the state's byte format.
#include "compress/handle.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/sha256.h"
#include "common/strings.h"
#include "compress/codecs.h"
#include "core/communicator.h"
#include "device/handle_kernels.h"
#include "device/memory.h"
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include "device/cuda/runtime.h"
#endif

namespace squeeze {

// The device mirror of a handle's state (handle.h, "State on the device").
#if SQZ_HAVE_CUDA
struct CodecHandle::DeviceState {
  enum class Current { kHost, kDevice, kBoth };  // which copy holds the state
  int device = -1;                               // the GPU the buffers are on
  Current current = Current::kHost;
  std::vector<cuda::DeviceBuffer> arrays;   // by stateArrays() index
  std::vector<cuda::DeviceBuffer> scratch;  // deviceScratch's slots
  // fetchState's downloads: a non-blocking stream of the handle's own, so a download waits for
  // nothing else on the device (the legacy default stream would wait for the caller's streams).
  std::unique_ptr<cuda::Stream> downloads;
};
#else
struct CodecHandle::DeviceState {};
#endif

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
  const bool lossy = !chunk_ || !chunk_->rawWire();
  errorFeedback_ = lossy && spec_.get("ef", 1, 0, 1) != 0;
  if (errorFeedback_) residual_.assign(count_, 0.0f);
}

CodecHandle::~CodecHandle() {
#if SQZ_HAVE_CUDA
  if (device_) {
    try {
      cuda::DeviceGuard guard(device_->device);
      device_.reset();
    } catch (const Error&) {  // no device to switch to: free from where we are
      device_.reset();
    }
  }
#endif
}

std::vector<std::pair<std::string, std::vector<float>*>> CodecHandle::stateArrays() const {
  auto arrays = const_cast<CodecHandle*>(this)->extraState();
  arrays.insert(arrays.begin(), {"residual", const_cast<std::vector<float>*>(&residual_)});
  return arrays;
}

void CodecHandle::placeState(device::GpuStream stream) {
  if (!stream) {
    fetchState();
#if SQZ_HAVE_CUDA
    if (device_) device_->current = DeviceState::Current::kHost;
#endif
    return;
  }
#if SQZ_HAVE_CUDA
  using Current = DeviceState::Current;
  const int dev = cuda::streamDevice(stream);
  if (device_ && device_->device != dev) {  // another GPU: move the state over through the host
    fetchState();
    cuda::DeviceGuard guard(device_->device);
    device_.reset();
  }
  cuda::DeviceGuard guard(dev);
  if (!device_) {
    device_ = std::make_unique<DeviceState>();
    device_->device = dev;
    device_->downloads = std::make_unique<cuda::Stream>();
  }
  DeviceState& d = *device_;
  const auto arrays = stateArrays();
  d.arrays.resize(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    const size_t bytes = arrays[i].second->size() * sizeof(float);
    if (d.arrays[i].size() < bytes) {  // first use (sizes are fixed): nothing to keep
      SQZ_ENFORCE(d.current == Current::kHost, "codec state array ", arrays[i].first,
                  " grew while its device copy was the current one");
      d.arrays[i].reserve(bytes);
    }
  }
  if (d.current == Current::kHost)
    for (size_t i = 0; i < arrays.size(); ++i) {
      const size_t bytes = arrays[i].second->size() * sizeof(float);
      if (bytes)
        cuda::check(cudaMemcpyAsync(d.arrays[i].data(), arrays[i].second->data(), bytes,
                                    cudaMemcpyHostToDevice, stream),
                    "uploading codec state to the GPU");
    }
  d.current = Current::kDevice;
#else
  SQZ_ENFORCE(stream == nullptr, "a codec call on device buffers in a build without CUDA");
#endif
}

void CodecHandle::fetchState() const {
#if SQZ_HAVE_CUDA
  if (!device_ || device_->current != DeviceState::Current::kDevice) return;
  // The device call that wrote the state synchronized its stream before it returned.
  cuda::DeviceGuard guard(device_->device);
  const cudaStream_t stream = device_->downloads->get();
  const auto arrays = stateArrays();
  for (size_t i = 0; i < arrays.size(); ++i) {
    const size_t bytes = arrays[i].second->size() * sizeof(float);
    if (bytes)
      cuda::check(cudaMemcpyAsync(arrays[i].second->data(), device_->arrays[i].data(), bytes,
                                  cudaMemcpyDeviceToHost, stream),
                  "downloading codec state from the GPU");
  }
  device_->downloads->synchronize("downloading codec state from the GPU");
  device_->current = DeviceState::Current::kBoth;
#endif
}

float* CodecHandle::stateData(std::vector<float>& array, device::GpuStream stream) {
  if (!stream) return array.data();
#if SQZ_HAVE_CUDA
  SQZ_ENFORCE(device_ && device_->current == DeviceState::Current::kDevice,
              "codec state used on the GPU before placeState");
  const auto arrays = stateArrays();
  for (size_t i = 0; i < arrays.size(); ++i)
    if (arrays[i].second == &array) return static_cast<float*>(device_->arrays[i].data());
  raise(ErrorCode::kInternal, "stateData: an array that is not part of the codec's state");
#else
  raise(ErrorCode::kInternal, "codec state on the GPU in a build without CUDA");
#endif
}

void CodecHandle::clearState(std::vector<float>& array, device::GpuStream stream) {
#if SQZ_HAVE_CUDA
  if (stream) {
    if (!array.empty())
      cuda::check(cudaMemsetAsync(stateData(array, stream), 0, array.size() * sizeof(float),
                                  stream),
                  "clearing codec state on the GPU");
    return;
  }
#else
  (void)stream;
#endif
  std::fill(array.begin(), array.end(), 0.0f);
}

void* CodecHandle::deviceScratch(int slot, size_t bytes) {
#if SQZ_HAVE_CUDA
  SQZ_ENFORCE(device_, "device scratch before placeState");
  if (device_->scratch.size() <= static_cast<size_t>(slot)) device_->scratch.resize(slot + 1);
  if (device_->scratch[slot].size() < bytes) {
    cuda::DeviceGuard guard(device_->device);
    device_->scratch[slot].reserve(bytes);
  }
  return device_->scratch[slot].data();
#else
  (void)slot;
  (void)bytes;
  raise(ErrorCode::kInternal, "device scratch in a build without CUDA");
#endif
}

void CodecHandle::synchronize(device::GpuStream stream, const char* what) {
  device::syncStream(stream, what);
}

void CodecHandle::prepare(const float* g, float* x, int, device::GpuStream stream) {
  if (errorFeedback_) {
    float* e = stateData(residual_, stream);
#if SQZ_HAVE_CUDA
    if (stream) {
      device::gpuAddResidual(g, e, x, count_, stream);
      return;
    }
#endif
    for (size_t i = 0; i < count_; ++i) {
      const float xi = device::withResidual(g[i], e[i]);
      e[i] = 0.0f;
      x[i] = xi;
    }
  } else if (x != g) {
    ChunkInfo at;
    at.stream = stream;
    copyPayload(x, g, count_ * sizeof(float), at);
  }
}

void CodecHandle::runChunked(Communicator& comm, const void* in, void* out, size_t count, RedOp op,
                             Codec& codec, CodecCall& call) {
  CollRequest req;
  req.kind = CollKind::kAllReduce;
  req.sendbuf = in;
  req.recvbuf = out;
  req.count = count;
  req.dtype = dtype_;
  req.op = op;
  req.codec = &codec;
  req.codecCall = &call;
  req.codecMethod = methodId_;
  req.specHash = specHash_;
  comm.collective(req);
}

void CodecHandle::allReduce(Communicator& comm, const void* in, void* out, RedOp op,
                            device::GpuStream stream) {
  CodecCall call;
  call.call = calls_;
  if (chunk_->rawWire()) {  // dense: exactly sqzAllReduce, any datatype and op
    runChunked(comm, in, out, count_, op, *chunk_, call);
  } else {
    placeState(stream);
    float* x = static_cast<float*>(out);
    prepare(static_cast<const float*>(in), x, comm.size(), stream);
    call.residual = errorFeedback_ ? stateData(residual_, stream) : nullptr;
    const double minBytes = spec_.minBytes ? *spec_.minBytes : double(comm.config().codecMinBytes);
    const bool tooSmall = double(count_) * dataTypeSize(dtype_) < minBytes;
    // A device call's collective runs on the same stream, after prepare's kernels.
    runChunked(comm, x, x, count_, op, tooSmall ? denseCodec() : *chunk_, call);
    finish(x, stream);
    synchronize(stream, "a compressed all-reduce's last pass on the GPU");
  }
  account(call);
  ++calls_;
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
  double sq = 0;
  for (float v : residual_) sq += double(v) * v;
  s.residualNorm = std::sqrt(sq);
  return s;
}

// State format (native byte order; checkpoints move between runs, not architectures):
//   "SQZCODEC" u32 version u32 dtype u64 count u64 calls  u32 n + spec string
//   u32 arrays, each: u32 n + name, u64 elements, float[elements]
namespace {

constexpr char kStateMagic[8] = {'S', 'Q', 'Z', 'C', 'O', 'D', 'E', 'C'};
constexpr uint32_t kStateVersion = 1;

struct Writer {
  std::vector<char>& out;
  void bytes(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  }
  template <class T>
  void pod(T v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    pod(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
};

struct Reader {
  const char* p;
  size_t left;
  void need(size_t n) const {
    if (n > left)
      raise(ErrorCode::kInvalidArgument, "codec state is truncated: ", n, " more bytes needed, ",
            left, " left. Pass the whole buffer sqzCodecSaveState wrote.");
  }
  void bytes(void* dst, size_t n) {
    need(n);
    if (n == 0) return;  // dst may be an empty array's null data()
    std::memcpy(dst, p, n);
    p += n;
    left -= n;
  }
  template <class T>
  T pod() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  std::string str() {
    uint32_t n = pod<uint32_t>();
    need(n);
    std::string s(p, n);
    p += n;
    left -= n;
    return s;
  }
};

}  // namespace

std::vector<char> CodecHandle::saveState() const {
  fetchState();
  std::vector<char> out;
  Writer w{out};
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
  return out;
}

void CodecHandle::loadState(const void* data, size_t bytes) {
  fetchState();  // a bad buffer leaves the codec as it was, in host memory too
  Reader r{static_cast<const char*>(data), bytes};
  char magic[8];
  r.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kStateMagic, sizeof magic) != 0)
    raise(ErrorCode::kInvalidArgument, "this is not a codec state (bad magic); pass a buffer "
          "written by sqzCodecSaveState.");
  if (uint32_t v = r.pod<uint32_t>(); v != kStateVersion)
    raise(ErrorCode::kInvalidArgument, "codec state version ", v, " is not supported (this "
          "library reads version ", kStateVersion, ").");
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
  if (r.left != 0)
    raise(ErrorCode::kInvalidArgument, "codec state has ", r.left, " trailing bytes.");
  for (uint32_t i = 0; i < n; ++i) *arrays[i].second = std::move(loaded[i]);
#if SQZ_HAVE_CUDA
  if (device_) device_->current = DeviceState::Current::kHost;  // the next device call uploads
#endif
  calls_ = calls;
  stats_ = CodecStats{};
}

}  // namespace squeeze
