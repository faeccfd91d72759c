// What the fault harness and the ranks it starts share: the cases' sizes and timeouts, the fd
// numbers of the pipes between them, the clock their times compare on (CLOCK_MONOTONIC is
// system-wide), the hex form of a unique id on a rank's command line, and result names.
#pragma once

#include <squeeze/squeeze.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace squeeze::fault {

constexpr int kRanks = 4;
// 8 MiB of float: a call lasts long enough that a signal lands mid-call.
constexpr size_t kCount = 2 * 1024 * 1024;
constexpr int kEventFd = 3;  // rank -> harness, one line per event
constexpr int kGoFd = 4;     // harness -> rank, go-ahead bytes
constexpr int kKillTimeoutMs = 5000;
constexpr int kStopTimeoutMs = 3000;
// Far above the 300 ms before the abort: only the abort may end the blocked call.
constexpr int kAbortTimeoutMs = 10000;
constexpr int64_t kMs = 1000000;
constexpr int64_t kSec = 1000 * kMs;

// CLOCK_MONOTONIC in ns: comparable across the harness and its ranks.
int64_t nowNs();
void sleepNs(int64_t ns);

// "Success", "Timeout", ... for a sqzResult_t.
const char* resultName(int rc);

std::string hexEncode(const sqzUniqueId& id);
bool hexDecode(const char* s, sqzUniqueId* id);

}  // namespace squeeze::fault
