// Discovery: the TCP ports in LISTEN state owned by a process or any descendant (socket
// inodes from /proc/<pid>/fd matched against /proc/PID/net/tcp{,6}), split into the loopback
// ones (127.0.0.1 or ::1), which are attacked, and the others, which never are.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>

namespace squeeze::attack {

// A loopback listening port.
struct Target {
  int family = AF_INET;
  uint16_t port = 0;
  bool operator<(const Target& o) const {
    return family != o.family ? family < o.family : port < o.port;
  }
  std::string name() const {
    return family == AF_INET ? "127.0.0.1:" + std::to_string(port)
                             : "[::1]:" + std::to_string(port);
  }
};

struct Listeners {
  std::set<Target> loopback;
  std::set<std::string> other;  // listeners on any other address: never attacked
};

// False once pid is gone or a zombie (its parent has not reaped it yet, but its ports are closed).
bool alive(pid_t pid);

// The listening ports of pid and its descendants.
Listeners findListeners(pid_t pid);

}  // namespace squeeze::attack
