// sqzrun's command line: option parsing and the help text (see options.h).
#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "base/strings.h"

namespace squeeze::launcher {

const char kUsage[] =
    "Usage: sqzrun [options] -n N PROGRAM [ARGS...]\n"
    "\n"
    "Starts N ranks of PROGRAM on this host. sqzrun hosts the rendezvous on 127.0.0.1, so\n"
    "sqzCommInitFromEnv() in every rank joins one communicator. Each rank gets SQZ_UNIQUE_ID,\n"
    "SQZ_RANK, SQZ_WORLD_SIZE, SQZ_LOCAL_RANK, SQZ_LOCAL_SIZE, and SQZ_SOCKET_IFNAME=lo unless\n"
    "it is already set; also torch.distributed's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
    "and MASTER_ADDR=127.0.0.1 with a free MASTER_PORT unless both are set (init_method env://).\n"
    "The rest of the environment is inherited.\n"
    "\n"
    "Options:\n"
    "  -n, --np N          number of ranks, 1 to 1024 (required)\n"
    "  --timeout SECONDS   stop every rank and exit 124 after this long (default: no limit)\n"
    "  --bind              bind rank i to core i mod (number of cores), with hwloc; sqz-info\n"
    "                      lists the cores\n"
    "  --tag-output        prefix every line the ranks print with \"[RANK] \"\n"
    "  -v, --verbose       print the rendezvous address and each rank's pid and binding\n"
    "  -h, --help          print this help and exit\n"
    "\n"
    "SIGINT, SIGTERM and SIGHUP are forwarded to every rank; a second SIGINT kills them. When\n"
    "a rank exits non-zero or is killed, the others get SIGTERM, then SIGKILL 2 s later. The\n"
    "ranks run in their own process group; when stdin is a terminal they read /dev/null.\n"
    "\n"
    "Exit status: 0 when every rank exits 0; else the status of the first rank that failed\n"
    "(128+N for signal N); 124 on --timeout; 127 when PROGRAM cannot be run; 2 on bad\n"
    "usage; 1 when sqzrun itself fails.\n";

namespace {

std::optional<int> parseRankCount(const std::string& s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  for (char c : s)
    if (c < '0' || c > '9') return std::nullopt;
  return std::stoi(s);
}

}  // namespace

std::optional<Options> parseOptions(int argc, char** argv) {
  Options opt;
  bool haveN = false;
  int i = 1;
  // The value of an option given as "--opt VALUE", "--opt=VALUE" or (short) "-nVALUE".
  auto takeValue = [&](const std::string& arg, const std::string& name) -> std::string {
    if (arg.size() > name.size()) {
      // "--timeout=5" or "-n4"
      return arg[name.size()] == '=' ? arg.substr(name.size() + 1) : arg.substr(name.size());
    }
    if (i + 1 >= argc) throw UsageError{strCat(name, " needs a value")};
    return argv[++i];
  };
  auto matches = [](const std::string& arg, const std::string& name, bool glued) {
    if (arg == name) return true;
    if (arg.rfind(name + "=", 0) == 0) return true;
    return glued && arg.size() > name.size() && arg.rfind(name, 0) == 0;
  };

  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // PROGRAM
    if (arg == "-h" || arg == "--help") return std::nullopt;
    if (matches(arg, "-n", true) || matches(arg, "--np", false)) {
      std::string name = arg.rfind("--np", 0) == 0 ? "--np" : "-n";
      std::string v = takeValue(arg, name);
      auto n = parseRankCount(v);
      if (!n || *n < 1 || *n > kMaxRanks)
        throw UsageError{
            strCat(name, " wants a rank count from 1 to ", kMaxRanks, ", not '", v, "'")};
      opt.nranks = *n;
      haveN = true;
    } else if (matches(arg, "--timeout", false)) {
      std::string v = takeValue(arg, "--timeout");
      char* end = nullptr;
      errno = 0;
      double s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(s) || s <= 0 || s > 1e7)
        throw UsageError{strCat("--timeout wants a positive number of seconds, not '", v, "'")};
      opt.timeoutSec = s;
    } else if (arg == "--bind") {
      opt.bind = true;
    } else if (arg == "--tag-output") {
      opt.tagOutput = true;
    } else if (arg == "-v" || arg == "--verbose") {
      opt.verbose = true;
    } else {
      throw UsageError{strCat("unknown option '", arg, "'")};
    }
  }
  for (; i < argc; ++i) opt.command.emplace_back(argv[i]);
  if (!haveN) throw UsageError{"-n N is required"};
  if (opt.command.empty()) throw UsageError{"no PROGRAM to run"};
  return opt;
}

}  // namespace squeeze::launcher
