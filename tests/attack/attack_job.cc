// sqz-attack-job: the "live job" that tests/attack/attack_test.sh attacks. Run under sqzrun (or
// any launcher sqzCommInitFromEnv reads), it makes a communicator, then for every round splits
// off a child communicator (which opens fresh listening ports: the child's rendezvous root on the
// leader and every rank's peer listener, so an attacker gets new setup windows to hit each
// round), all-reduces data with a known exact sum on the child and on the parent, compares bit
// for bit, and destroys the child.
//
//   sqz-attack-job [--rounds K] [--count N] [--pause-ms MS] [--id-file PATH]
//
// --pause-ms: sleep between rounds, so the job lives long enough for connections held on its
// long-lived port (sqzrun's rendezvous root) to meet the library's handshake cap.
// --id-file: rank 0 writes its SQZ_UNIQUE_ID there (secret_log_test.sh extracts the job secret
// from it to look for it in the logs). Rank 0 prints the total and slowest sqzCommSplit time
// (the setup an attacker can stall) and ends with "attack-job: K rounds, W wrong"; the exit status is non-zero
// on any wrong element or failed call, on every rank.
#include <squeeze/squeeze.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int rounds = 30;
  size_t count = 65536;
  int pauseMs = 0;
  std::string idFile;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "sqz-attack-job: %s\n"
               "Usage: sqz-attack-job [--rounds K (1..100000)] [--count N (1..16777216)] "
               "[--pause-ms MS (0..60000)] [--id-file PATH]\n",
               why.c_str());
  std::exit(2);
}

long parseBounded(const char* flag, const char* text, long lo, long hi) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (!*text || *end || v < lo || v > hi)
    usage(std::string(flag) + " wants an integer from " + std::to_string(lo) + " to " +
          std::to_string(hi) + ", not '" + text + "'");
  return v;
}

Options parseOptions(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--rounds") {
      opt.rounds = static_cast<int>(parseBounded("--rounds", value(), 1, 100000));
    } else if (arg == "--count") {
      opt.count = static_cast<size_t>(parseBounded("--count", value(), 1, 1 << 24));
    } else if (arg == "--pause-ms") {
      opt.pauseMs = static_cast<int>(parseBounded("--pause-ms", value(), 0, 60000));
    } else if (arg == "--id-file") {
      opt.idFile = value();
    } else {
      usage("unknown argument '" + arg + "'");
    }
  }
  return opt;
}

// Fails the whole rank: the launcher then stops the others and reports this status.
void check(sqzResult_t rc, const char* call, sqzComm_t comm, int rank, int round) {
  if (rc == sqzSuccess) return;
  std::fprintf(stderr, "attack-job: rank %d, round %d: %s failed: %s: %s\n", rank, round, call,
               sqzGetErrorString(rc), sqzGetLastError(comm));
  std::exit(1);
}

// Inputs whose sum over the ranks is exact in both types: every float value is an integer below
// 2^24 / nranks, every int32 partial sum stays far from overflow.
int32_t intInput(int rank, int round, size_t i) {
  return static_cast<int32_t>((rank + 1) * 100003 + round * 7919 + static_cast<int32_t>(i % 65521));
}
float floatInput(int rank, int round, size_t i) {
  return static_cast<float>((rank + 1) * 1000 + round * 17 + static_cast<int>(i % 1021));
}

// All-reduces (sum) this rank's inputs on `comm` of `nranks` and counts elements that differ
// bit for bit from the locally computed exact sum over the ranks 0..nranks-1.
size_t allReduceWrong(sqzComm_t comm, int rank, int nranks, int round, size_t count,
                      const char* what) {
  std::vector<int32_t> ints(count), intExpected(count, 0);
  std::vector<float> floats(count), floatExpected(count, 0.0f);
  for (size_t i = 0; i < count; ++i) {
    ints[i] = intInput(rank, round, i);
    floats[i] = floatInput(rank, round, i);
    for (int r = 0; r < nranks; ++r) {
      intExpected[i] += intInput(r, round, i);
      floatExpected[i] += floatInput(r, round, i);
    }
  }
  check(sqzAllReduce(ints.data(), ints.data(), count, sqzInt32, sqzSum, comm, nullptr),
        "sqzAllReduce(int32)", comm, rank, round);
  check(sqzAllReduce(floats.data(), floats.data(), count, sqzFloat32, sqzSum, comm, nullptr),
        "sqzAllReduce(float)", comm, rank, round);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    if (ints[i] != intExpected[i] ||
        std::memcmp(&floats[i], &floatExpected[i], sizeof(float)) != 0) {
      if (wrong < 3)
        std::fprintf(stderr,
                     "attack-job: rank %d, round %d, %s: element %zu is (%d, %.9g), expected "
                     "(%d, %.9g)\n",
                     rank, round, what, i, ints[i], floats[i], intExpected[i], floatExpected[i]);
      ++wrong;
    }
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parseOptions(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  sqzComm_t comm = nullptr;
  check(sqzCommInitFromEnv(&comm, nullptr), "sqzCommInitFromEnv", nullptr, -1, -1);
  int rank = -1, nranks = 0;
  check(sqzCommUserRank(comm, &rank), "sqzCommUserRank", comm, -1, -1);
  check(sqzCommCount(comm, &nranks), "sqzCommCount", comm, rank, -1);

  if (rank == 0 && !opt.idFile.empty()) {
    const char* id = std::getenv("SQZ_UNIQUE_ID");
    FILE* f = std::fopen(opt.idFile.c_str(), "w");
    if (!f || std::fprintf(f, "%s\n", id ? id : "") < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "attack-job: cannot write --id-file %s\n", opt.idFile.c_str());
      return 1;
    }
  }

  uint64_t wrong = 0;
  double slowestSplit = 0, totalSplit = 0;
  int slowestRound = 0;
  for (int round = 0; round < opt.rounds; ++round) {
    if (round > 0 && opt.pauseMs > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(opt.pauseMs));
    sqzComm_t child = nullptr;
    const auto splitStart = std::chrono::steady_clock::now();
    check(sqzCommSplit(comm, 0, rank, &child, nullptr), "sqzCommSplit", comm, rank, round);
    const double splitSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - splitStart).count();
    totalSplit += splitSeconds;
    if (splitSeconds > slowestSplit) {
      slowestSplit = splitSeconds;
      slowestRound = round;
    }
    int childRank = -1, childSize = 0;
    check(sqzCommUserRank(child, &childRank), "sqzCommUserRank(child)", child, rank, round);
    check(sqzCommCount(child, &childSize), "sqzCommCount(child)", child, rank, round);
    wrong += allReduceWrong(child, childRank, childSize, round, opt.count, "child");
    wrong += allReduceWrong(comm, rank, nranks, round, opt.count, "parent");
    check(sqzCommDestroy(child), "sqzCommDestroy(child)", nullptr, rank, round);
  }
  // Every rank learns the total, so every rank's exit status says the same.
  check(sqzAllReduce(&wrong, &wrong, 1, sqzUint64, sqzSum, comm, nullptr), "sqzAllReduce(wrong)",
        comm, rank, opt.rounds);
  check(sqzCommDestroy(comm), "sqzCommDestroy", nullptr, rank, opt.rounds);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank == 0) {
    std::printf("attack-job: %d ranks, %zu elements per call, %.2f s; sqzCommSplit on rank 0: "
                "%.1f ms in all, slowest %.1f ms (round %d)\n",
                nranks, opt.count, seconds, 1e3 * totalSplit, 1e3 * slowestSplit, slowestRound);
    std::printf("attack-job: %d rounds, %llu wrong\n", opt.rounds,
                static_cast<unsigned long long>(wrong));
    std::fflush(stdout);
  }
  return wrong == 0 ? 0 : 1;
}
