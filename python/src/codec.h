// squeeze.Codec: a sqzCodec_t that holds a reference to its squeeze.Comm. Every use of the
// handle runs under the Comm's call lock, so a codec call never overlaps a call on the Comm or
// its destruction.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <string>

#include "comm.h"

namespace squeeze::python {

namespace py = pybind11;

class Codec {
 public:
  Codec(std::string spec, long long count, const py::object& dtype, py::object comm);
  ~Codec();
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  py::object allreduce(py::object send, py::object recv, const py::object& op,
                       const py::object& stream);
  py::dict stats();
  py::dict stateDict();
  void loadStateDict(const py::object& state);
  void close();
  // Makes the codec one of `comm` (a squeeze.Comm that a shrink or grow made from its own).
  void moveTo(py::object comm);

  const std::string& spec() const { return spec_; }
  size_t count() const { return count_; }
  sqzDataType_t dtype() const { return dtype_; }
  py::object comm() const { return commObj_; }
  bool closed() const { return handle_ == nullptr; }

 private:
  void requireOpen(const char* fn) const;

  py::object commObj_;  // first member: released last, after the destructor freed the codec
  Comm* comm_ = nullptr;
  // NULL once closed. Used under comm_'s lock; atomic for closed(), which reads it without.
  std::atomic<sqzCodec_t> handle_{nullptr};
  std::string spec_;
  size_t count_ = 0;
  sqzDataType_t dtype_ = sqzFloat32;
};

void bindCodec(py::module_& m);

}  // namespace squeeze::python
