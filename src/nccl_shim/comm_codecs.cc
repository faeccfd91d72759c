// SQZ_NCCL_CODEC for the shim's communicators: the rules are parsed once per process, checked
// and attached at init, matched on each all-reduce (one codec per sendbuff and count), and the
// codecs freed at destroy and abort.
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "nccl_shim/codec_rules.h"
#include "nccl_shim/shim_call.h"

namespace squeeze::nccl_shim {

namespace {

// The process's rules, parsed once; a bad value fails every communicator init with the reason.
struct CodecEnv {
  std::vector<CodecRule> rules;
  std::string error;
};
const CodecEnv& codecEnv() {
  static const CodecEnv env = [] {
    CodecEnv e;
    const char* text = std::getenv("SQZ_NCCL_CODEC");
    if (!text) return e;
    try {
      e.rules = parseCodecRules(text);
    } catch (const std::invalid_argument& ex) {
      e.error = ex.what();
    }
    return e;
  }();
  return env;
}

}  // namespace

// A new communicator takes the rules after checking each spec with Squeeze (a codec made and
// freed), so a misspelt codec fails at init, not at the first large all-reduce.
ncclResult_t attachCodecRules(ncclComm* comm) {
  const CodecEnv& env = codecEnv();
  if (!env.error.empty()) return fail(ncclInvalidArgument, env.error);
  for (const CodecRule& rule : env.rules) {
    if (rule.spec == "dense") continue;
    sqzCodec_t probe = nullptr;
    const sqzResult_t r = sqzCodecCreate(&probe, rule.spec.c_str(), 1024, sqzFloat32, comm->sqz);
    if (r != sqzSuccess)
      return fail(toNccl(r), "SQZ_NCCL_CODEC: '", rule.spec, "': ", sqzGetLastError(nullptr));
    sqzCodecDestroy(probe);
  }
  comm->codecRules = env.rules;
  return ncclSuccess;
}

// The codec of an all-reduce, or null for a plain one: float32 sum or average whose size a rule
// names. One codec per (sendbuff, count): a training loop all-reduces the same gradient buffers
// every step, and each buffer's error-feedback residual must come back to it.
ncclResult_t codecOf(ncclComm* comm, const void* sendbuff, size_t count, sqzDataType_t datatype,
                     sqzRedOp_t op, sqzCodec_t* codec) {
  *codec = nullptr;
  if (comm->codecRules.empty() || datatype != sqzFloat32 || (op != sqzSum && op != sqzAvg))
    return ncclSuccess;
  if (auto it = comm->codecs.find({sendbuff, count}); it != comm->codecs.end()) {
    *codec = it->second;  // every step after the first: the rule was matched then
    return ncclSuccess;
  }
  const std::string spec = codecFor(comm->codecRules, count * sizeof(float));
  if (spec.empty()) return ncclSuccess;
  const sqzResult_t r = sqzCodecCreate(codec, spec.c_str(), count, sqzFloat32, comm->sqz);
  if (r != sqzSuccess) return forward(r);
  comm->codecs[{sendbuff, count}] = *codec;
  return ncclSuccess;
}

void destroyCodecs(ncclComm* comm) {
  for (auto& [key, codec] : comm->codecs) sqzCodecDestroy(codec);
  comm->codecs.clear();
}

}  // namespace squeeze::nccl_shim
