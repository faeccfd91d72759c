// squeeze._torch_backend: ProcessGroupSqueeze for Python. Import torch before this module (as
// squeeze.torch does): the class derives from c10d's ProcessGroup (torch 1.x) or Backend (2.x),
// whose pybind11 types torch registers; torch's pybind.h gives c10::intrusive_ptr holders.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <functional>

#include "process_group.h"

namespace py = pybind11;

namespace squeeze {

void releaseGilWhile(const std::function<void()>& fn) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release release;
    fn();
  } else {
    fn();
  }
}

}  // namespace squeeze

namespace {

c10::intrusive_ptr<squeeze::ProcessGroupSqueeze> create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  return c10::make_intrusive<squeeze::ProcessGroupSqueeze>(store, rank, size, timeout);
}

}  // namespace

PYBIND11_MODULE(_torch_backend, m) {
  m.doc() = "Squeeze as a torch.distributed (c10d) process group; see squeeze.torch.";
  py::module_::import("torch.distributed");  // registers c10d's Store, ProcessGroup, Work

  py::class_<squeeze::ProcessGroupSqueeze, squeeze::ProcessGroupBase,
             c10::intrusive_ptr<squeeze::ProcessGroupSqueeze>>(
      m, "ProcessGroupSqueeze",
      "A c10d process group on one Squeeze communicator. Construction is collective over the "
      "group: rank 0 puts a sqzUniqueId in the store, every rank joins. Operations return "
      "asynchronous works served in call order by the group's progress thread.")
      .def(py::init(&create), py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("comm_handle", &squeeze::ProcessGroupSqueeze::commHandle,
                             "The sqzComm_t as an integer, for debugging.")
      .def_property_readonly("timeout", &squeeze::ProcessGroupSqueeze::timeout);

  m.def("create", &create, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>(),
        "Creates a ProcessGroupSqueeze: torch.distributed's creator function for 'squeeze'.");
}
