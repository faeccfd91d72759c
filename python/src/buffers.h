// Turns a Python object into what a Squeeze data call takes (pointer, element count,
// sqzDataType_t, host or CUDA memory), checking what the call needs of it. Objects with the
// buffer protocol (numpy arrays, bytearray, memoryview) are read through it; others through
// DLPack (torch tensors, which have no buffer protocol; CuPy, JAX).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include "squeeze/squeeze.h"

namespace squeeze::python {

namespace py = pybind11;

enum class Access { kRead, kWrite };

struct Buffer {
  void* ptr = nullptr;
  size_t count = 0;
  sqzDataType_t dtype = sqzFloat32;
  bool device = false;  // CUDA device or managed memory; else host memory
  bool writable = true;
  // Releases the Py_buffer, or hands the DLPack tensor back to its producer. Python objects
  // are touched when it goes, so a Buffer must die with the GIL held: make Buffers before a
  // gil_scoped_release block and let them go after it.
  std::shared_ptr<void> keepAlive;
};

// The stream a data call runs on: the caller's (an int cudaStream_t, or an object with
// .cuda_stream such as torch.cuda.Stream), else, for torch CUDA tensors, torch's current stream
// on the tensor's device (torch imported only then), else NULL (the legacy default stream).
class CallStream {
 public:
  explicit CallStream(const py::object& stream);
  // For a CUDA buffer about to be exported through DLPack: the stream to hand its producer
  // (0: none, the producer's work is already ordered before the call's stream).
  uintptr_t exportStream(py::handle obj);
  void* value() const { return reinterpret_cast<void*>(given_ ? user_ : resolved_); }

 private:
  bool given_ = false;
  uintptr_t user_ = 0;
  bool resolvedOnce_ = false;
  uintptr_t resolved_ = 0;
};

// role names the argument in messages ("send", "recv", "buf"); fn names the method.
Buffer getBuffer(py::handle obj, const char* fn, const char* role, Access access,
                 CallStream& stream);

// "float32", a numpy dtype or scalar type, or a torch dtype.
sqzDataType_t dtypeFromObject(py::handle dtype);
const char* dtypeName(sqzDataType_t dtype);

}  // namespace squeeze::python
