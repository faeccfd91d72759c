// Logger: parses SQZ_DEBUG / SQZ_DEBUG_SUBSYS / SQZ_DEBUG_FILE once and writes whole lines.
#include "base/logging.h"

#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

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

LogLevel parseLevel(const char* v) {
  if (!v || !*v) return LogLevel::kWarn;
  if (!strcasecmp(v, "NONE")) return LogLevel::kNone;
  if (!strcasecmp(v, "INFO")) return LogLevel::kInfo;
  if (!strcasecmp(v, "DEBUG")) return LogLevel::kDebug;
  if (!strcasecmp(v, "TRACE")) return LogLevel::kTrace;
  return LogLevel::kWarn;
}

uint32_t parseMask(const char* v) {
  struct Name {
    const char* name;
    uint32_t bit;
  };
  static const Name kNames[] = {
      {"INIT", uint32_t(LogSubsys::kInit)},       {"TRANSPORT", uint32_t(LogSubsys::kTransport)},
      {"ALGO", uint32_t(LogSubsys::kAlgo)},       {"COMPRESS", uint32_t(LogSubsys::kCompress)},
      {"DEVICE", uint32_t(LogSubsys::kDevice)},   {"TUNING", uint32_t(LogSubsys::kTuning)},
      {"ENV", uint32_t(LogSubsys::kEnv)},         {"ALL", ~0u},
  };
  if (!v || !*v) return ~0u;
  bool negate = v[0] == '^';
  uint32_t mask = 0;
  for (const std::string& tok : split(negate ? v + 1 : v, ',')) {
    for (const Name& n : kNames)
      if (!strcasecmp(tok.c_str(), n.name)) mask |= n.bit;
  }
  return negate ? ~mask : mask;
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

const LogConfig& logConfig() {
  static const LogConfig config{parseLevel(std::getenv("SQZ_DEBUG")),
                                parseMask(std::getenv("SQZ_DEBUG_SUBSYS"))};
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
