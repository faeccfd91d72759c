// Ring flow control for the ib transport (see ib_credits.h).
#include "transports/ib/ib_credits.h"

#include <algorithm>

#include "base/error.h"

namespace squeeze {

RingSender::RingSender(uint64_t ringBytes, uint32_t maxWrites, uint64_t maxWriteBytes)
    : ring_(ringBytes), maxWrites_(maxWrites), maxWriteBytes_(maxWriteBytes) {
  SQZ_ENFORCE(ringBytes > 0 && ringBytes < (uint64_t{1} << 31), "ring of ", ringBytes, " bytes");
  SQZ_ENFORCE(maxWrites > 0 && maxWriteBytes > 0);
}

uint64_t RingSender::nextWriteBytes(uint64_t want) const {
  if (uncredited_.size() >= maxWrites_ || uncompleted_.size() >= maxWrites_) return 0;
  const uint64_t reusable = std::min(credited_, completed_);
  const uint64_t space = ring_ - (head_ - reusable);
  const uint64_t toEnd = ring_ - head_ % ring_;
  return std::min({want, space, toEnd, maxWriteBytes_});
}

void RingSender::wrote(uint64_t n) {
  SQZ_ENFORCE(n > 0 && n <= nextWriteBytes(n), "a write of ", n, " bytes at position ", head_,
              " does not fit (", nextWriteBytes(n), " allowed)");
  head_ += n;
  ++writesPosted_;
  uncredited_.push_back(head_);
  uncompleted_.push_back(head_);
}

void RingSender::writeCompleted() {
  SQZ_ENFORCE(!uncompleted_.empty(), "a write completed that was never posted");
  completed_ = uncompleted_.front();
  uncompleted_.pop_front();
  ++writesCompleted_;
}

bool RingSender::credit(uint32_t consumedLow32) {
  const uint64_t delta = static_cast<uint32_t>(consumedLow32 - static_cast<uint32_t>(credited_));
  if (delta > head_ - credited_) return false;
  credited_ += delta;
  while (!uncredited_.empty() && uncredited_.front() <= credited_) uncredited_.pop_front();
  return true;
}

RingReceiver::RingReceiver(uint64_t ringBytes) : ring_(ringBytes) {
  SQZ_ENFORCE(ringBytes > 0 && ringBytes < (uint64_t{1} << 31), "ring of ", ringBytes, " bytes");
}

bool RingReceiver::arrived(uint64_t n) {
  if (n == 0 || n > ring_ - available() || arrived_ % ring_ + n > ring_) return false;
  arrived_ += n;
  ends_.push_back(arrived_);
  return true;
}

void RingReceiver::consume(uint64_t n) {
  SQZ_ENFORCE(n <= available(), "consuming ", n, " bytes of ", available());
  consumed_ += n;
  while (!ends_.empty() && ends_.front() <= consumed_) {
    ends_.pop_front();
    ++retired_;
  }
}

}  // namespace squeeze
