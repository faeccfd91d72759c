// Flow control of the ib transport's receive rings, as pure logic (unit-tested without hardware).
//
// Each direction of a connection is a byte stream written by RDMA writes with immediate data
// into the receiver's ring of R bytes: stream position p lives at ring offset p % R. Positions
// are 64-bit counters that never wrap. The sender keeps a mirror of the ring in its own
// registered staging buffer (position p at staging offset p % R) and writes each piece from
// there to the same offset in the peer's ring.
//
//   RingSender (one per connection, the sending side):
//     head       bytes ever written (posted)
//     credited   bytes the receiver has reported consumed (credit messages)
//     completed  bytes whose writes completed locally (the HCA will not read them again)
//   Space for the next write is R - (head - min(credited, completed)): a ring byte is reused
//   only once the receiver consumed it *and* the write that carried it completed, so neither a
//   retransmission nor the staging mirror can overwrite bytes still in use. A write never
//   crosses the ring's end, carries at most maxWriteBytes, and at most maxWrites writes may be
//   uncredited and at most maxWrites uncompleted at once.
//
//   RingReceiver (the receiving side): learns each write's size from its immediate data,
//   consumes bytes in order, and owes the sender a credit once at least one whole write has
//   been consumed since the last credit. A credit carries the low 32 bits of the consumed count
//   (the sender rebuilds the full count: it can never be more than R < 2^31 ahead).
//
// Why "at least one whole write": every immediate-carrying message (data write or credit) uses
// up one posted receive on the other side, which is reposted when the completion is polled. A
// data write stays uncredited until the receiver polled it (and reposted), so at most maxWrites
// data writes are unpolled; a credit retires at least one write the sender still counts as
// uncredited, so at most maxWrites credits are unpolled too. Posting 2*maxWrites receives (plus
// a margin) therefore means a message never finds the receive queue empty. Senders split writes
// at message boundaries, so a receiver that stops consuming (its next receive is not posted
// yet, or the data has not arrived) stops at the end of a write and its credit is always due.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace squeeze {

class RingSender {
 public:
  // ringBytes: the receiver's ring. maxWrites >= 1. maxWriteBytes >= 1.
  RingSender(uint64_t ringBytes, uint32_t maxWrites, uint64_t maxWriteBytes);

  // How many bytes the next write may carry (at most `want`): 0 when the ring is full, the
  // head sits where no byte is free yet, or too many writes are outstanding.
  uint64_t nextWriteBytes(uint64_t want) const;
  // Records a posted write of n bytes at head(); n must not exceed nextWriteBytes(n).
  void wrote(uint64_t n);
  // The oldest uncompleted write completed locally (completions arrive in posting order).
  void writeCompleted();
  // Applies a credit from the receiver (the low 32 bits of its consumed count). Returns false
  // when the value cannot be one (it would credit bytes never written); nothing changes then.
  bool credit(uint32_t consumedLow32);

  uint64_t ringBytes() const { return ring_; }
  uint64_t head() const { return head_; }
  uint64_t headOffset() const { return head_ % ring_; }
  uint64_t credited() const { return credited_; }
  uint64_t completed() const { return completed_; }
  uint64_t writesPosted() const { return writesPosted_; }
  uint64_t writesCompleted() const { return writesCompleted_; }
  size_t writesUncredited() const { return uncredited_.size(); }
  size_t writesUncompleted() const { return uncompleted_.size(); }

 private:
  const uint64_t ring_;
  const uint32_t maxWrites_;
  const uint64_t maxWriteBytes_;
  uint64_t head_ = 0;
  uint64_t credited_ = 0;
  uint64_t completed_ = 0;
  uint64_t writesPosted_ = 0;
  uint64_t writesCompleted_ = 0;
  std::deque<uint64_t> uncredited_;   // end positions of writes not yet covered by a credit
  std::deque<uint64_t> uncompleted_;  // end positions of writes not yet completed locally
};

class RingReceiver {
 public:
  explicit RingReceiver(uint64_t ringBytes);

  // A write of n bytes landed after everything that arrived before. Returns false when it could
  // not have come from a correct sender (empty, past the ring's end, or more than the free
  // space); nothing changes then.
  bool arrived(uint64_t n);
  uint64_t available() const { return arrived_ - consumed_; }
  uint64_t consumed() const { return consumed_; }
  uint64_t readOffset() const { return consumed_ % ring_; }
  // Consumes n <= available() bytes.
  void consume(uint64_t n);

  // True when a credit is owed: at least one whole write was consumed since the last one.
  bool creditDue() const { return retired_ > 0; }
  uint32_t creditValue() const { return static_cast<uint32_t>(consumed_); }
  // The credit was posted.
  void creditSent() { retired_ = 0; }

  uint64_t ringBytes() const { return ring_; }

 private:
  const uint64_t ring_;
  uint64_t arrived_ = 0;
  uint64_t consumed_ = 0;
  uint64_t retired_ = 0;       // whole writes consumed since the last credit
  std::deque<uint64_t> ends_;  // end positions of arrived writes not yet wholly consumed
};

}  // namespace squeeze
