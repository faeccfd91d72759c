// The table of codec methods, filled by the methods' registrations (codecs.h), and the checks of
// a spec against its method.
#include <algorithm>

#include "base/error.h"
#include "base/strings.h"
#include "base/wire.h"
#include "compress/codecs.h"

namespace squeeze {
namespace {

// Filled before main by the registrations, in id order; read-only after.
std::vector<CodecMethod>& table() {
  static std::vector<CodecMethod> methods;
  return methods;
}

}  // namespace

CodecRegistration::CodecRegistration(const CodecMethod& method) {
  registerCodecIdName(method.id, method.name);  // stops on a second id or name
  std::vector<CodecMethod>& methods = table();
  auto at = std::find_if(methods.begin(), methods.end(),
                         [&](const CodecMethod& m) { return m.id > method.id; });
  methods.insert(at, method);
}

const std::vector<CodecMethod>& codecMethods() { return table(); }

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

std::unique_ptr<Codec> makeChunkCodec(const CodecSpec& spec) {
  const CodecMethod* method = findCodecMethod(spec.method);
  if (!method || !method->makeChunk) {
    std::string chunked;
    for (const auto& m : codecMethods())
      if (m.makeChunk) chunked += strCat(chunked.empty() ? "" : ", ", m.name);
    raise(ErrorCode::kInvalidArgument, "'", spec.method, "' is not a chunk codec; choose from ",
          chunked, ".");
  }
  return method->makeChunk(spec);
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
