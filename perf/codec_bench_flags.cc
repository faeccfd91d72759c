// sqz-codec-bench's flags; see codec_bench_flags.h.
#include "codec_bench_flags.h"

#include <getopt.h>

#include <algorithm>
#include <string>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sweep_flags.h"

namespace squeeze::perf {
namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "Usage: %s [options]\n"
               "Single-thread throughput of each codec's encode, encodeFeedback, combine and\n"
               "decode, in GB/s of dense float32 input, with the payload size and ratio.\n"
               "  -s, --size <values>   float32 values per chunk (default 1M; K/M suffixes;\n"
               "                        a pipeline chunk of SQZ_CHUNK_BYTES=512K is 128K); a\n"
               "                        comma-separated list (256K,1M,16M,64M) runs a table\n"
               "                        per size\n"
               "  -r, --reps <n>        timed runs per figure; the median is printed (default 5)\n"
               "  -z, --codec <spec>    bench this codec spec (e.g. topk:ratio=0.001) instead of\n"
               "                        every registered method; repeat for several\n"
               "  -S, --selection       add the selection row: topk:ratio=0.001,sample=1 encode\n"
               "                        of one chunk of 64M floats against std::nth_element of\n"
               "                        the same k over the 64M magnitudes (allocates ~0.5 GB,\n"
               "                        hence opt-in; -d cuda has its own, always)\n"
               "  -d, --device <where>  host: the CPU kernels on one thread (default); cuda: the\n"
               "                        CUDA kernels on GPU 0's memory, timed with cudaEvents,\n"
               "                        with the device's copy bandwidth and top-k of 64M values\n"
               "  -J, --json <file>     also write the rows as JSON (format squeeze-perf/1)\n"
               "                        to <file>\n"
               "  -h, --help            this text\n",
               kCodecBenchProgram);
}

// Values, not bytes: the K/M/G of the perf drivers' sizes, no B; at most 4G (u32 indices in
// sparse payloads).
bool parseCount(const char* text, size_t* out) {
  size_t count = 0;
  if (!parseSize(text, &count, /*byteSuffix=*/false) || count < 1 || count > 4000000000u)
    return false;
  *out = count;
  return true;
}

}  // namespace

int parseCodecBenchOptions(int argc, char** argv, CodecBenchOptions* o) {
  auto bad = [](const std::string& msg) {
    std::fprintf(stderr, "%s: %s\n", kCodecBenchProgram, msg.c_str());
    usage(stderr);
    return 2;
  };
  static const option kLong[] = {
      {"size", required_argument, nullptr, 's'},   {"reps", required_argument, nullptr, 'r'},
      {"codec", required_argument, nullptr, 'z'},  {"selection", no_argument, nullptr, 'S'},
      {"device", required_argument, nullptr, 'd'}, {"json", required_argument, nullptr, 'J'},
      {"help", no_argument, nullptr, 'h'},         {nullptr, 0, nullptr, 0},
  };
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":s:r:z:Sd:J:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 's': {
        o->counts.clear();
        std::string list = optarg;
        for (size_t at = 0; at <= list.size();) {
          const size_t comma = std::min(list.find(',', at), list.size());
          const std::string one = list.substr(at, comma - at);
          size_t count = 0;
          if (!parseCount(one.c_str(), &count))
            return bad("invalid size '" + one +
                       "' for -s (values, 1 to 4G, e.g. 128K or 1M; several: 256K,1M)");
          o->counts.push_back(count);
          at = comma + 1;
        }
        o->count = o->counts.front();
        break;
      }
      case 'r': {
        char* end = nullptr;
        long v = std::strtol(optarg, &end, 10);
        if (end == optarg || *end != '\0' || v < 1 || v > 100000)
          return bad(std::string("invalid run count '") + optarg + "' for -r (need >= 1)");
        o->reps = static_cast<int>(v);
        break;
      }
      case 'z':
        if (*optarg == '\0') return bad("-z needs a codec spec, e.g. -z int8");
        o->specs.push_back(optarg);
        break;
      case 'S':
        o->selection = true;
        break;
      case 'd':
        if (std::strcmp(optarg, "cuda") != 0 && std::strcmp(optarg, "host") != 0)
          return bad(std::string("unknown device '") + optarg + "' for -d (cuda or host)");
        o->cuda = optarg[0] == 'c';
        break;
      case 'J':
        if (*optarg == '\0') return bad("-J needs a file name, e.g. -J codecs.json");
        o->jsonPath = optarg;
        break;
      case 'h':
        usage(stdout);
        return 0;
      case ':':
        return bad(std::string("option '") + argv[optind - 1] + "' needs a value");
      default:
        return bad(std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind < argc) return bad(std::string("unexpected argument '") + argv[optind] + "'");
  if (o->jsonPath && o->counts.size() > 1)
    return bad("-J writes one size's table: give -s one size, or run once per size");
  return -1;
}

}  // namespace squeeze::perf
