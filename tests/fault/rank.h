// Rank mode: what sqz-fault-harness runs as when the harness starts it as
// `rank loop R HEXID [cuda]` or `rank abort R HEXID HEXID`. It writes one line per event to fd
// kEventFd (a call's end: index, result, CLOCK_MONOTONIC time, error text; notes; failures;
// stages) and reads go-ahead bytes from fd kGoFd.
//   loop   (kill, stop): checked all-reduces until one fails or the bound, then leave cleanly;
//          with cuda, on device buffers enqueued on a stream, each followed by
//          cudaStreamSynchronize and sqzCommGetAsyncError (device.h).
//   abort: rank 0 blocks in an all-reduce nobody joins and aborts it from another thread; all
//          then check the process is back to its census and a second communicator works.
//   recover (`rank recover R HEXID HEXGROWID [second]`): dense, top-k and int8 all-reduces until
//          the lost rank makes one fail; the harness's go-ahead byte names it; revoke, shrink,
//          50 calls of each kind (the compressed results' hashes reported), grow back with the
//          second id. `second`: another rank is killed during the shrink; only the shrink's
//          outcome is reported.
//   join   (`rank join 3 HEXGROWID`): the process that replaces the lost rank in the grow.
#pragma once

namespace squeeze::fault {

// argv: as above, after `sqz-fault-harness`; returns the exit status.
int rankMain(int argc, char** argv);

}  // namespace squeeze::fault
