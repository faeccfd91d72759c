// Buffer extraction: the buffer protocol, DLPack (with the ABI structs of DLPack 0.x, which
// every producer's unversioned "dltensor" capsule carries), and the datatype names.
#include "buffers.h"

#include <bit>
#include <cstring>

#include "errors.h"

#ifndef SQZ_PY_HAVE_CUDA
#define SQZ_PY_HAVE_CUDA 0
#endif

namespace squeeze::python {
namespace {

// From dlpack.h (https://github.com/dmlc/dlpack), version 0.8: the layout is the ABI.
struct DLDevice {
  int32_t device_type;  // DLDeviceType, an int-sized enum
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL means compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;
constexpr int32_t kDLCUDAManaged = 13;
constexpr uint8_t kDLInt = 0;
constexpr uint8_t kDLUInt = 1;
constexpr uint8_t kDLFloat = 2;
constexpr uint8_t kDLBfloat = 4;

const char* dlDeviceName(int32_t type) {
  switch (type) {
    case 1: return "cpu";
    case 2: return "cuda";
    case 3: return "cuda_host (pinned host memory)";
    case 4: return "opencl";
    case 7: return "vulkan";
    case 8: return "metal";
    case 9: return "vpi";
    case 10: return "rocm";
    case 11: return "rocm_host";
    case 12: return "ext_dev";
    case 13: return "cuda_managed";
    case 14: return "oneapi";
    case 15: return "webgpu";
    case 16: return "hexagon";
    default: return "unknown";
  }
}

const char* dlCodeName(uint8_t code) {
  switch (code) {
    case 0: return "int";
    case 1: return "uint";
    case 2: return "float";
    case 3: return "opaque handle";
    case 4: return "bfloat";
    case 5: return "complex";
    case 6: return "bool";
    default: return "unknown";
  }
}

constexpr const char* kSupported =
    "int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32, float64";

struct NamedType {
  const char* name;
  sqzDataType_t type;
};
constexpr NamedType kTypes[] = {
    {"int8", sqzInt8},         {"uint8", sqzUint8},     {"int32", sqzInt32},
    {"uint32", sqzUint32},     {"int64", sqzInt64},     {"uint64", sqzUint64},
    {"float16", sqzFloat16},   {"float32", sqzFloat32}, {"float64", sqzFloat64},
    {"bfloat16", sqzBfloat16},
};

std::string typeName(py::handle obj) {
  return py::str(py::type::of(obj).attr("__qualname__")).cast<std::string>();
}

std::string typeModule(py::handle obj) {
  py::object mod = py::getattr(py::type::of(obj), "__module__", py::none());
  return mod.is_none() ? std::string() : py::str(mod).cast<std::string>();
}

bool isTorchObject(py::handle obj) { return typeModule(obj).rfind("torch", 0) == 0; }

// "send (numpy.ndarray)": how messages name an argument.
std::string describe(const char* role, py::handle obj) {
  const std::string mod = typeModule(obj);
  return cat(role, " (", mod.empty() || mod == "builtins" ? "" : mod + ".", typeName(obj), ")");
}

// The struct-module format of a buffer (with numpy's extensions) as a Squeeze datatype.
sqzDataType_t fromFormat(const char* format, Py_ssize_t itemsize, const std::string& what,
                         const char* fn) {
  std::string f = format ? format : "B";
  if (!f.empty() && std::strchr("@=<>!", f[0])) {
    const bool little = std::endian::native == std::endian::little;
    if (((f[0] == '>' || f[0] == '!') && little) || (f[0] == '<' && !little))
      raiseInvalidArgument(fn, ": ", what, " has byte order '", f[0], "', not this machine's; "
                           "convert it first (arr.astype(arr.dtype.newbyteorder('=')))");
    f.erase(0, 1);
  }
  if (f == "?")
    raiseInvalidArgument(fn, ": ", what, " has dtype bool, which Squeeze does not reduce; "
                         "convert it (arr.astype(np.uint8)). Supported: ", kSupported);
  if (!f.empty() && f[0] == 'Z')
    raiseInvalidArgument(fn, ": ", what, " has a complex dtype (format '", f, "'), which Squeeze "
                         "does not support; view it as float pairs (arr.view(np.float32)). "
                         "Supported: ", kSupported);
  if (f.size() == 1) {
    const char c = f[0];
    // Integer sizes come from itemsize: 'l' is 8 bytes natively but 4 with a '=' prefix.
    const bool isSigned = std::strchr("bhilqn", c) != nullptr;
    const bool isUnsigned = std::strchr("BHILQN", c) != nullptr;
    if (isSigned || isUnsigned) {
      switch (itemsize) {
        case 1: return isSigned ? sqzInt8 : sqzUint8;
        case 4: return isSigned ? sqzInt32 : sqzUint32;
        case 8: return isSigned ? sqzInt64 : sqzUint64;
        default:
          raiseInvalidArgument(fn, ": ", what, " has dtype ", isSigned ? "int" : "uint",
                               itemsize * 8, ", which Squeeze does not support. Supported: ",
                               kSupported);
      }
    }
    if (c == 'e' && itemsize == 2) return sqzFloat16;
    if (c == 'f' && itemsize == 4) return sqzFloat32;
    if (c == 'd' && itemsize == 8) return sqzFloat64;
  }
  raiseInvalidArgument(fn, ": ", what, " has buffer format '", f, "' (", itemsize,
                       "-byte items), which is not a datatype Squeeze supports: ", kSupported);
}

Buffer fromBufferProtocol(py::handle obj, const char* fn, const std::string& what,
                          Access access) {
  auto* view = new Py_buffer;
  // FULL_RO asks for everything (strides, format, suboffsets) without demanding a layout, so
  // the checks below can say what is wrong instead of the exporter's generic BufferError.
  if (PyObject_GetBuffer(obj.ptr(), view, PyBUF_FULL_RO) != 0) {
    delete view;
    py::error_already_set err;
    raiseInvalidArgument(fn, ": ", what, " cannot be read through the buffer protocol: ",
                         errorText(err));
  }
  Buffer b;
  b.keepAlive = std::shared_ptr<void>(view, [](void* v) {
    PyBuffer_Release(static_cast<Py_buffer*>(v));
    delete static_cast<Py_buffer*>(v);
  });
  if (!PyBuffer_IsContiguous(view, 'C'))
    raiseInvalidArgument(fn, ": ", what, " is not contiguous: call .contiguous() / "
                         "np.ascontiguousarray first");
  b.dtype = fromFormat(view->format, view->itemsize, what, fn);
  b.ptr = view->buf;
  b.count = static_cast<size_t>(view->len / view->itemsize);
  b.writable = !view->readonly;
  if (access == Access::kWrite && !b.writable)
    raiseInvalidArgument(fn, ": ", what, " is read-only, but the call writes its result there; "
                         "pass a writable array (np.array(x) copies one)");
  return b;
}

sqzDataType_t fromDlType(const DLDataType& t, const std::string& what,
                         const char* fn) {
  if (t.lanes == 1) {
    switch (t.code) {
      case kDLInt:
        if (t.bits == 8) return sqzInt8;
        if (t.bits == 32) return sqzInt32;
        if (t.bits == 64) return sqzInt64;
        break;
      case kDLUInt:
        if (t.bits == 8) return sqzUint8;
        if (t.bits == 32) return sqzUint32;
        if (t.bits == 64) return sqzUint64;
        break;
      case kDLFloat:
        if (t.bits == 16) return sqzFloat16;
        if (t.bits == 32) return sqzFloat32;
        if (t.bits == 64) return sqzFloat64;
        break;
      case kDLBfloat:
        if (t.bits == 16) return sqzBfloat16;
        break;
    }
  }
  raiseInvalidArgument(fn, ": ", what, " has DLPack dtype ", dlCodeName(t.code), int(t.bits),
                       t.lanes != 1 ? cat("x", t.lanes) : std::string(),
                       ", which Squeeze does not support. Supported: ", kSupported);
}

Buffer fromDlpack(py::handle obj, const char* fn, const std::string& what, Access access,
                  CallStream& stream) {
  (void)access;  // DLPack 0.x has no read-only flag: every tensor counts as writable
  int32_t deviceType = 0;
  const bool knowsDevice = py::hasattr(obj, "__dlpack_device__");
  // torch refuses to export bool tensors with a message that does not say what to do instead.
  if (isTorchObject(obj) && py::hasattr(obj, "dtype") &&
      py::str(obj.attr("dtype")).cast<std::string>() == "torch.bool")
    raiseInvalidArgument(fn, ": ", what, " has dtype bool, which Squeeze does not reduce; "
                         "convert it (t.to(torch.uint8)). Supported: ", kSupported);
  py::object capsule;
  try {
    if (knowsDevice) deviceType = obj.attr("__dlpack_device__")()[py::int_(0)].cast<int32_t>();
    const bool cuda = deviceType == kDLCUDA || deviceType == kDLCUDAManaged;
    const uintptr_t s = cuda && SQZ_PY_HAVE_CUDA ? stream.exportStream(obj) : 0;
    capsule = s ? obj.attr("__dlpack__")(py::arg("stream") = s) : obj.attr("__dlpack__")();
  } catch (py::error_already_set& err) {
    raiseInvalidArgument(fn, ": ", what, " could not be exported through DLPack: ",
                         errorText(err));
  } catch (py::cast_error&) {
    raiseInvalidArgument(fn, ": ", what, ".__dlpack_device__() did not return (device type, "
                         "device id)");
  }
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    raiseInvalidArgument(fn, ": ", what, ".__dlpack__() did not return an unused 'dltensor' "
                         "capsule");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  // Renamed, the capsule's destructor leaves the tensor alone: calling its deleter is ours.
  if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  Buffer b;
  b.keepAlive = std::shared_ptr<void>(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  const int32_t type = t.device.device_type;
  if (type != kDLCPU && type != kDLCUDA && type != kDLCUDAManaged)
    raiseInvalidArgument(fn, ": ", what, " is on device '", dlDeviceName(type), "' (DLPack type ",
                         type, "); Squeeze takes host (cpu) memory and CUDA device or managed "
                         "memory");
  b.device = type != kDLCPU;
  if (b.device && !SQZ_PY_HAVE_CUDA)
    raiseInvalidArgument(fn, ": ", what, " is CUDA memory (device ", t.device.device_id, "), but "
                         "this build of Squeeze has no CUDA support; pass host memory, or "
                         "rebuild Squeeze with the CUDA toolkit installed");
  if (b.device && !knowsDevice) stream.exportStream(obj);  // the default for its stream
  b.dtype = fromDlType(t.dtype, what, fn);
  size_t count = 1;
  int64_t expected = 1;  // the compact row-major stride of the dimension at hand
  bool compact = true;
  for (int i = t.ndim - 1; i >= 0; --i) {
    const int64_t n = t.shape[i];
    count *= static_cast<size_t>(n);
    // A dimension of extent 1 is never stepped over, so its stride does not matter.
    if (t.strides && n != 1 && t.strides[i] != expected) compact = false;
    expected *= n;
  }
  if (count > 0 && !compact)
    raiseInvalidArgument(fn, ": ", what, " is not contiguous: call .contiguous() / "
                         "np.ascontiguousarray first");
  b.count = count;
  b.ptr = static_cast<char*>(t.data) + t.byte_offset;
  b.writable = true;
  return b;
}

}  // namespace

CallStream::CallStream(const py::object& stream) {
  if (stream.is_none()) return;
  py::object v = stream;
  if (!py::isinstance<py::int_>(v) && py::hasattr(v, "cuda_stream")) v = v.attr("cuda_stream");
  if (!py::isinstance<py::int_>(v) || PyBool_Check(v.ptr()))
    raiseInvalidArgument("stream must be None, an int (a cudaStream_t) or an object with "
                         ".cuda_stream such as torch.cuda.Stream, not ", typeName(stream));
  const unsigned long long value = PyLong_AsUnsignedLongLong(v.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    raiseInvalidArgument("stream ", py::str(v).cast<std::string>(), " is not a cudaStream_t "
                         "value (a non-negative pointer-sized int)");
  }
  given_ = true;
  user_ = static_cast<uintptr_t>(value);
}

uintptr_t CallStream::exportStream(py::handle obj) {
  // DLPack reserves 0 as ambiguous; 1 is the legacy default stream, which NULL means here.
  if (given_) return user_ ? user_ : 1;
  if (!resolvedOnce_) {
    resolvedOnce_ = true;
    if (isTorchObject(obj) && py::hasattr(obj, "device")) {
      py::module_ torch = py::module_::import("torch");
      resolved_ = torch.attr("cuda").attr("current_stream")(obj.attr("device"))
                      .attr("cuda_stream").cast<uintptr_t>();
    }
  }
  return 0;  // torch's current stream is the call's: torch's work is ordered before it
}

Buffer getBuffer(py::handle obj, const char* fn, const char* role, Access access,
                 CallStream& stream) {
  if (obj.is_none())
    raiseInvalidArgument(fn, ": ", role, " is None; pass a numpy array or a tensor");
  const std::string what = describe(role, obj);
  // The buffer protocol first: it says what is read-only, and numpy's __dlpack__ refuses
  // read-only arrays outright.
  if (PyObject_CheckBuffer(obj.ptr())) return fromBufferProtocol(obj, fn, what, access);
  if (py::hasattr(obj, "__dlpack__")) return fromDlpack(obj, fn, what, access, stream);
  raiseInvalidArgument(fn, ": ", what, " has neither the buffer protocol nor __dlpack__; pass a "
                       "numpy array or a tensor (torch, CuPy, ...)");
}

sqzDataType_t dtypeFromObject(py::handle dtype) {
  std::string name;
  if (dtype.is_none()) {
    raiseInvalidArgument("dtype is None; pass a name such as 'float32', a numpy dtype or a torch "
                         "dtype");  // numpy would take None for float64
  } else if (py::isinstance<py::str>(dtype)) {
    name = dtype.cast<std::string>();
  } else if (typeModule(dtype) == "torch" && typeName(dtype) == "dtype") {
    name = py::str(dtype).cast<std::string>();
    if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
  } else {
    try {
      name = py::module_::import("numpy").attr("dtype")(dtype).attr("name").cast<std::string>();
    } catch (py::error_already_set& err) {
      raiseInvalidArgument("dtype ", py::repr(dtype).cast<std::string>(), " is not a dtype: "
                           "pass a name such as 'float32', a numpy dtype or a torch dtype");
    }
  }
  for (const NamedType& t : kTypes)
    if (name == t.name) return t.type;
  raiseInvalidArgument("dtype '", name, "' is not one Squeeze supports: ", kSupported);
}

const char* dtypeName(sqzDataType_t dtype) {
  for (const NamedType& t : kTypes)
    if (t.type == dtype) return t.name;
  return "unknown";
}

}  // namespace squeeze::python
