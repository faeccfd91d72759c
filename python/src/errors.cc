// The exception classes of squeeze._squeeze and the translator from SqzError to them.
#include "errors.h"

namespace squeeze::python {
namespace {

// The classes, indexed by sqzResult_t; [0] is the base class squeeze.Error, which also stands
// for codes without a class of their own. Owned by the module (its attributes), which outlives
// every call that raises.
PyObject* classes[sqzNumResults] = {};

PyObject* classFor(sqzResult_t code) {
  const int i = static_cast<int>(code);
  if (i > 0 && i < sqzNumResults && classes[i]) return classes[i];
  return classes[0];
}

struct ClassSpec {
  sqzResult_t code;
  const char* name;
  PyObject* extraBase;  // a builtin the class also derives from, so `except ValueError` works
  const char* doc;
};

}  // namespace

void check(sqzResult_t rc) {
  if (rc == sqzSuccess) return;
  const char* last = sqzGetLastError(nullptr);
  std::string msg = last && *last ? last : sqzGetErrorString(rc);
  throw SqzError(rc, std::move(msg));
}

std::string errorText(const py::error_already_set& err) {
  try {
    const std::string type = py::str(err.type().attr("__name__")).cast<std::string>();
    const std::string text = py::str(err.value()).cast<std::string>();
    return text.empty() ? type : type + ": " + text;
  } catch (const std::exception&) {
    return err.what();
  }
}

py::object makeException(sqzResult_t code, const std::string& message) {
  // 'replace': a message with bytes that are not UTF-8 (an interface name, say) must still
  // become an exception rather than a UnicodeDecodeError.
  py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace"));
  if (!text) throw py::error_already_set();
  py::object exc = py::reinterpret_borrow<py::object>(classFor(code))(text);
  exc.attr("result") = static_cast<int>(code);
  return exc;
}

void bindErrors(py::module_& m) {
  PyObject* base = PyErr_NewExceptionWithDoc(
      "squeeze.Error",
      "A Squeeze call failed. str(e) is Squeeze's message (it names the rank, the peer and the "
      "operation); e.result is the sqzResult_t code (int).",
      PyExc_RuntimeError, nullptr);
  if (!base) throw py::error_already_set();
  classes[0] = base;
  m.add_object("Error", py::reinterpret_borrow<py::object>(base));
  py::setattr(base, "result", py::none());

  const ClassSpec specs[] = {
      {sqzCudaError, "CudaError", nullptr, "A CUDA call failed (sqzCudaError)."},
      {sqzSystemError, "SystemFailure", nullptr,
       "A system call failed: socket, shared memory, out of memory (sqzSystemError). Not named "
       "SystemError, which is a Python builtin with another meaning."},
      {sqzInternalError, "InternalError", nullptr,
       "A bug in Squeeze (sqzInternalError): please report it with SQZ_DEBUG=INFO output."},
      {sqzInvalidArgument, "InvalidArgument", PyExc_ValueError,
       "An argument was wrong: dtype, layout, size, device, a bad key in a codec spec "
       "(sqzInvalidArgument). Also a ValueError."},
      {sqzInvalidUsage, "InvalidUsage", nullptr,
       "The call was wrong in context: ranks disagree on a collective, or the object is closed "
       "or aborted (sqzInvalidUsage)."},
      {sqzRemoteError, "RemoteError", PyExc_ConnectionError,
       "A peer failed or closed its connection (sqzRemoteError). Also a ConnectionError."},
      {sqzTimeout, "Timeout", PyExc_TimeoutError,
       "A wait exceeded the timeout (SQZ_TIMEOUT_MS, or Comm's timeout_ms) (sqzTimeout). Also a "
       "TimeoutError."},
  };
  for (const ClassSpec& s : specs) {
    py::object bases = s.extraBase ? py::object(py::make_tuple(py::handle(base),
                                                               py::handle(s.extraBase)))
                                   : py::reinterpret_borrow<py::object>(base);
    const std::string qualified = cat("squeeze.", s.name);
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), s.doc, bases.ptr(), nullptr);
    if (!cls) throw py::error_already_set();
    classes[s.code] = cls;
    m.add_object(s.name, py::reinterpret_borrow<py::object>(cls));
    py::setattr(cls, "result", py::int_(static_cast<int>(s.code)));
    Py_DECREF(cls);  // the module's attribute holds it now
  }
  Py_DECREF(base);

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const SqzError& e) {
      try {
        py::object exc = makeException(e.code(), e.what());
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      } catch (py::error_already_set& err) {
        err.restore();  // making the exception failed (out of memory): raise that instead
      }
    }
  });
}

}  // namespace squeeze::python
