// squeeze.Codec: one sqzCodec_t (a compressor with its error-feedback state, for one tensor),
// its compressed all-reduce, statistics, and state as a state_dict for checkpoints.
#include "codec.h"

#include <string>

#include "buffers.h"
#include "ops.h"

namespace squeeze::python {

using namespace pybind11::literals;

Codec::Codec(std::string spec, long long count, const py::object& dtype, py::object comm)
    : commObj_(std::move(comm)), spec_(std::move(spec)) {
  if (!py::isinstance<Comm>(commObj_))
    raiseInvalidArgument("Codec: comm must be a squeeze.Comm, not ",
                         py::repr(commObj_).cast<std::string>());
  if (count < 0) raiseInvalidArgument("Codec: count is ", count, "; it must be >= 0");
  count_ = static_cast<size_t>(count);
  comm_ = commObj_.cast<Comm*>();
  dtype_ = dtypeFromObject(dtype);
  comm_->call("Codec", [&](sqzComm_t h) {
    sqzCodec_t codec = nullptr;
    const sqzResult_t rc = sqzCodecCreate(&codec, spec_.c_str(), count_, dtype_, h);
    handle_ = codec;
    return rc;
  });
  comm_->addCodec(this);
}

Codec::~Codec() {
  comm_->removeCodec(this);
  comm_->lockedHoldingGil([&](sqzComm_t) {
    // Safe after the comm is gone: the C API knows which communicators are alive.
    if (sqzCodec_t h = handle_.exchange(nullptr)) sqzCodecDestroy(h);
  });
}

void Codec::moveTo(py::object comm) {
  comm_->removeCodec(this);
  commObj_ = std::move(comm);
  comm_ = commObj_.cast<Comm*>();
  comm_->addCodec(this);
}

void Codec::close() {
  comm_->locked([&](sqzComm_t) {
    if (sqzCodec_t h = handle_.exchange(nullptr)) check(sqzCodecDestroy(h));
  });
}

void Codec::requireOpen(const char* fn) const {
  if (!handle_) raiseInvalidUsage(fn, ": the codec is closed (Codec.close()); make a new one");
}

py::object Codec::allreduce(py::object send, py::object recv, const py::object& op,
                            const py::object& stream) {
  const char* fn = "Codec.allreduce";
  CallStream s(stream);
  const sqzRedOp_t o = parseOp(op, fn);
  const bool inPlace = recv.is_none();
  Buffer sb = getBuffer(send, fn, "send", inPlace ? Access::kWrite : Access::kRead, s);
  Buffer rb = inPlace ? sb : getBuffer(recv, fn, "recv", Access::kWrite, s);
  if (sb.dtype != rb.dtype)
    raiseInvalidArgument(fn, ": send is ", dtypeName(sb.dtype), " but recv is ",
                         dtypeName(rb.dtype), "; pass buffers of one dtype");
  if (rb.count != sb.count)
    raiseInvalidArgument(fn, ": recv has ", rb.count, " elements; send has ", sb.count);
  comm_->locked([&](sqzComm_t h) {
    requireOpen(fn);
    if (!h) raiseInvalidUsage(fn, ": the codec's Comm is unusable: ", comm_->closedReason());
    check(sqzAllReduceCompressed(sb.ptr, rb.ptr, sb.count, sb.dtype, o, handle_, h, s.value()));
  });
  return inPlace ? send : recv;
}

py::dict Codec::stats() {
  sqzCodecStats_t st{};
  comm_->locked([&](sqzComm_t) {
    requireOpen("Codec.stats");
    check(sqzCodecGetStats(handle_, &st));
  });
  py::dict d;
  d["calls"] = st.calls;
  d["wire_bytes"] = st.wireBytes;
  d["dense_bytes"] = st.denseBytes;
  d["ratio"] = st.ratio;
  d["gain"] = st.gain;
  d["residual_norm"] = st.residualNorm;
  d["encode_seconds"] = st.encodeSeconds;
  d["combine_seconds"] = st.combineSeconds;
  d["decode_seconds"] = st.decodeSeconds;
  d["last_ratio"] = st.lastRatio;
  d["cf"] = st.cf;
  d["phase"] = st.phase;
  d["cf_min"] = st.cfMin;
  d["dense_calls"] = st.denseCalls;
  d["guard_dense_calls"] = st.guardDenseCalls;
  return d;
}

py::dict Codec::stateDict() {
  std::string state;
  comm_->locked([&](sqzComm_t) {
    requireOpen("Codec.state_dict");
    size_t bytes = 0;
    check(sqzCodecSaveState(handle_, nullptr, &bytes));
    state.resize(bytes);
    check(sqzCodecSaveState(handle_, state.data(), &bytes));
    state.resize(bytes);
  });
  py::dict d;
  d["spec"] = spec_;
  d["count"] = count_;
  d["dtype"] = dtypeName(dtype_);
  d["state"] = py::bytes(state);
  return d;
}

void Codec::loadStateDict(const py::object& d) {
  const char* fn = "Codec.load_state_dict";
  for (const char* key : {"spec", "count", "dtype", "state"}) {
    bool has = false;
    try {
      has = d.contains(key);
    } catch (py::error_already_set&) {
    }
    if (!has)
      raiseInvalidArgument(fn, ": the state has no '", key, "'; pass what Codec.state_dict() "
                           "returned");
  }
  const std::string spec = py::str(d[py::str("spec")]).cast<std::string>();
  if (spec != spec_)
    raiseInvalidArgument(fn, ": the state is of a codec with spec '", spec, "', this codec's "
                         "spec is '", spec_, "'");
  py::object count = d[py::str("count")];
  if (!py::isinstance<py::int_>(count) || count.cast<long long>() != (long long)count_)
    raiseInvalidArgument(fn, ": the state is of a codec for ", py::str(count).cast<std::string>(),
                         " elements, this codec is for ", count_);
  const sqzDataType_t dtype = dtypeFromObject(d[py::str("dtype")]);
  if (dtype != dtype_)
    raiseInvalidArgument(fn, ": the state is of a codec for dtype ", dtypeName(dtype),
                         ", this codec is for ", dtypeName(dtype_));
  py::object state = d[py::str("state")];
  if (!PyObject_CheckBuffer(state.ptr()) || py::isinstance<py::str>(state))
    raiseInvalidArgument(fn, ": the state's 'state' is of type ",
                         py::str(py::type::of(state).attr("__name__")).cast<std::string>(),
                         ", not the bytes state_dict() made");
  py::object asBytes = py::reinterpret_steal<py::object>(PyBytes_FromObject(state.ptr()));
  if (!asBytes) throw py::error_already_set();
  const std::string bytes = asBytes.cast<std::string>();
  comm_->locked([&](sqzComm_t) {
    requireOpen(fn);
    check(sqzCodecLoadState(handle_, bytes.data(), bytes.size()));
  });
}

void bindCodec(py::module_& m) {
  py::class_<Codec> cls(m, "Codec", R"doc(A compressor for one tensor, reduced in flight.

Codec(spec, count, dtype, comm) makes one for `count` elements of `dtype` (a name such as
"float32", a numpy dtype or a torch dtype) on `comm`. spec is "method" or
"method:key=value,...", e.g. "topk:ratio=0.001", "dgc:ratio=0.001,momentum=0.9", "qsgd:levels=16",
"onebit", "powersgd:rank=4", "fp16". Lossy codecs take float32. Every rank makes the same codec
for the same tensor. It keeps state across calls (error-feedback residual, momentum), which
state_dict() and load_state_dict() save and restore.

The codec holds a reference to its Comm. After comm.close() (or abort()) it can no longer
allreduce (InvalidUsage), but stats(), state_dict() and close() still work.)doc");
  cls.def(py::init<std::string, long long, const py::object&, py::object>(), "spec"_a, "count"_a,
          "dtype"_a, "comm"_a);
  cls.def("allreduce", &Codec::allreduce, "send"_a, "recv"_a = py::none(), "op"_a = "avg",
          py::kw_only(), "stream"_a = py::none(),
          "All-reduces send (plus the codec's error-feedback residual), compressed, into recv "
          "(None: in place); every rank ends with bitwise the same result. op is \"avg\" or "
          "\"sum\". send has the codec's count and dtype. stream: as Comm.allreduce. Returns "
          "the result's object.");
  cls.def("stats", &Codec::stats,
          "What the codec has done since it was made or its state loaded: calls, wire_bytes, "
          "dense_bytes, ratio (dense/wire), gain, residual_norm, encode_seconds, "
          "combine_seconds, decode_seconds, last_ratio.");
  cls.def("state_dict", &Codec::stateDict,
          "{'spec', 'count', 'dtype', 'state': bytes}: the codec's state, for a checkpoint.");
  cls.def("load_state_dict", &Codec::loadStateDict, "state"_a,
          "Restores state_dict()'s output, made by a codec of the same spec, count and dtype.");
  cls.def("close", &Codec::close, "Frees the codec. Idempotent.");
  cls.def("__enter__", [](py::object self) { return self; });
  cls.def("__exit__", [](Codec& c, py::args) { c.close(); });
  cls.def_property_readonly("spec", [](const Codec& c) { return c.spec(); });
  cls.def_property_readonly("count", [](const Codec& c) { return c.count(); });
  cls.def_property_readonly("dtype", [](const Codec& c) { return dtypeName(c.dtype()); },
                            "The dtype's name, e.g. \"float32\".");
  cls.def_property_readonly("comm", [](const Codec& c) { return c.comm(); });
  cls.def_property_readonly("closed", [](const Codec& c) { return c.closed(); });
  cls.def("__repr__", [](const Codec& c) {
    return cat("<squeeze.Codec '", c.spec(), "' ", c.count(), " ", dtypeName(c.dtype()),
               c.closed() ? " closed" : "", ">");
  });
}

}  // namespace squeeze::python
