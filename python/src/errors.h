// Squeeze's result codes as Python exceptions: squeeze.Error and one subclass per sqzResult_t.
// C++ code throws SqzError (with or without the GIL); the translator bindErrors registers turns
// it into the matching Python exception, with the code as its `result` attribute.
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <sstream>
#include <string>

#include "squeeze/squeeze.h"

namespace squeeze::python {

namespace py = pybind11;

class SqzError : public std::exception {
 public:
  SqzError(sqzResult_t code, std::string message) : code_(code), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  sqzResult_t code() const { return code_; }

 private:
  sqzResult_t code_;
  std::string message_;
};

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// Throws SqzError for a failed call with this thread's sqzGetLastError text: the C API records
// every failure there as well as on the communicator, and the thread's copy outlives a
// communicator that the failing call (abort, destroy) freed. Call it on the calling thread,
// right after the call.
void check(sqzResult_t rc);

template <class... Args>
[[noreturn]] void raiseInvalidArgument(const Args&... args) {
  throw SqzError(sqzInvalidArgument, cat(args...));
}

template <class... Args>
[[noreturn]] void raiseInvalidUsage(const Args&... args) {
  throw SqzError(sqzInvalidUsage, cat(args...));
}

// "TypeError: message" of a caught Python exception, without pybind11's traceback.
std::string errorText(const py::error_already_set& err);

// The Python exception object (not raised) for code with message, as the translator would make.
py::object makeException(sqzResult_t code, const std::string& message);

// Creates the exception classes in m and registers SqzError's translator.
void bindErrors(py::module_& m);

}  // namespace squeeze::python
