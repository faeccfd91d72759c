// The table of codec methods: one line registers a method (see codecs.h).
#include <algorithm>

#include "base/error.h"
#include "base/strings.h"
#include "base/wire.h"
#include "compress/codecs.h"

namespace squeeze {
namespace {

template <std::unique_ptr<Codec> (*MakeChunk)(const CodecSpec&)>
std::unique_ptr<CodecHandle> chunked(const CodecSpec& spec, size_t count, DataType dtype) {
  return std::make_unique<CodecHandle>(spec, count, dtype, MakeChunk(spec));
}

// A row of the table: the method's name is its header id's (base/wire.h).
CodecMethod row(CodecId id, const char* keys, const char* description, bool lossy,
                decltype(CodecMethod::make) make) {
  return {codecIdName(uint8_t(id)), uint8_t(id), keys, description, lossy, make};
}

}  // namespace

const std::vector<CodecMethod>& codecMethods() {
  static const std::vector<CodecMethod> table = {
      row(CodecId::kDense, "", "the values themselves: exactly sqzAllReduce", false, chunked<makeDenseCodec>),
      row(CodecId::kFp16, "", "IEEE half on the wire; widen, add, narrow", true, chunked<makeFp16Codec>),
      row(CodecId::kBf16, "", "bfloat16 on the wire; widen, add, narrow", true, chunked<makeBf16Codec>),
      row(CodecId::kInt8, "block", "int8 codes with a max|v|/127 scale per block; dequantize, add, requantize", true, chunked<makeInt8Codec>),
      row(CodecId::kQsgd, "levels,block,seed", "QSGD: unbiased stochastic rounding to s levels of the block's L2 norm", true, chunked<makeQsgdCodec>),
      row(CodecId::kOnebit, "block", "1-bit SGD: sign bits with the two side means per column (block)", true, chunked<makeOnebitCodec>),
      row(CodecId::kTerngrad, "block,seed", "TernGrad: unbiased {0, +s, -s} with s = max|v| per block", true, chunked<makeTerngradCodec>),
      row(CodecId::kTopk, "ratio,sample", "the k largest magnitudes per chunk; re-selected per hop", true, chunked<makeTopkCodec>),
      row(CodecId::kRandk, "ratio,seed", "k shared random indices per chunk; payloads add exactly", true, chunked<makeRandkCodec>),
      row(CodecId::kThreshold, "threshold", "every value with |v| >= threshold", true, chunked<makeThresholdCodec>),
      row(CodecId::kDgc, "ratio,momentum,clip,warmup,sample", "Deep Gradient Compression: top-k with momentum correction, clipping, masking, warm-up", true, makeDgcHandle),
      row(CodecId::kPowerSgd, "rank,cols,seed", "low-rank P Q^T by power iteration", true, makePowerSgd),
      row(CodecId::kGravac, "base,cf_min,cf_max,step,window,eps,omega", "GraVAC: the CF of a base sparsifier chosen from its compression gain and step throughput", true, makeGravac),
      row(CodecId::kAccordion, "base,cf_low,cf_high,interval,eta", "Accordion: a base sparsifier's low CF in critical regimes (fast-changing gradient norm), high CF otherwise", true, makeAccordion),
  };
  return table;
}

std::string codecMethodList() {
  std::string out;
  for (const auto& m : codecMethods())
    out += strCat(out.empty() ? "" : ", ", m.name);
  return out;
}

const CodecMethod* findCodecMethod(const std::string& name) {
  for (const auto& m : codecMethods())
    if (name == m.name) return &m;
  return nullptr;
}

std::unique_ptr<CodecHandle> createCodecHandle(const CodecSpec& spec, size_t count,
                                               DataType dtype) {
  const CodecMethod* method = findCodecMethod(spec.method);
  if (!method)
    raise(ErrorCode::kInvalidArgument, "unknown codec method '", spec.method, "'; choose from ",
          codecMethodList(), ".");
  std::vector<std::string> allowed = split(method->keys, ',');
  if (method->lossy)
    for (const char* key : {"ef", "min_bytes", "auto_dense"}) allowed.push_back(key);
  // An adaptive method also takes its base's keys (the base's maker checks its values).
  const bool adaptive = std::find(allowed.begin(), allowed.end(), "base") != allowed.end();
  if (adaptive && spec.base)
    if (const CodecMethod* base = findCodecMethod(*spec.base))
      for (const std::string& key : split(base->keys, ','))
        if (key != "ratio") allowed.push_back(key);
  if (spec.base && !adaptive)
    raise(ErrorCode::kInvalidArgument, "codec ", method->name, " does not take 'base'; only "
          "the adaptive methods (gravac, accordion) have a base method.");
  for (const std::string& key : spec.keysSet()) {
    bool ok = false;
    for (const auto& a : allowed) ok |= a == key;
    if (!ok) {
      std::string keys;
      for (const auto& a : allowed) keys += strCat(keys.empty() ? "" : ", ", a);
      raise(ErrorCode::kInvalidArgument, "codec ", method->name, " does not take '", key,
            "'; its keys are ", keys.empty() ? "none" : keys, ".");
    }
  }
  // A whole number of bytes, as a spec string can say it (sqzCodecConfig_t.minBytes is a double):
  // the canonical string, hashed into headers and saved with the state, must parse back.
  if (spec.minBytes) spec.getWhole("min_bytes", 0, 0, 0x1p53);
  if (method->lossy && dtype != DataType::kFloat32)
    raise(ErrorCode::kInvalidArgument, "codec ", method->name, " compresses float32 gradients, "
          "not ", dataTypeName(dtype), "; convert the tensor or use codec 'dense'.");
  return method->make(spec, count, dtype);
}

}  // namespace squeeze
