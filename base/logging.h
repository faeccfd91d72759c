// SQZ_LOG(level, subsys, args...): leveled, per-subsystem logging configured by SQZ_DEBUG,
// SQZ_DEBUG_SUBSYS and SQZ_DEBUG_FILE (read once per process). The level and mask are checked
// before any argument is formatted. Each line carries host, pid, rank, subsystem and file:line.
#pragma once

#include <cstdint>
#include <string>

#include "base/strings.h"

namespace squeeze {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

enum class LogSubsys : uint32_t {
  kInit = 1u << 0,
  kTransport = 1u << 1,
  kAlgo = 1u << 2,
  kCompress = 1u << 3,
  kDevice = 1u << 4,
  kTuning = 1u << 5,
  kEnv = 1u << 6,
};

struct LogConfig {
  LogLevel level;
  uint32_t mask;
};

// SQZ_DEBUG and SQZ_DEBUG_SUBSYS as the logger reads them (null or empty: the default, WARN and
// ALL). False for a value that names no level, or (*unknown = the name) no subsystem; the logger
// then keeps the default, so a typo never hides a warning, and a communicator's init refuses the
// value (core/config.cc).
bool parseLogLevel(const char* value, LogLevel* out);
bool parseLogMask(const char* value, uint32_t* out, std::string* unknown);

const LogConfig& logConfig();
void logWrite(LogLevel level, LogSubsys subsys, const char* file, int line, const std::string& msg);

// The rank printed on log lines from this thread (-1: none yet).
void setLogRank(int rank);

// Warnings show whatever the subsystem mask (as NCCL's): the mask filters INFO and below.
inline bool logEnabled(LogLevel level, LogSubsys subsys) {
  const LogConfig& c = logConfig();
  return static_cast<int>(level) <= static_cast<int>(c.level) &&
         (level == LogLevel::kWarn || (c.mask & static_cast<uint32_t>(subsys)) != 0);
}

}  // namespace squeeze

#define SQZ_LOG(level, subsys, ...)                                                            \
  do {                                                                                         \
    if (::squeeze::logEnabled(::squeeze::LogLevel::level, ::squeeze::LogSubsys::subsys))       \
      ::squeeze::logWrite(::squeeze::LogLevel::level, ::squeeze::LogSubsys::subsys, __FILE__,  \
                          __LINE__, ::squeeze::strCat(__VA_ARGS__));                           \
  } while (0)

#define SQZ_WARN(subsys, ...) SQZ_LOG(kWarn, subsys, __VA_ARGS__)
#define SQZ_INFO(subsys, ...) SQZ_LOG(kInfo, subsys, __VA_ARGS__)
#define SQZ_DEBUG(subsys, ...) SQZ_LOG(kDebug, subsys, __VA_ARGS__)
#define SQZ_TRACE(subsys, ...) SQZ_LOG(kTrace, subsys, __VA_ARGS__)
