// What the NCCL shim keeps per communicator (an ncclComm_t is one of these): the Squeeze
// communicator, the codecs SQZ_NCCL_CODEC gives its all-reduces (one per buffer and count, so
// error feedback follows each gradient buffer), its PreMulSum operators and its buffer
// registrations; and the calls that manage those codecs.
#pragma once

#include <nccl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "nccl_shim/codec_rules.h"
#include "squeeze/squeeze.h"

namespace squeeze::nccl_shim {

constexpr uint32_t kShimCommMagic = 0x4c43434e;  // "NCCL"

// An operator from ncclRedOpCreatePreMulSum: sum of (scalar * x), scalar in the op's datatype.
struct PreMulSum {
  sqzDataType_t datatype;
  std::array<unsigned char, 8> scalar;  // ncclScalarHostImmediate: the bytes, read at creation
  const void* deviceScalar = nullptr;   // ncclScalarDevice: read by each call as it is issued
};

// The value ncclRedOpCreatePreMulSum stores in *op when it fails (never one it hands out): a
// caller that ignores the failure, as torch does, gets that failure back from the collective
// instead of the ncclSum its zero-initialized op would have meant.
constexpr int kFailedPreMulSum = ncclMaxRedOp;

// What ncclCommRegister hands out: the range it was given, and how many registrations of a
// range within it the handle stands for (NCCL hands the same handle out again for a range an
// earlier registration covers, and ncclCommDeregister releases one each).
struct Registration {
  uintptr_t begin;
  uintptr_t end;  // one past the last byte
  int refs = 1;
};

}  // namespace squeeze::nccl_shim

struct ncclComm {
  uint32_t magic = squeeze::nccl_shim::kShimCommMagic;
  sqzComm_t sqz = nullptr;
  bool finalized = false;  // after ncclCommFinalize only queries and ncclCommDestroy remain
  std::atomic<int> inflight{0};  // data calls running (group.cc counts them)
  std::vector<squeeze::nccl_shim::CodecRule> codecRules;
  std::map<std::pair<const void*, size_t>, sqzCodec_t> codecs;  // by (sendbuff, count)
  // Protects the three below (ops may be made on any thread).
  std::mutex preMulSumMu;
  std::map<int, squeeze::nccl_shim::PreMulSum> preMulSums;  // by ncclRedOp_t value
  int nextPreMulSum = ncclNumOps;
  std::string preMulSumFailure;  // why the last ncclRedOpCreatePreMulSum that failed did
  // ncclCommRegister's handles (each the address of its Registration), freed with the
  // communicator. registrationsMu protects registrations (torch registers from its allocator's
  // hooks, on any thread).
  std::mutex registrationsMu;
  std::map<const void*, std::unique_ptr<squeeze::nccl_shim::Registration>> registrations;
};

namespace squeeze::nccl_shim {

// SQZ_NCCL_CODEC per communicator (comm_codecs.cc): check the process's rules and attach them
// at init; the codec an all-reduce uses (null: none), made on its first call; free them all.
ncclResult_t attachCodecRules(ncclComm* comm);
ncclResult_t codecOf(ncclComm* comm, const void* sendbuff, size_t count, sqzDataType_t datatype,
                     sqzRedOp_t op, sqzCodec_t* codec);
void destroyCodecs(ncclComm* comm);

}  // namespace squeeze::nccl_shim
