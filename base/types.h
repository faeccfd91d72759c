// Internal vocabulary shared by every layer: element types, reduction ops, collective kinds and
// the CollRequest that carries one call from the API down to the algorithm.
#pragma once

#include <cstddef>
#include <cstdint>

namespace squeeze {

// Values match sqzDataType_t.
enum class DataType : uint8_t {
  kInt8 = 0, kUint8, kInt32, kUint32, kInt64, kUint64, kFloat16, kFloat32, kFloat64, kBfloat16,
};
constexpr int kNumDataTypes = 10;

// Values match sqzRedOp_t.
enum class RedOp : uint8_t { kSum = 0, kProd, kMax, kMin, kAvg };
constexpr int kNumRedOps = 5;

enum class CollKind : uint8_t {
  kAllReduce = 1, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kSendRecv,
};

size_t dataTypeSize(DataType t);
const char* dataTypeName(DataType t);
const char* redOpName(RedOp op);
const char* collKindName(CollKind k);

// Where an operand lives, as an algorithm names it: the caller's input or output buffer, or a
// work buffer the executor provides for the call (Schedule::scratchElems).
// kUser names one of Schedule::userBuffers (grouped send/recv, each with its own buffer).
enum class BufferRole : uint8_t { kInput, kOutput, kScratch, kUser };

class Codec;
struct CodecCall;

struct CollRequest {
  CollKind kind = CollKind::kAllReduce;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  int root = 0;
  Codec* codec = nullptr;  // never null once the communicator has accepted the call
  CodecCall* codecCall = nullptr;  // compressed calls: residual, call number, statistics
  // Which codec method made the call, for the mismatch check: its id (0: dense, as a plain call
  // is) and a hash of its canonical spec (0 for dense). The method differs from `codec` when it
  // runs dense inner calls (PowerSGD) or falls back to dense for a small tensor.
  uint8_t codecMethod = 0;
  uint32_t specHash = 0;
  void* stream = nullptr;
  // For an inner call a codec makes on its own (the pay-off guard's exchange of figures): what
  // it is, named by the user's call it belongs to; the ranks' disagreement errors start with it.
  const char* partOf = nullptr;
  // Set by the communicator: every rank shares its shared-memory window (one host, shm), the
  // buffers are host memory and the call is dense, so the direct all-reduce can run it.
  bool windowed = false;

  bool inPlace() const { return sendbuf == recvbuf; }
  size_t bytes() const { return count * dataTypeSize(dtype); }
};

}  // namespace squeeze
