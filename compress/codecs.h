// The codec methods: each file under compress/ that has methods registers them
// (SQZ_CODEC_METHODS), and compress/meson.build's list of those files makes the registry call
// each, so that a new method is its file and its name in that list. A chunk codec's method
// makes a CodecHandle over one Codec per chunk; a method with state or a composite call (DGC,
// PowerSGD, the adaptive ones) makes its CodecHandle subclass.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/handle.h"
#include "compress/spec.h"

namespace squeeze {

struct CodecMethod {
  const char* name;
  uint8_t id;            // carried in message headers: part of the protocol (base/wire.h)
  const char* keys;      // keys the method reads, besides ef, min_bytes and auto_dense; an
                         // adaptive method ("base,...") also takes its base's keys
  const char* description;
  bool lossy;            // float32 only, sum/avg, error feedback on by default
  std::unique_ptr<CodecHandle> (*make)(const CodecSpec& spec, size_t count, DataType dtype);
  // A chunk codec's maker (make is a CodecHandle over it); null for the other methods.
  std::unique_ptr<Codec> (*makeChunk)(const CodecSpec& spec) = nullptr;
};

// Adds a method to the table, from a file's SQZ_CODEC_METHODS body. Its id must be unused
// (tests/unit/wire_test.cc pins the shipped ones); a second method under an id or a name stops
// the program when the table is built (at load, or at its first use) with both names.
void addCodecMethod(const CodecMethod& method);
// SQZ_CODEC_METHODS(terngrad) { addCodecMethod(...); } in compress/terngrad.cc defines
// registerCodecMethods_terngrad(), which the registry calls when it builds the table; the list
// of files it calls is compress/meson.build's codec_method_files.
#define SQZ_CODEC_METHODS(file) void registerCodecMethods_##file()

// A chunk codec's row: MakeChunk's Codec in a CodecHandle.
template <std::unique_ptr<Codec> (*MakeChunk)(const CodecSpec&)>
CodecMethod chunkMethod(const char* name, uint8_t id, const char* keys, const char* description,
                        bool lossy) {
  return {name, id, keys, description, lossy,
          [](const CodecSpec& spec, size_t count, DataType dtype) {
            return std::make_unique<CodecHandle>(spec, count, dtype, MakeChunk(spec));
          },
          MakeChunk};
}

// Every registered method, by id.
const std::vector<CodecMethod>& codecMethods();
// The method called `name`, or null.
const CodecMethod* findCodecMethod(const std::string& name);
// The chunk codec of spec.method (a chunk codec's method: throws kInvalidArgument otherwise).
std::unique_ptr<Codec> makeChunkCodec(const CodecSpec& spec);

}  // namespace squeeze
