// Fuzz target `spec`: the strings users configure Squeeze with. The first byte picks
//   even: a codec spec ("topk:ratio=0.001"): CodecSpec::parse (compress/spec.cc), its canonical
//         form, and createCodecHandle for a small float32 tensor (the method's own ranges);
//   odd:  SQZ_* variables: the rest is lines "<key byte><value>", each setting the variable the
//         key byte picks from the parameter table; then loadParams (base/params.cc),
//         CommConfig::fromParams and the SQZ_ALGO tuner, which then chooses algorithms for a few
//         calls, as a communicator would.
// Contract: bad input is Error(kInvalidArgument) (never another code, another exception or UB);
// a spec that parses prints a canonical string that parses to the same canonical string; and
// settings that are accepted work: the tuner then picks an algorithm for every call.
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/tuner.h"
#include "compress/codecs.h"
#include "core/config.h"
#include "tests/fuzz/fuzz_util.h"

using namespace squeeze;

namespace {

const unsigned kBadInput = fuzz::codeBit(ErrorCode::kInvalidArgument);

void codecSpec(fuzz::Input& in) {
  const size_t count = in.pick(65);
  const std::string text = in.restString();
  CodecSpec spec;
  if (fuzz::expectOnlyErrors("CodecSpec::parse", kBadInput, [&] { spec = CodecSpec::parse(text); }))
    return;
  const std::string canonical = spec.str();
  fuzz::expectOnlyErrors("CodecSpec::parse of the canonical form", 0, [&] {
    const std::string again = CodecSpec::parse(canonical).str();
    if (again != canonical)
      fuzz::fail(
          strCat("spec '", text, "' prints as '", canonical, "', which prints as '", again, "'"));
  });
  (void)spec.keysSet();
  fuzz::expectOnlyErrors("createCodecHandle", kBadInput, [&] {
    auto handle = createCodecHandle(spec, count, DataType::kFloat32);
    if (!handle->chunkCodec()) fuzz::fail(strCat("codec '", canonical, "' has no chunk codec"));
  });
}

// Sets the variables, restores the environment as it was on the way out (the replay runs with
// the test suite's SQZ_SOCKET_IFNAME and SQZ_TIMEOUT_MS).
class EnvScope {
 public:
  void set(const char* key, const std::string& value) {
    if (!saved_.count(key)) {
      const char* old = std::getenv(key);
      saved_[key] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    setenv(key, value.c_str(), 1);
  }
  ~EnvScope() {
    for (const auto& [key, old] : saved_)
      if (old)
        setenv(key.c_str(), old->c_str(), 1);
      else
        unsetenv(key.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

void paramSettings(fuzz::Input& in) {
  const auto& table = paramTable();
  EnvScope env;
  const std::string rest = in.restString();
  for (const std::string& line : split(rest, '\n')) {
    if (line.empty()) continue;
    const ParamInfo& p = table[static_cast<uint8_t>(line[0]) % table.size()];
    // A C string ends at NUL: the environment cannot hold one.
    std::string value = line.substr(1);
    value = value.substr(0, value.find('\0'));
    env.set(p.key, value);
  }
  Params params;
  if (fuzz::expectOnlyErrors("loadParams", kBadInput, [&] { params = loadParams(); })) return;
  CommConfig config;
  if (fuzz::expectOnlyErrors("CommConfig::fromParams", kBadInput,
                             [&] { config = CommConfig::fromParams(params); }))
    return;
  std::optional<Tuner> tuner;
  if (fuzz::expectOnlyErrors("Tuner (SQZ_ALGO)", kBadInput,
                             [&] { tuner.emplace(config.algoSpec, config.tcpModel); }))
    return;
  for (const CostModel* model : {&config.tcpModel, &config.shmModel, &config.netModel}) {
    Tuner t(config.algoSpec, *model);
    for (CollKind kind : {CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduce,
                          CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAlltoAll})
      for (size_t count : {size_t(0), size_t(1), size_t(4096), size_t(1) << 26})
        for (int nranks : {1, 2, 3, 8}) {
          CollRequest req;
          req.kind = kind;
          req.count = count;
          // Accepted settings leave the tuner a choice for every call (fromParams bounds the
          // rates: SQZ_REDUCE_GBPS=1e-320 would make every cost infinite).
          fuzz::expectOnlyErrors("Tuner::choose", 0, [&] { (void)t.choose(req, nranks); });
        }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  if (in.byte() % 2 == 0)
    codecSpec(in);
  else
    paramSettings(in);
  return 0;
}
