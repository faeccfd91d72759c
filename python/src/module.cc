// squeeze._squeeze: Squeeze's C API (include/squeeze/squeeze.h) for Python, re-exported by the
// squeeze package. Comm and Codec wrap the handles; data calls take numpy arrays and torch
// tensors; failures raise squeeze.Error subclasses carrying Squeeze's message.
#include <pybind11/pybind11.h>

#include "codec.h"
#include "comm.h"
#include "errors.h"
#include "ops.h"

namespace py = pybind11;

PYBIND11_MODULE(_squeeze, m) {
  using namespace squeeze::python;
  m.doc() = "Squeeze's C API as Comm and Codec; import it through the squeeze package.";
  bindErrors(m);
  bindComm(m);
  bindCodec(m);
  m.attr("REDUCE_OPS") = reduceOpValues();
  int version = 0;
  check(sqzGetVersion(&version));
  m.attr("__version__") =
      cat(version / 10000, ".", version / 100 % 100, ".", version % 100);
  m.attr("UNIQUE_ID_BYTES") = SQZ_UNIQUE_ID_BYTES;
}
