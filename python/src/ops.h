// Reduction operators: the names Python code passes ("sum", ...) and squeeze.ReduceOp's values,
// both taken from sqzRedOp_t.
#pragma once

#include <pybind11/pybind11.h>

#include "squeeze/squeeze.h"

namespace squeeze::python {

namespace py = pybind11;

// op: "sum", "prod", "max", "min", "avg" (any case), or an int such as a squeeze.ReduceOp.
sqzRedOp_t parseOp(py::handle op, const char* fn);

// {"SUM": sqzSum, ...}: what squeeze.ReduceOp is built from.
py::dict reduceOpValues();

}  // namespace squeeze::python
