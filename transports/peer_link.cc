// PeerLink's length-prefixed string messages, used by transports to exchange setup details.
#include <cstdint>

#include "base/error.h"
#include "transports/transport.h"

namespace squeeze {

void PeerLink::sendString(const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  sendBytes(&n, sizeof n);
  if (n) sendBytes(s.data(), n);
}

std::string PeerLink::recvString(size_t maxLen) {
  uint32_t n = 0;
  recvBytes(&n, sizeof n);
  if (n > maxLen)
    raise(ErrorCode::kRemote, "peer sent a ", n, "-byte setup message where at most ", maxLen,
          " bytes were expected");
  std::string s(n, '\0');
  if (n) recvBytes(s.data(), n);
  return s;
}

}  // namespace squeeze
