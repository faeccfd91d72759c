// The clock, id encoding and result names the harness and its ranks share (see protocol.h).
#include "protocol.h"

#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace squeeze::fault {

int64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kSec + ts.tv_nsec;
}

void sleepNs(int64_t ns) {
  if (ns <= 0) return;
  timespec ts{static_cast<time_t>(ns / kSec), static_cast<long>(ns % kSec)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

const char* resultName(int rc) {
  switch (rc) {
    case sqzSuccess:
      return "Success";
    case sqzCudaError:
      return "CudaError";
    case sqzSystemError:
      return "SystemError";
    case sqzInternalError:
      return "InternalError";
    case sqzInvalidArgument:
      return "InvalidArgument";
    case sqzInvalidUsage:
      return "InvalidUsage";
    case sqzRemoteError:
      return "RemoteError";
    case sqzInProgress:
      return "InProgress";
    case sqzTimeout:
      return "Timeout";
    default:
      return "?";
  }
}

std::string hexEncode(const sqzUniqueId& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (char c : id.internal) {
    auto b = static_cast<unsigned char>(c);
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

bool hexDecode(const char* s, sqzUniqueId* id) {
  if (std::strlen(s) != 2 * sizeof id->internal) return false;
  for (size_t i = 0; i < sizeof id->internal; ++i) {
    unsigned v = 0;
    if (std::sscanf(s + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

}  // namespace squeeze::fault
