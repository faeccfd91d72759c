// The verbs operations an ib connection's data path uses, behind a small interface: the real
// one (VerbsQp in ib_device.cc) drives an RC queue pair through libibverbs; unit tests drive the
// same connection logic (ib_connection.cc) through an in-memory fake, so the protocol is tested
// on machines without an HCA. No verbs.h here.
//
// One IbQp is one RC queue pair with its completion queue (shared by send and receive) and
// completion channel, the local receive ring the peer writes into, and the local send staging
// buffer that mirrors the peer's ring (ib_credits.h).
#pragma once

#include <cstdint>

namespace squeeze {

struct IbCompletion {
  enum class Kind : uint8_t {
    kSendDone,    // one of this side's writes or credits completed (wrId says which)
    kRecvWrite,   // the peer's RDMA write with immediate landed in the receive ring
    kRecvCredit,  // the peer's credit (a zero-byte send with immediate) arrived
  };
  Kind kind;
  bool ok;                 // false: the work request failed; statusText says how
  uint64_t wrId;           // what this side posted it with (receives: kIbRecvWrId)
  uint32_t imm;            // immediate data, host byte order (receives only)
  const char* statusText;  // static text ("success", "transport retry counter exceeded", ...)
  bool flushed;            // the failure is a flush after an earlier error (not the cause)
};

constexpr uint64_t kIbWriteWrId = 1;
constexpr uint64_t kIbCreditWrId = 2;
constexpr uint64_t kIbRecvWrId = 3;

class IbQp {
 public:
  virtual ~IbQp() = default;

  // Posts an RDMA write with immediate `imm` of `len` bytes from the send staging buffer at
  // `offset` to the peer's receive ring at the same offset, signaled, wr_id kIbWriteWrId.
  virtual void postWrite(uint64_t offset, uint32_t len, uint32_t imm) = 0;
  // Posts a zero-byte send with immediate `imm`, signaled, wr_id kIbCreditWrId.
  virtual void postCredit(uint32_t imm) = 0;
  // Posts n more zero-length receives (wr_id kIbRecvWrId).
  virtual void postRecvs(uint32_t n) = 0;
  // Takes up to max completions, oldest first; returns how many.
  virtual int poll(IbCompletion* out, int max) = 0;
  // Asks for one event on eventFd() at the next completion (ibv_req_notify_cq).
  virtual void armNotify() = 0;
  // Consumes (and acknowledges) the events pending on eventFd() without blocking; true if any.
  virtual bool takeEvents() = 0;
  // Readable when an armed completion queue got a completion.
  virtual int eventFd() const = 0;
  // Moves the queue pair to the error state: outstanding work is flushed and the peer's
  // writes are no longer accepted. Safe from another thread while the data path runs.
  virtual void toError() = 0;

  virtual uint8_t* sendStaging() = 0;           // sendRingBytes() bytes
  virtual const uint8_t* recvRing() const = 0;  // recvRingBytes() bytes
  virtual uint64_t sendRingBytes() const = 0;   // the peer's ring (announced in its record)
  virtual uint64_t recvRingBytes() const = 0;
};

}  // namespace squeeze
