// sqz-fault-harness: fault-injection tests of the promise "a dead or silent peer is an error on
// every other rank within the timeout, never a hang; sqzCommAbort unblocks a call in flight"
// (DESIGN.md, Errors). One program is both the harness and the ranks it starts.
//
// Cases (the arguments):
//   kill tcp|shm N   N repetitions: 4 ranks loop checked 8 MiB float all-reduces; one random rank
//                    gets SIGKILL at a random moment; every survivor's call must fail
//                    (sqzRemoteError or sqzTimeout) within SQZ_TIMEOUT_MS (5000) + 2 s.
//   kill tcp|shm N -d cuda
//                    as kill, on device buffers (cudaMalloc on GPU 0, which the 4 rank processes
//                    share): each call is enqueued on a cudaStreamNonBlocking stream and followed
//                    by cudaStreamSynchronize and sqzCommGetAsyncError; every other call is a
//                    ring exchange (sqzSend to the next rank, sqzRecv from the previous one, in
//                    one group) instead of an all-reduce. A rank killed during a
//                    device call makes every survivor's stream be released (the synchronize
//                    returns) with the asynchronous error sqzRemoteError or sqzTimeout, and a
//                    later call refused, within the same bound. Each survivor's message (the
//                    later call's, which carries the asynchronous error's) is printed, and one
//                    at least must name the killed rank. Exits 77 (skipped), saying why, in a
//                    build without CUDA or without a GPU.
//   stop tcp|shm N   as kill, with SIGSTOP and SQZ_TIMEOUT_MS=3000: survivors fail (sqzTimeout,
//                    or sqzRemoteError when a neighbour's timeout reaches them first) no sooner
//                    than 95% of the timeout and within timeout + 10%; a timeout's message names
//                    the operation, its sequence number and a peer waited on.
//   recover tcp|shm N [second]
//                    N repetitions: 4 ranks loop checked 8 MiB dense, top-k and int8 all-reduces
//                    (error feedback on); one random rank gets SIGKILL; every survivor's call
//                    must fail within SQZ_TIMEOUT_MS (5000) + 2 s; then the harness names the lost
//                    rank and the survivors revoke, shrink (sqzCommShrink), make 50 calls of each
//                    kind (dense bit-exact, compressed bitwise equal on every survivor), and grow
//                    back to 4 with a new process (sqzCommGrow; it joins with sqzCommInitRank)
//                    for 50 more bit-exact calls. Prints the time from the kill to the first call
//                    on the shrunk communicator. `second`: another survivor gets SIGKILL during
//                    the shrink; the others must all end with one member list, or all fail with
//                    an error, within the bounds: never two lists, never a hang.
//   abort tcp|shm    rank 0 blocks in an all-reduce nobody joins and another thread aborts the
//                    communicator 300 ms later: the call must return within 1 s of the abort, the
//                    process's fds, threads and /dev/shm/sqz-* segments must be back to what they
//                    were before the communicator, and a new communicator of the same 4 processes
//                    must produce a bit-exact all-reduce.
//
// How: the harness hosts the rendezvous root in-process (sqzGetUniqueId), then fork+execs itself
// 4 times as `rank MODE R ID...` with the ids in hex. A rank writes one line per event to fd 3
// (a call's end: index, result, CLOCK_MONOTONIC time, error text; notes; failures) and reads
// go-ahead bytes from fd 4; its stderr comes to the harness too, which prints it only when a
// repetition fails. CLOCK_MONOTONIC is system-wide, so rank times compare with the time the
// harness took just before kill(). Every wait of the harness is bounded: a hang is a failed
// repetition with a message, and every child is killed and reaped before the next repetition.
// FAULT_SEED=N repeats a run's choices of victim and delay. FAULT_LAB=NAME runs rank r on host r
// of the network lab NAME (tests/netlab/netlab.sh up --name NAME -n 4), the harness on host 0.
//
// The parts: cases.h (the kill, stop and abort cases), rank.h (what a rank runs), device.h (its
// CUDA buffers and stream for -d cuda), rank_control.h (starting, reading and reaping the
// ranks), checks.h (what a rank's exit and messages must show), census.h (fds, threads,
// /dev/shm), protocol.h (what the harness and its ranks share).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cases.h"
#include "device.h"
#include "protocol.h"
#include "rank.h"
#include "rank_control.h"

namespace squeeze::fault {
namespace {

int usage(const char* problem) {
  std::fprintf(stderr,
               "sqz-fault-harness: %s\n"
               "usage: sqz-fault-harness kill tcp|shm REPETITIONS [-d host|cuda]\n"
               "       sqz-fault-harness stop tcp|shm REPETITIONS\n"
               "       sqz-fault-harness abort tcp|shm\n"
               "       sqz-fault-harness recover tcp|shm REPETITIONS [second]\n"
               "  kill: SIGKILL one of 4 ranks mid-all-reduce; survivors must fail within "
               "timeout + 2 s\n"
               "    -d cuda: on device buffers, enqueued on a stream that must be released\n"
               "  stop: SIGSTOP one; survivors must time out within timeout + 10%%\n"
               "  abort: sqzCommAbort from another thread; the call returns within 1 s, nothing "
               "leaks, a new communicator works\n"
               "  recover: SIGKILL one rank; survivors revoke, shrink, carry on, grow back; "
               "second: kill another during the shrink\n"
               "  FAULT_SEED=N repeats the random choices of an earlier run.\n",
               problem);
  return 2;
}

}  // namespace
}  // namespace squeeze::fault

int main(int argc, char** argv) {
  using namespace squeeze::fault;
  if (argc >= 2 && std::strcmp(argv[1], "rank") == 0) return rankMain(argc, argv);
  if (argc < 3) return usage("missing arguments");
  const std::string mode = argv[1], transport = argv[2];
  if (transport != "tcp" && transport != "shm")
    return usage(("unknown transport '" + transport + "': use tcp or shm").c_str());
  signal(SIGPIPE, SIG_IGN);  // a dead rank's go-ahead pipe is an error to report, not a death
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (std::string why = enterLab(); !why.empty()) {
    std::printf("sqz-fault-harness: %s\n", why.c_str());
    return 1;
  }
  // The rendezvous root listens here: loopback only (or the lab's links).
  setenv("SQZ_SOCKET_IFNAME", rankInterface(), 1);
  if (mode == "abort") {
    if (argc != 3) return usage("'abort' takes only the transport");
    return abortCase(transport.c_str());
  }
  if (mode == "recover") {
    const bool second = argc == 5 && std::strcmp(argv[4], "second") == 0;
    char* end = nullptr;
    const long reps = argc >= 4 ? std::strtol(argv[3], &end, 10) : 0;
    if ((argc != 4 && !second) || !end || *end != '\0' || reps < 1 || reps > 1000)
      return usage("'recover' takes the transport, a repetition count 1..1000 and maybe 'second'");
    uint64_t seed = static_cast<uint64_t>(nowNs());
    if (const char* s = std::getenv("FAULT_SEED")) seed = std::strtoull(s, nullptr, 10);
    return recoverCase(transport.c_str(), second, static_cast<int>(reps), seed);
  }
  if (mode != "kill" && mode != "stop")
    return usage(("unknown case '" + mode + "': use kill, stop, abort or recover").c_str());
  bool cuda = false;
  if (argc == 6 && mode == "kill" && std::strcmp(argv[4], "-d") == 0) {
    if (std::strcmp(argv[5], "cuda") != 0 && std::strcmp(argv[5], "host") != 0)
      return usage(("unknown memory '" + std::string(argv[5]) + "': use host or cuda").c_str());
    cuda = std::strcmp(argv[5], "cuda") == 0;
  } else if (argc != 4) {
    return usage(("'" + mode + "' takes the transport and a repetition count" +
                  (mode == "kill" ? " (then -d host|cuda)" : ""))
                     .c_str());
  }
  char* end = nullptr;
  long reps = std::strtol(argv[3], &end, 10);
  if (*end != '\0' || reps < 1 || reps > 1000)
    return usage(("repetitions '" + std::string(argv[3]) + "' must be a number 1..1000").c_str());
  if (cuda) {
    if (std::string why = deviceUnavailable(); !why.empty()) {
      std::printf("SKIP kill %s -d cuda: %s\n", transport.c_str(), why.c_str());
      return 77;  // meson's "skipped"
    }
  }
  uint64_t seed = static_cast<uint64_t>(nowNs());
  if (const char* s = std::getenv("FAULT_SEED")) seed = std::strtoull(s, nullptr, 10);
  return signalCase(mode == "stop", transport.c_str(), cuda, static_cast<int>(reps), seed);
}
