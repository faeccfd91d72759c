// AuthAcceptor: accepts connections on a listening socket and runs their authentication
// handshakes side by side. A port scan, a client that never speaks, one that sends a byte a second
// or one with the wrong secret costs a slot for at most kHandshakeCapMs and delays nobody; at most
// kMaxPending unauthenticated connections are held (the oldest goes first), so they cannot exhaust
// this process's file descriptors. Nothing is allocated from what an unauthenticated peer sends.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "bootstrap/auth.h"

namespace squeeze {

struct AuthenticatedPeer {
  Socket sock;
  Hello hello;
};

class AuthAcceptor {
 public:
  static constexpr int kHandshakeCapMs = 5000;
  static constexpr size_t kMaxPending = 64;

  // `listener` must outlive the acceptor. `who` names the accepting side in log lines.
  AuthAcceptor(Socket& listener, const Secret& secret, std::string who);
  ~AuthAcceptor();

  // The next connection whose proof checks out, or nullopt when `deadline` passes first or
  // `wakeFd` (when >= 0) turns readable: an owner that stops from another thread writes to it.
  std::optional<AuthenticatedPeer> next(Deadline deadline, int wakeFd = -1);

 private:
  struct Pending;
  void acceptWaiting();
  // Reads what pending_[i] has sent; returns its peer once the handshake is complete and valid.
  // Throws on a connection to drop.
  std::optional<AuthenticatedPeer> advance(Pending& p);

  Socket& listener_;
  const Secret& secret_;
  std::string who_;
  std::deque<std::unique_ptr<Pending>> pending_;
  static constexpr int kWrongSecretWarnings = 3;  // then DEBUG
  int wrongSecrets_ = 0;
};

}  // namespace squeeze
