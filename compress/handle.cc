// CodecHandle (see handle.h): the compressed call's frame around the schedule, statistics, and
// the state's byte format.
#include "compress/handle.h"

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/sha256.h"
#include "common/strings.h"
#include "compress/codecs.h"
#include "core/communicator.h"

namespace squeeze {

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

void CodecHandle::prepare(const float* g, float* x, int) {
  if (errorFeedback_) {
    float* e = residual_.data();
    for (size_t i = 0; i < count_; ++i) {
      x[i] = g[i] + e[i];
      e[i] = 0.0f;
    }
  } else if (x != g) {
    std::memcpy(x, g, count_ * sizeof(float));
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

void CodecHandle::allReduce(Communicator& comm, const void* in, void* out, RedOp op) {
  CodecCall call;
  call.call = calls_;
  if (chunk_->rawWire()) {  // dense: exactly sqzAllReduce, any datatype and op
    runChunked(comm, in, out, count_, op, *chunk_, call);
  } else {
    float* x = static_cast<float*>(out);
    prepare(static_cast<const float*>(in), x, comm.size());
    call.residual = errorFeedback_ ? residual_.data() : nullptr;
    const double minBytes = spec_.minBytes ? *spec_.minBytes : double(comm.config().codecMinBytes);
    const bool tooSmall = double(count_) * dataTypeSize(dtype_) < minBytes;
    runChunked(comm, x, x, count_, op, tooSmall ? denseCodec() : *chunk_, call);
    finish(x);
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
  std::vector<char> out;
  Writer w{out};
  w.bytes(kStateMagic, sizeof kStateMagic);
  w.pod(kStateVersion);
  w.pod(static_cast<uint32_t>(dtype_));
  w.pod(static_cast<uint64_t>(count_));
  w.pod(static_cast<uint64_t>(calls_));
  w.str(spec_.str());
  auto arrays = const_cast<CodecHandle*>(this)->extraState();
  arrays.insert(arrays.begin(), {"residual", const_cast<std::vector<float>*>(&residual_)});
  w.pod(static_cast<uint32_t>(arrays.size()));
  for (auto& [name, vec] : arrays) {
    w.str(name);
    w.pod(static_cast<uint64_t>(vec->size()));
    w.bytes(vec->data(), vec->size() * sizeof(float));
  }
  return out;
}

void CodecHandle::loadState(const void* data, size_t bytes) {
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
  auto arrays = extraState();
  arrays.insert(arrays.begin(), {"residual", &residual_});
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
  calls_ = calls;
  stats_ = CodecStats{};
}

}  // namespace squeeze
