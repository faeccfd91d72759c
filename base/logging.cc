// Logger: parses SQZ_DEBUG / SQZ_DEBUG_SUBSYS / SQZ_DEBUG_FILE once and writes whole lines.
#include "base/logging.h"

#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

namespace squeeze {
namespace {

thread_local int tlsRank = -1;

struct Sink {
  FILE* file = stderr;
  std::mutex mu;  // serializes whole lines from concurrent threads
  char host[64] = "?";
};

Sink& sink() {
  static Sink* s = [] {
    auto* s = new Sink;
    gethostname(s->host, sizeof s->host - 1);
    const char* path = std::getenv("SQZ_DEBUG_FILE");
    if (path && *path) {
      std::string name;
      for (const char* c = path; *c; ++c) {
        if (c[0] == '%' && c[1] == 'h') {
          name += s->host;
          ++c;
        } else if (c[0] == '%' && c[1] == 'p') {
          name += std::to_string(getpid());
          ++c;
        } else {
          name += *c;
        }
      }
      if (FILE* f = std::fopen(name.c_str(), "a")) s->file = f;
    }
    return s;
  }();
  return *s;
}

const char* levelName(LogLevel l) {
  switch (l) {
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kTrace: return "TRACE";
    default: return "";
  }
}

const char* subsysName(LogSubsys s) {
  switch (s) {
    case LogSubsys::kInit: return "INIT";
    case LogSubsys::kTransport: return "TRANSPORT";
    case LogSubsys::kAlgo: return "ALGO";
    case LogSubsys::kCompress: return "COMPRESS";
    case LogSubsys::kDevice: return "DEVICE";
    case LogSubsys::kTuning: return "TUNING";
    case LogSubsys::kEnv: return "ENV";
  }
  return "?";
}

}  // namespace

bool parseLogLevel(const char* v, LogLevel* out) {
  static const std::pair<const char*, LogLevel> kLevels[] = {
      {"NONE", LogLevel::kNone}, {"WARN", LogLevel::kWarn},   {"INFO", LogLevel::kInfo},
      {"DEBUG", LogLevel::kDebug}, {"TRACE", LogLevel::kTrace}};
  *out = LogLevel::kWarn;
  if (!v || !*v) return true;
  for (const auto& [name, level] : kLevels) {
    if (!strcasecmp(v, name)) {
      *out = level;
      return true;
    }
  }
  return false;
}

bool parseLogMask(const char* v, uint32_t* out, std::string* unknown) {
  static const std::pair<const char*, uint32_t> kNames[] = {
      {"INIT", uint32_t(LogSubsys::kInit)},       {"TRANSPORT", uint32_t(LogSubsys::kTransport)},
      {"ALGO", uint32_t(LogSubsys::kAlgo)},       {"COMPRESS", uint32_t(LogSubsys::kCompress)},
      {"DEVICE", uint32_t(LogSubsys::kDevice)},   {"TUNING", uint32_t(LogSubsys::kTuning)},
      {"ENV", uint32_t(LogSubsys::kEnv)},         {"ALL", ~0u},
  };
  *out = ~0u;
  if (!v || !*v) return true;
  const bool negate = v[0] == '^';
  uint32_t mask = 0;
  for (const std::string& tok : split(negate ? v + 1 : v, ',')) {
    bool known = tok.empty();  // "INIT," names INIT
    for (const auto& [name, bit] : kNames) {
      if (!strcasecmp(tok.c_str(), name)) {
        mask |= bit;
        known = true;
      }
    }
    if (!known) {
      *unknown = tok;
      return false;
    }
  }
  *out = negate ? ~mask : mask;
  return true;
}

const LogConfig& logConfig() {
  static const LogConfig config = [] {
    LogConfig c{};
    std::string unknown;
    parseLogLevel(std::getenv("SQZ_DEBUG"), &c.level);
    if (!parseLogMask(std::getenv("SQZ_DEBUG_SUBSYS"), &c.mask, &unknown)) c.mask = ~0u;
    return c;
  }();
  return config;
}

void setLogRank(int rank) { tlsRank = rank; }

void logWrite(LogLevel level, LogSubsys subsys, const char* file, int line,
              const std::string& msg) {
  Sink& s = sink();
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::lock_guard<std::mutex> lock(s.mu);
  std::fprintf(s.file, "%s:%d:%d [%d] SQZ %s %s %s:%d %s\n", s.host, getpid(), gettid(), tlsRank,
               levelName(level), subsysName(subsys), base, line, msg.c_str());
  std::fflush(s.file);
}

}  // namespace squeeze
