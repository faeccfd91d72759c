// The NCCL shim's translation tables: NCCL's datatypes, reduction operators and result codes to
// Squeeze's and back, one row per NCCL value, keyed by the enumerators of CUDA's nccl.h (so a
// renumbered header fails to compile here, and tests/nccl_shim/translate_test.cc checks each
// row's meaning).
#pragma once

#include <nccl.h>

#include <optional>

#include "squeeze/squeeze.h"

namespace squeeze::nccl_shim {

struct DataTypeRow {
  ncclDataType_t nccl;
  const char* name;                 // the enumerator's name, for messages
  std::optional<sqzDataType_t> sqz;  // nullopt: Squeeze has no such type
  size_t bytes;                     // element size NCCL gives it
};
// Indexed by ncclDataType_t, 0 .. ncclNumTypes - 1.
extern const DataTypeRow kDataTypes[ncclNumTypes];

struct RedOpRow {
  ncclRedOp_t nccl;
  const char* name;
  sqzRedOp_t sqz;
};
// The built-in operators, indexed by ncclRedOp_t, 0 .. ncclNumOps - 1. Values from ncclNumOps
// up are operators made by ncclRedOpCreatePreMulSum (the communicator's own table).
extern const RedOpRow kRedOps[ncclNumOps];

struct ResultRow {
  sqzResult_t sqz;
  ncclResult_t nccl;
};
// Indexed by sqzResult_t, 0 .. sqzNumResults - 1.
extern const ResultRow kResults[sqzNumResults];

// The row of a datatype or built-in operator, or null for a value outside NCCL's enum.
const DataTypeRow* findDataType(int datatype);
const RedOpRow* findRedOp(int op);
ncclResult_t toNccl(sqzResult_t result);

}  // namespace squeeze::nccl_shim
