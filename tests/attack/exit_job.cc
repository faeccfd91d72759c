// sqz-exit-job: one rank of a job that ends in a chosen way while connections keep arriving
// (tests/attack/exit_test.sh). It makes a communicator from the launcher's environment (with
// SQZ_ROOT, rank 0 hosts the rendezvous root in this process), all-reduces values with a known
// exact sum and checks them bit for bit, then ends:
//
//   sqz-exit-job --end destroy|abort|return [--count N] [--exit-delay-ms MS]
//
//   destroy  sqzCommDestroy, then returns from main
//   abort    sqzCommAbort, then returns from main
//   return   returns from main with the communicator alive
//
// Rank 0 also calls sqzGetUniqueId and never uses the id: a root that never serves its round.
// --exit-delay-ms: before anything of Squeeze runs, registers an exit handler that sleeps MS, as
// a program's own slow exit handlers would. Handlers run in reverse order of registration, so it
// runs after libcrypto's (registered when Squeeze first uses it): a thread of Squeeze that still
// accepts connections then meets a cleaned-up libcrypto. Prints "exit-job: rank R of N: W wrong,
// ending by MODE"; the exit status is 0 only when every call succeeded and nothing was wrong.
#include <squeeze/squeeze.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int exitDelayMs = 0;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "sqz-exit-job: %s\n"
               "Usage: sqz-exit-job --end destroy|abort|return [--count N (1..16777216)] "
               "[--exit-delay-ms MS (0..10000)]\n",
               why.c_str());
  std::exit(2);
}

long parseBounded(const std::string& flag, const char* text, long lo, long hi) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (!*text || *end || v < lo || v > hi)
    usage(flag + " wants an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
          ", not '" + text + "'");
  return v;
}

bool ok(sqzResult_t r, const char* call, int rank) {
  if (r == sqzSuccess) return true;
  std::fprintf(stderr, "exit-job: rank %d: %s failed: %s\n", rank, call, sqzGetErrorString(r));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string end;
  size_t count = 65536;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) usage(arg + " needs a value");
    const char* value = argv[++i];
    if (arg == "--end")
      end = value;
    else if (arg == "--count")
      count = static_cast<size_t>(parseBounded(arg, value, 1, 1 << 24));
    else if (arg == "--exit-delay-ms")
      exitDelayMs = static_cast<int>(parseBounded(arg, value, 0, 10000));
    else
      usage("unknown argument '" + arg + "'");
  }
  if (end != "destroy" && end != "abort" && end != "return")
    usage("--end wants destroy, abort or return");
  if (exitDelayMs > 0) std::atexit([] { ::usleep(static_cast<useconds_t>(exitDelayMs) * 1000); });

  sqzComm_t comm = nullptr;
  if (!ok(sqzCommInitFromEnv(&comm, nullptr), "sqzCommInitFromEnv", -1)) return 1;
  int rank = 0, nranks = 0;
  if (!ok(sqzCommUserRank(comm, &rank), "sqzCommUserRank", -1) ||
      !ok(sqzCommCount(comm, &nranks), "sqzCommCount", rank))
    return 1;
  if (rank == 0) {
    sqzUniqueId unused;
    if (!ok(sqzGetUniqueId(&unused), "sqzGetUniqueId", rank)) return 1;
  }
  // Small integers in float: every order of summation gives the same, exact sum.
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>((i % 97) + rank);
  if (!ok(sqzAllReduce(data.data(), data.data(), count, sqzFloat32, sqzSum, comm, nullptr),
          "sqzAllReduce", rank))
    return 1;
  size_t wrong = 0;
  const long rankSum = static_cast<long>(nranks) * (nranks - 1) / 2;
  for (size_t i = 0; i < count; ++i)
    if (data[i] != static_cast<float>(static_cast<long>(i % 97) * nranks + rankSum)) ++wrong;
  std::printf("exit-job: rank %d of %d: %zu wrong, ending by %s\n", rank, nranks, wrong,
              end.c_str());
  std::fflush(stdout);
  if (end == "destroy" && !ok(sqzCommDestroy(comm), "sqzCommDestroy", rank)) return 1;
  if (end == "abort" && !ok(sqzCommAbort(comm), "sqzCommAbort", rank)) return 1;
  return wrong == 0 ? 0 : 1;
}
