// squeeze.Comm: init (explicit or from a launcher's environment), lifetime, and the
// collectives and point-to-point calls, each a check of its buffers then one C call.
#include "comm.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "buffers.h"
#include "codec.h"
#include "ops.h"

namespace squeeze::python {

using namespace pybind11::literals;

Comm::Comm(sqzComm_t handle) : handle_(handle) {
  sqzResult_t rc = sqzCommUserRank(handle, &rank_);
  if (rc == sqzSuccess) rc = sqzCommCount(handle, &size_);
  if (rc != sqzSuccess) {
    std::string msg = sqzGetLastError(nullptr);
    sqzCommDestroy(handle);
    handle_ = nullptr;
    throw SqzError(rc, msg);
  }
}

// Garbage collection frees the communicator without releasing the GIL: the interpreter may be
// finalizing, and destroying is not collective (it waits only for this rank's own work).
Comm::~Comm() {
  if (sqzComm_t h = handle_.exchange(nullptr)) sqzCommDestroy(h);
}

int Comm::rank(const char* fnName) const {
  if (closed()) raiseInvalidUsage(fnName, ": ", closedReason());
  return rank_;
}

int Comm::size(const char* fnName) const {
  if (closed()) raiseInvalidUsage(fnName, ": ", closedReason());
  return size_;
}

const char* Comm::closedReason() const {
  return aborted_ ? "the communicator was aborted (Comm.abort()); make a new one"
                  : "the communicator is closed (Comm.close()); make a new one";
}

void Comm::close() {
  // The lock waits for a call another thread has in flight; the handle goes only after it.
  locked([&](sqzComm_t) {
    if (sqzComm_t h = handle_.exchange(nullptr)) check(sqzCommDestroy(h));
  });
}

void Comm::abort() {
  // No lock: abort is how a call in flight on another thread (which holds the lock) is ended.
  sqzComm_t h = handle_.exchange(nullptr);
  if (!h) return;
  aborted_ = true;
  py::gil_scoped_release nogil;
  check(sqzCommAbort(h));
}

void Comm::revoke() {
  sqzComm_t h = handle_.load();
  if (!h) raiseInvalidUsage("Comm.revoke: ", closedReason());
  py::gil_scoped_release nogil;
  check(sqzCommRevoke(h));
}

namespace {

// `old`'s codecs go on with `fresh` (a Comm that shrink or grow made from it), each with its
// state: the C API has moved the handles already (sqzCommShrink, sqzCommGrow).
py::object adoptCodecs(Comm& old, py::object fresh) {
  const std::vector<Codec*> moving = old.codecs();
  for (Codec* c : moving) c->moveTo(fresh);
  return fresh;
}

// The optional fields of sqzConfig_t, as keyword arguments; unset ones stay undefined (the
// environment's SQZ_* variables, then the defaults, decide them).
struct Config {
  std::optional<int> timeoutMs, tcpNsocks, chunkBytes, device;
  std::optional<std::string> transports, socketIfname;

  sqzConfig_t get() const {
    sqzConfig_t c = SQZ_CONFIG_INITIALIZER;
    if (timeoutMs) c.timeoutMs = *timeoutMs;
    if (tcpNsocks) c.tcpNsocks = *tcpNsocks;
    if (chunkBytes) c.chunkBytes = *chunkBytes;
    if (device) c.device = *device;
    if (transports) c.transports = transports->c_str();  // points into this struct
    if (socketIfname) c.socketIfname = socketIfname->c_str();
    return c;
  }
};

// transports: "shm,tcp" or ["shm", "tcp"].
std::optional<std::string> transportList(const py::object& t) {
  if (t.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(t)) return t.cast<std::string>();
  std::string joined;
  try {
    for (py::handle name : t) {
      if (!joined.empty()) joined += ',';
      joined += name.cast<std::string>();
    }
  } catch (const std::exception&) {
    raiseInvalidArgument("transports must be a string such as \"shm,tcp\" or a list of names, "
                         "not ", py::repr(t).cast<std::string>());
  }
  return joined;
}

Config makeConfig(std::optional<int> timeoutMs, const py::object& transports,
                  std::optional<int> chunkBytes, std::optional<int> tcpNsocks,
                  std::optional<std::string> socketIfname, std::optional<int> device) {
  Config c;
  c.timeoutMs = timeoutMs;
  c.transports = transportList(transports);
  c.chunkBytes = chunkBytes;
  c.tcpNsocks = tcpNsocks;
  c.socketIfname = std::move(socketIfname);
  c.device = device;
  return c;
}

std::unique_ptr<Comm> initRank(const py::bytes& id, int rank, int size, const Config& config) {
  const std::string bytes = id;
  if (bytes.size() != SQZ_UNIQUE_ID_BYTES)
    raiseInvalidArgument("Comm: unique_id is ", bytes.size(), " bytes; pass the ",
                         SQZ_UNIQUE_ID_BYTES, " bytes that squeeze.unique_id() made on one rank");
  sqzUniqueId uid;
  std::memcpy(uid.internal, bytes.data(), SQZ_UNIQUE_ID_BYTES);
  const sqzConfig_t cfg = config.get();
  sqzComm_t h = nullptr;
  {
    py::gil_scoped_release nogil;
    check(sqzCommInitRankConfig(&h, size, uid, rank, &cfg));
  }
  return std::make_unique<Comm>(h);
}

std::unique_ptr<Comm> initFromEnv(const Config& config) {
  const sqzConfig_t cfg = config.get();
  sqzComm_t h = nullptr;
  {
    py::gil_scoped_release nogil;
    check(sqzCommInitFromEnv(&h, &cfg));
  }
  return std::make_unique<Comm>(h);
}

void sameDtype(const Buffer& a, const char* aName, const Buffer& b, const char* bName,
               const char* fn) {
  if (a.dtype != b.dtype)
    raiseInvalidArgument(fn, ": ", aName, " is ", dtypeName(a.dtype), " but ", bName, " is ",
                         dtypeName(b.dtype), "; pass buffers of one dtype");
}

void needCount(const Buffer& b, const char* name, size_t want, const char* fn,
               const std::string& call) {
  if (b.count != want)
    raiseInvalidArgument(fn, ": ", name, " has ", b.count, " elements; ", call, " needs ", want);
}

py::bytes uniqueId() {
  sqzUniqueId id;
  {
    py::gil_scoped_release nogil;  // binds a socket and starts the rendezvous root's thread
    check(sqzGetUniqueId(&id));
  }
  return py::bytes(id.internal, SQZ_UNIQUE_ID_BYTES);
}

constexpr const char* kStreamDoc =
    " stream: for CUDA buffers, the cudaStream_t (int, or torch.cuda.Stream) to enqueue on; "
    "None: torch's current stream for torch tensors, else the legacy default stream. The call "
    "then returns at once, as NCCL's do. Host buffers: leave it None.";

}  // namespace

void bindComm(py::module_& m) {
  m.def("unique_id", &uniqueId,
        "A rendezvous token (128 bytes) for Comm(). Call on one rank and send it to the others; "
        "it starts the rendezvous root in this process. It holds a job secret: treat it as a "
        "credential.");

  py::class_<Comm> cls(m, "Comm", R"doc(A Squeeze communicator: ranks that run collectives together.

Comm(unique_id, rank, size, *, timeout_ms=None, transports=None, chunk_bytes=None,
     tcp_nsocks=None, socket_ifname=None, device=None)
joins the communicator of `size` ranks as `rank`, blocking until every rank has joined.
Configuration left None comes from the SQZ_* environment variables, then the defaults.
Comm.from_env() takes the rank and rendezvous from a launcher (torchrun, sqzrun, mpirun).

Data calls take numpy arrays (or anything with the C-contiguous buffer protocol) and torch
tensors (or anything with __dlpack__), host or CUDA memory. Every rank must make the same calls
in the same order with the same sizes; a mismatch raises InvalidUsage on the ranks that see it.

One thread at a time runs calls on a Comm (others wait), except abort(), which ends a call in
flight. close() (also `with` and garbage collection) frees it; codecs made on it then refuse to
allreduce.)doc");
  cls.def(py::init([](const py::bytes& uniqueId, int rank, int size, std::optional<int> timeoutMs,
                      const py::object& transports, std::optional<int> chunkBytes,
                      std::optional<int> tcpNsocks, std::optional<std::string> socketIfname,
                      std::optional<int> device) {
            return initRank(uniqueId, rank, size,
                            makeConfig(timeoutMs, transports, chunkBytes, tcpNsocks,
                                       std::move(socketIfname), device));
          }),
          "unique_id"_a, "rank"_a, "size"_a, py::kw_only(), "timeout_ms"_a = py::none(),
          "transports"_a = py::none(), "chunk_bytes"_a = py::none(), "tcp_nsocks"_a = py::none(),
          "socket_ifname"_a = py::none(), "device"_a = py::none());
  cls.def_static(
      "from_env",
      [](std::optional<int> timeoutMs, const py::object& transports,
         std::optional<int> chunkBytes, std::optional<int> tcpNsocks,
         std::optional<std::string> socketIfname, std::optional<int> device) {
        return initFromEnv(makeConfig(timeoutMs, transports, chunkBytes, tcpNsocks,
                                      std::move(socketIfname), device));
      },
      py::kw_only(), "timeout_ms"_a = py::none(), "transports"_a = py::none(),
      "chunk_bytes"_a = py::none(), "tcp_nsocks"_a = py::none(), "socket_ifname"_a = py::none(),
      "device"_a = py::none(),
      "A Comm from a launcher's environment: SQZ_UNIQUE_ID (sqzrun), SQZ_RANK/SQZ_WORLD_SIZE/"
      "SQZ_ROOT, torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or MPI/Slurm's rank and "
      "size with MASTER_ADDR/MASTER_PORT. Takes Comm()'s configuration keywords.");

  cls.def_property_readonly("rank", [](const Comm& c) { return c.rank("Comm.rank"); },
                            "This process's rank, 0 <= rank < size.");
  cls.def_property_readonly("size", [](const Comm& c) { return c.size("Comm.size"); },
                            "The number of ranks.");
  cls.def_property_readonly("closed", &Comm::closed, "Whether close() or abort() has run.");
  cls.def_property_readonly(
      "last_algorithm",
      [](Comm& c) {
        std::string name;
        c.call("Comm.last_algorithm", [&](sqzComm_t h) {
          const char* n = nullptr;
          const sqzResult_t rc = sqzCommGetLastAlgorithm(h, &n);
          if (n) name = n;  // valid only until the next call: copied under the lock
          return rc;
        });
        return name;
      },
      "The algorithm of the last collective (\"ring\", \"rhd\", ... \"p2p\"; \"\" before the "
      "first).");

  cls.def("close", &Comm::close,
          "Frees the communicator (not collective). Idempotent; waits for a call in flight on "
          "another thread. Codecs made on it can no longer allreduce.");
  cls.def("abort", &Comm::abort,
          "Aborts the communicator: closes its connections (peers' calls fail with RemoteError) "
          "and frees it. May run while another thread is in a call, which then returns "
          "promptly with an error. The Comm is unusable after.");
  cls.def("__enter__", [](py::object self) { return self; });
  cls.def("__exit__", [](Comm& c, py::args) { c.close(); });
  cls.def("__repr__", [](const Comm& c) {
    if (c.closed())
      return std::string(c.aborted() ? "<squeeze.Comm aborted>" : "<squeeze.Comm closed>");
    return cat("<squeeze.Comm rank ", c.rank(""), " of ", c.size(""), ">");
  });

  cls.def(
      "async_error",
      [](Comm& c) -> py::object {
        sqzResult_t err = sqzSuccess;
        std::string msg;
        c.call("Comm.async_error", [&](sqzComm_t h) {
          const sqzResult_t rc = sqzCommGetAsyncError(h, &err);
          if (rc == sqzSuccess && err != sqzSuccess) msg = sqzGetLastError(h);
          return rc;
        });
        if (err == sqzSuccess) return py::none();
        return makeException(err, cat("asynchronous error: ",
                                       msg.empty() ? sqzGetErrorString(err) : msg.c_str()));
      },
      "None, or the error (a squeeze.Error, not raised) of a call that failed after it "
      "returned (device calls enqueued on a stream), or of a lost peer.");

  cls.def(
      "split",
      [](Comm& c, std::optional<int> color, std::optional<int> key) -> py::object {
        const char* fn = "Comm.split";
        const int col = color.value_or(SQZ_SPLIT_NOCOLOR);
        const int k = key.value_or(c.rank(fn));
        sqzComm_t child = nullptr;
        c.call(fn, [&](sqzComm_t h) { return sqzCommSplit(h, col, k, &child, nullptr); });
        if (!child) return py::none();
        return py::cast(std::make_unique<Comm>(child));
      },
      "color"_a, "key"_a = py::none(),
      "Collective: ranks passing the same color (>= 0) get a new Comm together, ranked by "
      "(key, rank); key defaults to this rank. color None or -1 takes part without joining "
      "one and returns None. The new Comm has its own connections and this one's "
      "configuration.");

  cls.def("revoke", &Comm::revoke,
          "Revokes the communicator (after a lost rank): a call in flight here, on any thread, "
          "ends with RemoteError naming this rank; the other ranks' calls end too as they find "
          "it gone. Then only shrink() and close() are left.");
  cls.def(
      "shrink",
      [](Comm& c, const std::vector<int>& exclude) {
        sqzComm_t child = nullptr;
        c.call("Comm.shrink", [&](sqzComm_t h) {
          return sqzCommShrink(h, exclude.data(), static_cast<int>(exclude.size()), &child,
                               nullptr);
        });
        return adoptCodecs(c, py::cast(std::make_unique<Comm>(child)));
      },
      "exclude"_a,
      "Collective over the ranks not in `exclude` (the lost ones): a new Comm of the "
      "survivors, ranked in their order here, with no new unique id. Every survivor passes the "
      "same list; a list that differs, or another rank lost on the way, raises on all of them "
      "and changes nothing. This Comm's codecs move to the new one with their state (each keeps "
      "its own residual). Revoke first if a call may still be in flight.");
  cls.def(
      "grow",
      [](Comm& c, int newRanks, const py::bytes& uniqueId) {
        const std::string bytes = uniqueId;
        if (bytes.size() != SQZ_UNIQUE_ID_BYTES)
          raiseInvalidArgument("Comm.grow: unique_id is ", bytes.size(), " bytes; pass the ",
                               SQZ_UNIQUE_ID_BYTES, " bytes of squeeze.unique_id()");
        sqzUniqueId id;
        std::memcpy(id.internal, bytes.data(), SQZ_UNIQUE_ID_BYTES);
        sqzComm_t child = nullptr;
        c.call("Comm.grow", [&](sqzComm_t h) {
          return sqzCommGrow(h, newRanks, &id, &child, nullptr);
        });
        return adoptCodecs(c, py::cast(std::make_unique<Comm>(child)));
      },
      "new_ranks"_a, "unique_id"_a,
      "Collective: a Comm of size + new_ranks ranks in which every rank here keeps its number; "
      "the new processes join with Comm(unique_id, rank, size + new_ranks) for rank = size .. "
      "size + new_ranks - 1. Every rank passes the same unique_id (squeeze.unique_id() on one "
      "rank, sent to the others and to the new processes). This Comm's codecs move to the new "
      "one.");

  cls.def(
      "barrier",
      [](Comm& c) { c.call("Comm.barrier", [](sqzComm_t h) { return sqzBarrier(h); }); },
      "Returns when every rank has called barrier().");

  cls.def(
      "allreduce",
      [](Comm& c, py::object send, py::object recv, const py::object& op,
         const py::object& stream) -> py::object {
        const char* fn = "Comm.allreduce";
        CallStream s(stream);
        const sqzRedOp_t o = parseOp(op, fn);
        const bool inPlace = recv.is_none();
        Buffer sb = getBuffer(send, fn, "send", inPlace ? Access::kWrite : Access::kRead, s);
        Buffer rb = inPlace ? sb : getBuffer(recv, fn, "recv", Access::kWrite, s);
        sameDtype(sb, "send", rb, "recv", fn);
        needCount(rb, "recv", sb.count, fn, cat("an all-reduce of send's ", sb.count, " elements"));
        c.call(fn, [&](sqzComm_t h) {
          return sqzAllReduce(sb.ptr, rb.ptr, sb.count, sb.dtype, o, h, s.value());
        });
        return inPlace ? send : recv;
      },
      "send"_a, "recv"_a = py::none(), "op"_a = "sum", py::kw_only(), "stream"_a = py::none(),
      (std::string("Reduces send over the ranks with op (\"sum\", \"prod\", \"max\", \"min\", "
                   "\"avg\" or a ReduceOp) into recv on every rank, bitwise the same everywhere; "
                   "recv None: in place, into send. Returns the result's object.") +
       kStreamDoc).c_str());

  cls.def(
      "broadcast",
      [](Comm& c, py::object buf, py::object recv, int root,
         const py::object& stream) -> py::object {
        const char* fn = "Comm.broadcast";
        // The order was (buf, root, recv) before it became ncclBroadcast's: an int where recv
        // goes is an old call, told so rather than refused as "not a buffer".
        if (py::isinstance<py::int_>(recv))
          raiseInvalidArgument(fn, ": recv is an int (", py::str(recv).cast<std::string>(),
                               "); the order is broadcast(buf, recv=None, root=0), as "
                               "ncclBroadcast's: pass the root as root=");
        CallStream s(stream);
        const bool inPlace = recv.is_none();
        const bool written = inPlace && c.rank(fn) != root;
        Buffer bb = getBuffer(buf, fn, "buf", written ? Access::kWrite : Access::kRead, s);
        Buffer rb = inPlace ? bb : getBuffer(recv, fn, "recv", Access::kWrite, s);
        sameDtype(bb, "buf", rb, "recv", fn);
        needCount(rb, "recv", bb.count, fn, cat("a broadcast of buf's ", bb.count, " elements"));
        c.call(fn, [&](sqzComm_t h) {
          return sqzBroadcast(bb.ptr, rb.ptr, bb.count, bb.dtype, root, h, s.value());
        });
        return inPlace ? buf : recv;
      },
      "buf"_a, "recv"_a = py::none(), "root"_a = 0, py::kw_only(), "stream"_a = py::none(),
      (std::string("Copies root's buf to every rank: into buf (recv None) or recv; the "
                   "arguments in ncclBroadcast's order. Returns the result's object.") +
       kStreamDoc).c_str());

  cls.def(
      "reduce",
      [](Comm& c, py::object send, py::object recv, const py::object& op, int root,
         const py::object& stream) -> py::object {
        const char* fn = "Comm.reduce";
        CallStream s(stream);
        const sqzRedOp_t o = parseOp(op, fn);
        const bool inPlace = recv.is_none();
        const bool written = inPlace && c.rank(fn) == root;
        Buffer sb = getBuffer(send, fn, "send", written ? Access::kWrite : Access::kRead, s);
        Buffer rb = inPlace ? sb : getBuffer(recv, fn, "recv", Access::kWrite, s);
        sameDtype(sb, "send", rb, "recv", fn);
        needCount(rb, "recv", sb.count, fn, cat("a reduce of send's ", sb.count, " elements"));
        c.call(fn, [&](sqzComm_t h) {
          return sqzReduce(sb.ptr, rb.ptr, sb.count, sb.dtype, o, root, h, s.value());
        });
        return inPlace ? send : recv;
      },
      "send"_a, "recv"_a = py::none(), "op"_a = "sum", "root"_a = 0, py::kw_only(),
      "stream"_a = py::none(),
      (std::string("Reduces send over the ranks with op into root's recv (recv None: into "
                   "root's send); other ranks' recv is left alone. Returns the result's "
                   "object.") +
       kStreamDoc).c_str());

  cls.def(
      "allgather",
      [](Comm& c, py::object send, py::object recv, const py::object& stream) -> py::object {
        const char* fn = "Comm.allgather";
        CallStream s(stream);
        const int n = c.size(fn);
        Buffer sb = getBuffer(send, fn, "send", Access::kRead, s);
        Buffer rb = getBuffer(recv, fn, "recv", Access::kWrite, s);
        sameDtype(sb, "send", rb, "recv", fn);
        needCount(rb, "recv", sb.count * n, fn,
                  cat("an all-gather of send's ", sb.count, " elements from each of ", n,
                      " ranks"));
        c.call(fn, [&](sqzComm_t h) {
          return sqzAllGather(sb.ptr, rb.ptr, sb.count, sb.dtype, h, s.value());
        });
        return recv;
      },
      "send"_a, "recv"_a, py::kw_only(), "stream"_a = py::none(),
      (std::string("Gathers every rank's send into recv (size * len(send) elements), rank r's "
                   "at block r. Returns recv.") +
       kStreamDoc).c_str());

  cls.def(
      "reduce_scatter",
      [](Comm& c, py::object send, py::object recv, const py::object& op,
         const py::object& stream) -> py::object {
        const char* fn = "Comm.reduce_scatter";
        CallStream s(stream);
        const sqzRedOp_t o = parseOp(op, fn);
        const int n = c.size(fn);
        Buffer sb = getBuffer(send, fn, "send", Access::kRead, s);
        Buffer rb = getBuffer(recv, fn, "recv", Access::kWrite, s);
        sameDtype(sb, "send", rb, "recv", fn);
        needCount(sb, "send", rb.count * n, fn,
                  cat("a reduce-scatter into recv's ", rb.count, " elements on each of ", n,
                      " ranks"));
        c.call(fn, [&](sqzComm_t h) {
          return sqzReduceScatter(sb.ptr, rb.ptr, rb.count, rb.dtype, o, h, s.value());
        });
        return recv;
      },
      "send"_a, "recv"_a, "op"_a = "sum", py::kw_only(), "stream"_a = py::none(),
      (std::string("Reduces send (size * len(recv) elements) over the ranks with op; rank r "
                   "receives block r in recv. Returns recv.") +
       kStreamDoc).c_str());

  cls.def(
      "alltoall",
      [](Comm& c, py::object send, py::object recv, const py::object& stream) -> py::object {
        const char* fn = "Comm.alltoall";
        CallStream s(stream);
        const size_t n = static_cast<size_t>(c.size(fn));
        Buffer sb = getBuffer(send, fn, "send", Access::kRead, s);
        Buffer rb = getBuffer(recv, fn, "recv", Access::kWrite, s);
        sameDtype(sb, "send", rb, "recv", fn);
        if (sb.count % n != 0)
          raiseInvalidArgument(fn, ": send has ", sb.count, " elements, not a multiple of the ",
                               n, " ranks (block p goes to rank p)");
        needCount(rb, "recv", sb.count, fn, cat("an all-to-all of send's ", sb.count,
                                                " elements"));
        c.call(fn, [&](sqzComm_t h) {
          return sqzAlltoAll(sb.ptr, rb.ptr, sb.count / n, sb.dtype, h, s.value());
        });
        return recv;
      },
      "send"_a, "recv"_a, py::kw_only(), "stream"_a = py::none(),
      (std::string("Sends block p of send to rank p and receives rank p's block for this rank "
                   "into block p of recv (send and recv the same size, a multiple of size; not "
                   "in place). Returns recv.") +
       kStreamDoc).c_str());

  cls.def(
      "send",
      [](Comm& c, py::object buf, int peer, const py::object& stream) {
        const char* fn = "Comm.send";
        CallStream s(stream);
        Buffer b = getBuffer(buf, fn, "buf", Access::kRead, s);
        c.call(fn, [&](sqzComm_t h) {
          return sqzSend(b.ptr, b.count, b.dtype, peer, h, s.value());
        });
      },
      "buf"_a, "peer"_a, py::kw_only(), "stream"_a = py::none(),
      (std::string("Sends buf to rank peer, matched by the peer's recv() of the same size; "
                   "blocks until sent (host memory).") +
       kStreamDoc).c_str());

  cls.def(
      "recv",
      [](Comm& c, py::object buf, int peer, const py::object& stream) -> py::object {
        const char* fn = "Comm.recv";
        CallStream s(stream);
        Buffer b = getBuffer(buf, fn, "buf", Access::kWrite, s);
        c.call(fn, [&](sqzComm_t h) {
          return sqzRecv(b.ptr, b.count, b.dtype, peer, h, s.value());
        });
        return buf;
      },
      "buf"_a, "peer"_a, py::kw_only(), "stream"_a = py::none(),
      (std::string("Receives rank peer's send() into buf (the same size). Returns buf.") +
       kStreamDoc).c_str());
}

}  // namespace squeeze::python
