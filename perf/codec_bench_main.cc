// sqz-codec-bench's main (see codec_bench.cc): the flags, the checks that must stop a run before
// any timing (no GPU for -d cuda, a -J path that cannot be written), then the table.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>

#include "codec_bench.h"
#include "codec_bench_flags.h"
#include "json_file.h"
#include "perf_json.h"
#include "squeeze_config.h"
#if SQZ_HAVE_CUDA
#include "device/cuda/runtime.h"
#endif

namespace squeeze::perf {
namespace {

int codecBenchMain(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  CodecBenchOptions o;
  int status = parseCodecBenchOptions(argc, argv, &o);
  if (status >= 0) return status;
  // -J: opened now, so a path that cannot be written stops the run before any timing.
  JsonFile json;
  JsonRunInfo runInfo;
  if (o.cuda) {
#if SQZ_HAVE_CUDA
    if (cuda::deviceCount() == 0) {
      std::fprintf(stderr, "%s: -d cuda: %s\n", kCodecBenchProgram,
                   cuda::unavailableReason().c_str());
      return 2;
    }
#else
    std::fprintf(stderr,
                 "%s: -d cuda: this build has no CUDA (configure it with -Dcuda=enabled where "
                 "the CUDA toolkit is installed)\n",
                 kCodecBenchProgram);
    return 2;
#endif
  }
  if (o.jsonPath) {
    std::string why;
    if (!json.open(o.jsonPath, &why)) {
      std::fprintf(stderr, "%s: cannot write the -J file '%s': %s\n", kCodecBenchProgram,
                   o.jsonPath, why.c_str());
      return 2;
    }
    runInfo.program = kCodecBenchProgram;
    runInfo.collective = "codec-bench";
    runInfo.nranks = 1;
    runInfo.hosts = {hostName()};
    runInfo.argc = argc;
    runInfo.argv = argv;
    runInfo.started = std::time(nullptr);
  }
  if (o.counts.empty()) o.counts.push_back(o.count);
  int worst = 0;
  for (size_t i = 0; i < o.counts.size(); ++i) {
    o.count = o.counts[i];
    o.onceRows = i == 0;
    if (i > 0) std::printf("\n");
    CodecBench bench(o, o.jsonPath ? &json : nullptr, runInfo);
    worst = std::max(worst, bench.run());
    if (worst == 2) break;  // the user's mistake (a bad -z): said once
  }
  return worst;
}

}  // namespace
}  // namespace squeeze::perf

int main(int argc, char** argv) { return squeeze::perf::codecBenchMain(argc, argv); }
