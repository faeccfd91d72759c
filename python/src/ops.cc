// The reduction operator table shared by parseOp and squeeze.ReduceOp.
#include "ops.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "errors.h"

namespace squeeze::python {
namespace {

struct NamedOp {
  const char* name;
  sqzRedOp_t op;
};
constexpr NamedOp kOps[] = {
    {"sum", sqzSum}, {"prod", sqzProd}, {"max", sqzMax}, {"min", sqzMin}, {"avg", sqzAvg},
};

}  // namespace

sqzRedOp_t parseOp(py::handle op, const char* fn) {
  if (py::isinstance<py::str>(op)) {
    std::string name = op.cast<std::string>();
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    for (const NamedOp& o : kOps)
      if (name == o.name) return o.op;
  } else if (py::isinstance<py::int_>(op) && !PyBool_Check(op.ptr())) {
    const long v = PyLong_AsLong(op.ptr());
    if (v == -1 && PyErr_Occurred()) PyErr_Clear();
    for (const NamedOp& o : kOps)
      if (v == static_cast<long>(o.op)) return o.op;
  }
  raiseInvalidArgument(fn, ": op ", py::repr(op).cast<std::string>(), " is not a reduction; "
                       "use \"sum\", \"prod\", \"max\", \"min\", \"avg\" or a squeeze.ReduceOp");
}

py::dict reduceOpValues() {
  py::dict values;
  for (const NamedOp& o : kOps) {
    std::string upper = o.name;
    std::transform(upper.begin(), upper.end(), upper.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
    values[py::str(upper)] = static_cast<int>(o.op);
  }
  return values;
}

}  // namespace squeeze::python
