// Names and sizes of the internal enums.
#include "base/types.h"

namespace squeeze {

size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::kInt8: case DataType::kUint8: return 1;
    case DataType::kFloat16: case DataType::kBfloat16: return 2;
    case DataType::kInt32: case DataType::kUint32: case DataType::kFloat32: return 4;
    case DataType::kInt64: case DataType::kUint64: case DataType::kFloat64: return 8;
  }
  return 0;
}

const char* dataTypeName(DataType t) {
  static const char* kNames[] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                 "uint64",  "half",    "float",   "double",  "bfloat16"};
  unsigned i = static_cast<unsigned>(t);
  return i < kNumDataTypes ? kNames[i] : "?";
}

const char* redOpName(RedOp op) {
  static const char* kNames[] = {"sum", "prod", "max", "min", "avg"};
  unsigned i = static_cast<unsigned>(op);
  return i < kNumRedOps ? kNames[i] : "?";
}

const char* collKindName(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce: return "allreduce";
    case CollKind::kBroadcast: return "broadcast";
    case CollKind::kReduce: return "reduce";
    case CollKind::kAllGather: return "allgather";
    case CollKind::kReduceScatter: return "reducescatter";
    case CollKind::kAlltoAll: return "alltoall";
    case CollKind::kSendRecv: return "sendrecv";
  }
  return "?";
}

}  // namespace squeeze
