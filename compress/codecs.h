// The codec methods' constructors, one per file under compress/, listed in registry.cc. A chunk
// codec's maker returns its Codec; a method with state or a composite call (DGC, PowerSGD)
// returns its CodecHandle subclass.
#pragma once

#include <memory>

#include "compress/codec.h"
#include "compress/handle.h"
#include "compress/spec.h"

namespace squeeze {

struct CodecMethod {
  const char* name;
  uint8_t id;            // carried in message headers (base/wire.h CodecId)
  const char* keys;      // keys the method reads, besides ef, min_bytes and auto_dense; an
                         // adaptive method ("base,...") also takes its base's keys
  const char* description;
  bool lossy;            // float32 only, sum/avg, error feedback on by default
  std::unique_ptr<CodecHandle> (*make)(const CodecSpec& spec, size_t count, DataType dtype);
};

const std::vector<CodecMethod>& codecMethods();
// The method called `name`, or null.
const CodecMethod* findCodecMethod(const std::string& name);

// Chunk codecs (cast.cc, int8.cc, qsgd.cc, onebit.cc, terngrad.cc, topk.cc, randk.cc,
// threshold.cc).
std::unique_ptr<Codec> makeDenseCodec(const CodecSpec& spec);
std::unique_ptr<Codec> makeFp16Codec(const CodecSpec& spec);
std::unique_ptr<Codec> makeBf16Codec(const CodecSpec& spec);
std::unique_ptr<Codec> makeInt8Codec(const CodecSpec& spec);
std::unique_ptr<Codec> makeQsgdCodec(const CodecSpec& spec);
std::unique_ptr<Codec> makeOnebitCodec(const CodecSpec& spec);
std::unique_ptr<Codec> makeTerngradCodec(const CodecSpec& spec);
std::unique_ptr<Codec> makeTopkCodec(const CodecSpec& spec);
std::unique_ptr<Codec> makeRandkCodec(const CodecSpec& spec);
std::unique_ptr<Codec> makeThresholdCodec(const CodecSpec& spec);
std::unique_ptr<CodecHandle> makeDgcHandle(const CodecSpec& spec, size_t count, DataType dtype);
std::unique_ptr<CodecHandle> makePowerSgd(const CodecSpec& spec, size_t count, DataType dtype);
// Adaptive methods around a base sparsifier (adaptive.cc).
std::unique_ptr<CodecHandle> makeGravac(const CodecSpec& spec, size_t count, DataType dtype);
std::unique_ptr<CodecHandle> makeAccordion(const CodecSpec& spec, size_t count, DataType dtype);

}  // namespace squeeze
