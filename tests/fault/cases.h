// The cases (see the comment atop fault_harness.cc): kill and stop, N repetitions of a signal
// to one random rank mid-all-reduce with bounds on the survivors' errors, and abort. Each prints
// one line per repetition and a SUMMARY line, and returns the harness's exit status.
#pragma once

#include <cstdint>

namespace squeeze::fault {

// kill (stop false) or stop; cuda: the ranks' calls are on device buffers, enqueued on a
// stream; seed picks the victims and delays (FAULT_SEED repeats a run).
int signalCase(bool stop, const char* transport, bool cuda, int reps, uint64_t seed);
int abortCase(const char* transport);
// recover: SIGKILL one rank mid-loop; survivors revoke, shrink, carry on and grow back with a
// replacement process. second: SIGKILL a second rank during the shrink; the survivors must all
// end with one member list or fail, never split or hang.
int recoverCase(const char* transport, bool second, int reps, uint64_t seed);

}  // namespace squeeze::fault
