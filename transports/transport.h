// The transport interface: a Transport (one per communicator and kind) sets up a Connection to
// one peer over a PeerLink; a Connection moves whole messages (WireHeader + payload) to and
// from that peer, in order, without blocking. Only code under transports/ makes system calls.
//
// Ordering contract: messages on one Connection are delivered in the order they were posted;
// receives match sends in posting order. The executor relies on this (see src/core/executor.h).
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/wire.h"
#include "transports/settings.h"
#include "transports/tcp/socket.h"

namespace squeeze {

class Doorbell;

// A send or receive in flight. The caller owns it and keeps it alive until done.
struct TransferRequest {
  bool done = false;
  WireHeader header{};  // receive: the header that arrived (checked against the expected one)
  size_t bytes = 0;     // payload bytes moved
};

// Every Connection's isend and irecv start with these: the arguments checked (a null buffer
// with bytes to move is a bug in the caller) and the request marked pending.
inline void beginSend(const WireHeader& header, const void* payload, TransferRequest* req) {
  SQZ_ENFORCE(req != nullptr);
  SQZ_ENFORCE(payload != nullptr || header.payloadBytes == 0, "isend of ", header.payloadBytes,
              " bytes from a null payload");
  req->done = false;
  req->bytes = 0;
}
inline void beginRecv(void* buf, size_t capacity, TransferRequest* req) {
  SQZ_ENFORCE(req != nullptr);
  SQZ_ENFORCE(buf != nullptr || capacity == 0, "irecv into a null buffer of ", capacity,
              " bytes");
  req->done = false;
  req->bytes = 0;
}

// What a waiting executor sleeps on: sockets, and this rank's shared-memory doorbell.
struct WaitSources {
  std::vector<pollfd> fds;
  Doorbell* doorbell = nullptr;
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual const char* transportName() const = 0;
  // True when isend/irecv take device memory (any pointer CUDA's unified addressing knows) as
  // well as host memory. The executor stages device spans through pinned host buffers for a
  // connection that does not (DESIGN.md, "Memory, streams, threads").
  virtual bool readsDeviceMemory() const { return false; }

  // Queues header + payload (header.payloadBytes bytes). payload stays valid until req->done.
  virtual void isend(const WireHeader& header, const void* payload, TransferRequest* req) = 0;
  // Queues a receive of the next message into buf (at most capacity bytes). The header is
  // validated with checkHeader(expected, ...) before any payload byte is read.
  virtual void irecv(const WireHeader& expected, void* buf, size_t capacity,
                     TransferRequest* req) = 0;
  // Moves whatever can move now without blocking. Returns true if anything moved. Throws
  // Error(kRemote) when the peer is gone.
  virtual bool progress() = 0;
  // Adds what to sleep on until progress() could move something.
  virtual void addWaitSources(WaitSources& sources) = 0;
  // Makes the peer see the connection closed; queued requests never complete.
  virtual void shutdown() = 0;
};

// What a transport knows about a rank, from the bootstrap's peer table.
struct PeerInfo {
  int rank = -1;
  SockAddr listenAddr;  // where the rank accepts data sockets
  std::string hostId;   // equal for ranks that share memory (host, boot and network namespace)
  int pid = 0;
};

// An authenticated, ordered, blocking (deadline-bounded) channel to one peer during setup.
class PeerLink {
 public:
  virtual ~PeerLink() = default;
  virtual void sendBytes(const void* data, size_t n) = 0;
  virtual void recvBytes(void* data, size_t n) = 0;
  // A new authenticated socket to the peer, for data. Both sides call it with the same index;
  // the higher rank connects, the lower accepts.
  virtual Socket openDataSocket(uint16_t index) = 0;

  void sendString(const std::string& s);
  std::string recvString(size_t maxLen);
};

struct LinkSetup {
  int myRank;
  const PeerInfo& self;
  const PeerInfo& peer;
  uint64_t commHash;
  const TransportSettings& config;
  PeerLink& link;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual bool canConnect(const PeerInfo& self, const PeerInfo& peer) const = 0;
  // Collective between the two ranks of the pair: both call it with their own view.
  virtual std::unique_ptr<Connection> connect(const LinkSetup& setup) = 0;
  // Called once every peer is connected: release what only setup needed (names, listeners).
  virtual void setupDone() {}
};

struct TransportContext {
  int myRank;
  int nranks;
  uint64_t commHash;
  const TransportSettings& config;
};

// The static, ordered table of transports compiled in ("shm", "tcp").
const std::vector<std::string>& availableTransports();
// Creates the named transport for one communicator; nullptr for an unknown name.
std::unique_ptr<Transport> createTransport(const std::string& name, const TransportContext& ctx);

// Sleeps until one of the sources may be ready, timeoutMs passes, or (shm) the doorbell moves
// past doorbellSnapshot.
void waitForActivity(WaitSources& sources, uint32_t doorbellSnapshot, int timeoutMs);

}  // namespace squeeze
