// AuthAcceptor (see acceptor.h): one poll() over the listener and every pending handshake.
#include "bootstrap/acceptor.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/logging.h"

namespace squeeze {

struct AuthAcceptor::Pending {
  Socket sock;
  ServerHandshake handshake;
  size_t got = 0;  // hello bytes read so far
  Deadline cap;
  std::string from;
};

AuthAcceptor::AuthAcceptor(Socket& listener, const Secret& secret, std::string who)
    : listener_(listener), secret_(secret), who_(std::move(who)) {}

AuthAcceptor::~AuthAcceptor() = default;

void AuthAcceptor::acceptWaiting() {
  for (;;) {
    std::optional<Socket> s;
    try {
      s = listener_.acceptOne(Clock::now());
    } catch (const Error& e) {
      // Out of descriptors (EMFILE/ENFILE): free the oldest slot and let the next poll retry.
      SQZ_WARN(kInit, who_, ": accept failed (", e.what(), "); dropping the oldest of ",
               pending_.size(), " unauthenticated connections");
      if (pending_.empty()) throw;
      pending_.pop_front();
      return;
    }
    if (!s) return;
    auto p = std::make_unique<Pending>();
    p->sock = std::move(*s);
    p->cap = deadlineAfterMs(kHandshakeCapMs);
    p->from = p->sock.peerAddr().toString();
    // 24 bytes into a fresh socket's empty send buffer: it fits, or the peer is already gone.
    iovec iov{const_cast<uint8_t*>(p->handshake.challenge()), ServerHandshake::kChallengeBytes};
    try {
      if (p->sock.writeSome(&iov, 1, "authentication: sending the challenge") !=
          ServerHandshake::kChallengeBytes)
        continue;
    } catch (const Error&) {
      continue;  // closed before we spoke: a port scan
    }
    if (pending_.size() >= kMaxPending) {
      SQZ_DEBUG(kInit, who_, ": ", kMaxPending, " handshakes pending; dropped the oldest, from ",
                pending_.front()->from);
      pending_.pop_front();
    }
    pending_.push_back(std::move(p));
  }
}

std::optional<AuthenticatedPeer> AuthAcceptor::advance(Pending& p) {
  p.got += p.sock.readSome(p.handshake.hello() + p.got, ServerHandshake::kHelloBytes - p.got,
                           "authentication: reading the hello");
  if (p.got < ServerHandshake::kHelloBytes) return std::nullopt;
  Hello hello = p.handshake.verify(secret_, p.from);
  iovec iov{const_cast<uint8_t*>(p.handshake.proof()), ServerHandshake::kProofBytes};
  // The client sent its hello and now only reads: our send buffer is empty, 32 bytes fit.
  if (p.sock.writeSome(&iov, 1, "authentication: sending the proof") !=
      ServerHandshake::kProofBytes)
    raise(ErrorCode::kRemote, "authentication: ", p.from, " stopped reading");
  return AuthenticatedPeer{std::move(p.sock), hello};
}

std::optional<AuthenticatedPeer> AuthAcceptor::next(Deadline deadline, int wakeFd) {
  std::vector<pollfd> fds;
  for (;;) {
    const Deadline now = Clock::now();
    // Expired handshakes go; the earliest remaining cap bounds this wait.
    Deadline wake = deadline;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if ((*it)->cap <= now) {
        SQZ_DEBUG(kInit, who_, ": dropped ", (*it)->from, ": no complete hello within ",
                  kHandshakeCapMs, " ms");
        it = pending_.erase(it);
      } else {
        wake = std::min(wake, (*it)->cap);
        ++it;
      }
    }
    fds.assign(1, pollfd{listener_.fd(), POLLIN, 0});
    for (const auto& p : pending_) fds.push_back(pollfd{p->sock.fd(), POLLIN, 0});
    // Last, so fds[1..] still match pending_; a negative fd is ignored by poll().
    fds.push_back(pollfd{wakeFd, POLLIN, 0});
    const int rc = ::poll(fds.data(), fds.size(), remainingMs(wake));
    if (rc < 0 && errno != EINTR) throw SysError("poll() on the listening socket", errno);
    if (rc > 0 && fds.back().revents != 0) return std::nullopt;  // the owner stops
    fds.pop_back();

    // Pending first (fds[1..] match pending_ as it was), then new connections.
    for (size_t i = fds.size() - 1; i >= 1; --i) {
      if (rc <= 0 || fds[i].revents == 0) continue;
      Pending& p = *pending_[i - 1];
      std::optional<AuthenticatedPeer> done;
      try {
        done = advance(p);
        // Readable with no complete hello is fine; hung up with none is the end of it.
        if (!done && !(fds[i].revents & (POLLERR | POLLHUP | POLLNVAL))) continue;
      } catch (const Error& e) {
        // A wrong secret is worth a warning (a misconfigured rank); scans and garbage are not,
        // and past a few, neither is it: a client that keeps trying must not flood the log.
        if (e.code() == ErrorCode::kInvalidUsage && ++wrongSecrets_ <= kWrongSecretWarnings)
          SQZ_WARN(kInit, who_, ": ", e.what(),
                   wrongSecrets_ == kWrongSecretWarnings ? " (further ones: at DEBUG)" : "");
        else
          SQZ_DEBUG(kInit, who_, ": dropped a connection from ", p.from, ": ", e.what());
      }
      pending_.erase(pending_.begin() + static_cast<long>(i - 1));
      if (done) return done;
    }
    if (rc > 0 && (fds[0].revents & POLLIN)) acceptWaiting();
    if (Clock::now() >= deadline) return std::nullopt;
  }
}

}  // namespace squeeze
