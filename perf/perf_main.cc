// perfMain, the whole of every sqz-*-perf binary's main (see common.h): flags, the GPU of -d
// cuda, -a's SQZ_ALGO and -J's file before the communicator exists, then the Bench (bench.h).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include "bench.h"
#include "common.h"
#include "driver_options.h"
#include "gpu.h"
#include "json_file.h"
#include "perf_json.h"

namespace squeeze::perf {
namespace {

void* gCallStream = nullptr;  // callStream(); set once, before the communicator exists

}  // namespace

int perfMain(int argc, char** argv, const PerfColl& coll) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // one line at a time, so progress shows
  Options o;
  int status = parseOptions(argc, argv, coll, &o);
  if (status >= 0) return status;
  Gpu gpu;
  if (o.memory == Memory::kCuda) {
    std::string why = setUpGpu(&gpu);
    if (!why.empty()) {
      // Every rank says it: whether a GPU is usable can differ between hosts.
      std::string who = haveLauncherEnv() && launcherRank() >= 0
                            ? "rank " + std::to_string(launcherRank()) + ": "
                            : "";
      std::fprintf(stderr, "%s: %s-d cuda: %s\n", coll.program, who.c_str(), why.c_str());
      return 2;
    }
    gCallStream = gpu.stream;
  }
  if (o.algo) {
    // Read by the library when the communicator is created; it rejects unknown names there,
    // with a message naming the valid ones.
    std::string spec = std::string(coll.algoColl) + ":" + o.algo;
    if (setenv("SQZ_ALGO", spec.c_str(), 1) != 0) {
      std::fprintf(stderr, "%s: cannot set SQZ_ALGO: %s\n", coll.program, std::strerror(errno));
      return 1;
    }
  }
  // -J: opened now, on the rank that writes it, so a path that cannot be written stops the run
  // before any collective (the other ranks are stopped by the launcher when this one exits).
  JsonFile json;
  JsonRunInfo runInfo;
  if (o.jsonPath) {
    if (launcherRank() <= 0) {
      std::string why;
      if (!json.open(o.jsonPath, &why)) {
        std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", coll.program, o.jsonPath,
                     why.c_str());
        return 2;
      }
    }
    // "sqz-allreduce-perf" -> "allreduce"
    std::string_view name = coll.program;
    if (name.rfind("sqz-", 0) == 0) name.remove_prefix(4);
    if (name.size() > 5 && name.substr(name.size() - 5) == "-perf") name.remove_suffix(5);
    runInfo.program = coll.program;
    runInfo.collective = name;
    // What the library was told: SQZ_TRANSPORT, else its default (base/params.h).
    const char* transport = std::getenv("SQZ_TRANSPORT");
    runInfo.transport = transport && *transport ? transport : "cuda_ipc,shm,tcp";
    runInfo.argc = argc;
    runInfo.argv = argv;
    runInfo.started = std::time(nullptr);
  }
  Bench bench(coll, o, gpu, &json, runInfo);
  return bench.run();
}

void* callStream() { return gCallStream; }

}  // namespace squeeze::perf
