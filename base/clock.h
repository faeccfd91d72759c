// Elapsed time on the monotonic clock, in seconds: the one timer behind the engine's own
// measurements (the executor's codec stages, PowerSGD's phases, the tuner's calibration).
#pragma once

#include <chrono>

namespace squeeze {

using SteadyClock = std::chrono::steady_clock;

inline double secondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace squeeze
