// Ring flow control of the ib transport without hardware (transports/ib/ib_credits.h): the sender
// can never overrun the receiver's ring or reuse bytes whose write has not completed, writes
// never cross the ring's end, the write limits hold, credits rebuild 64-bit positions from 32
// bits across wraps, bogus arrivals and credits are refused, and a simulated stream of messages
// (many larger than the ring) arrives intact through a small ring in pieces, with never more
// immediate-carrying messages outstanding than the receive queue holds.
#include "transports/ib/ib_credits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace squeeze {
namespace {

TEST(IbRingSender, FreshRingAllowsUpToSliceRingAndWant) {
  RingSender s(1000, 8, 300);
  EXPECT_EQ(s.nextWriteBytes(50), 50u);
  EXPECT_EQ(s.nextWriteBytes(5000), 300u);
  RingSender t(1000, 8, 5000);
  EXPECT_EQ(t.nextWriteBytes(5000), 1000u);
}

TEST(IbRingSender, CannotOverrunUntilConsumedAndCompleted) {
  RingSender s(1000, 8, 1000);
  s.wrote(600);
  EXPECT_EQ(s.nextWriteBytes(1000), 400u);
  s.wrote(400);
  EXPECT_EQ(s.nextWriteBytes(1000), 0u) << "a full ring has no space";
  // Consumed but not completed locally: the bytes may still be read for a retransmission.
  ASSERT_TRUE(s.credit(600));
  EXPECT_EQ(s.nextWriteBytes(1000), 0u);
  s.writeCompleted();
  EXPECT_EQ(s.completed(), 600u);
  EXPECT_EQ(s.nextWriteBytes(1000), 600u);
  // Completed but not consumed: the receiver still needs them.
  s.writeCompleted();
  EXPECT_EQ(s.nextWriteBytes(1000), 600u);
  ASSERT_TRUE(s.credit(1000));
  EXPECT_EQ(s.nextWriteBytes(2000), 1000u);
}

TEST(IbRingSender, WritesStopAtTheRingsEndAndWrap) {
  RingSender s(1000, 8, 1000);
  s.wrote(700);
  s.writeCompleted();
  ASSERT_TRUE(s.credit(700));
  EXPECT_EQ(s.headOffset(), 700u);
  EXPECT_EQ(s.nextWriteBytes(1000), 300u) << "a write never crosses the end of the ring";
  s.wrote(300);
  EXPECT_EQ(s.headOffset(), 0u);
  EXPECT_EQ(s.nextWriteBytes(1000), 700u);
  s.wrote(700);
  EXPECT_EQ(s.head(), 1700u);
  EXPECT_EQ(s.headOffset(), 700u);
  EXPECT_EQ(s.nextWriteBytes(1), 0u);
}

TEST(IbRingSender, LimitsUncreditedAndUncompletedWrites) {
  RingSender s(1 << 20, 3, 1 << 20);
  for (int i = 0; i < 3; ++i) s.wrote(10);
  EXPECT_EQ(s.writesUncredited(), 3u);
  EXPECT_EQ(s.nextWriteBytes(10), 0u) << "three writes are uncredited";
  ASSERT_TRUE(s.credit(20));  // retires two
  EXPECT_EQ(s.writesUncredited(), 1u);
  EXPECT_EQ(s.nextWriteBytes(10), 0u) << "three writes are still uncompleted";
  s.writeCompleted();
  EXPECT_EQ(s.nextWriteBytes(10), 10u);
  // A credit in the middle of a write does not retire it.
  s.wrote(10);
  ASSERT_TRUE(s.credit(25));
  EXPECT_EQ(s.writesUncredited(), 2u);
  EXPECT_EQ(s.writesPosted(), 4u);
  EXPECT_EQ(s.writesCompleted(), 1u);
}

TEST(IbRingSender, RefusesCreditsForBytesNeverWritten) {
  RingSender s(1000, 8, 1000);
  s.wrote(100);
  EXPECT_FALSE(s.credit(101));
  EXPECT_FALSE(s.credit(0xffffffffu)) << "a credit from the past is a bogus one too";
  EXPECT_EQ(s.credited(), 0u);
  EXPECT_TRUE(s.credit(40));
  EXPECT_TRUE(s.credit(40)) << "a repeated credit changes nothing";
  EXPECT_EQ(s.credited(), 40u);
  EXPECT_FALSE(s.credit(39)) << "credits never go back";
}

TEST(IbRingSender, CreditsRebuildPositionsPast32Bits) {
  // A 1 GiB ring: 5 passes of 1 GiB pieces put the positions past 2^32.
  const uint64_t ring = uint64_t{1} << 30;
  RingSender s(ring, 4, ring);
  RingReceiver r(ring);
  for (int i = 0; i < 9; ++i) {
    const uint64_t n = s.nextWriteBytes(ring);
    ASSERT_EQ(n, ring) << "pass " << i;
    s.wrote(n);
    s.writeCompleted();
    ASSERT_TRUE(r.arrived(n));
    r.consume(n);
    ASSERT_TRUE(r.creditDue());
    ASSERT_TRUE(s.credit(r.creditValue())) << "pass " << i;
    r.creditSent();
    EXPECT_EQ(s.credited(), (uint64_t(i) + 1) * ring);
  }
  EXPECT_GT(s.head(), uint64_t{1} << 32);
}

TEST(IbRingReceiver, RefusesArrivalsNoCorrectSenderMakes) {
  RingReceiver r(1000);
  EXPECT_FALSE(r.arrived(0));
  EXPECT_FALSE(r.arrived(1001));
  ASSERT_TRUE(r.arrived(700));
  EXPECT_FALSE(r.arrived(301)) << "past the ring's end";
  ASSERT_TRUE(r.arrived(300));
  EXPECT_FALSE(r.arrived(1)) << "the ring is full";
  EXPECT_EQ(r.available(), 1000u);
  r.consume(100);
  EXPECT_FALSE(r.arrived(101));
  EXPECT_TRUE(r.arrived(100));
  EXPECT_EQ(r.available(), 1000u);
}

TEST(IbRingReceiver, CreditIsDueOnlyAfterAWholeWrite) {
  RingReceiver r(1000);
  ASSERT_TRUE(r.arrived(100));
  ASSERT_TRUE(r.arrived(100));
  r.consume(50);
  EXPECT_FALSE(r.creditDue());
  r.consume(60);
  EXPECT_TRUE(r.creditDue());
  EXPECT_EQ(r.creditValue(), 110u);
  r.creditSent();
  EXPECT_FALSE(r.creditDue());
  r.consume(90);
  EXPECT_TRUE(r.creditDue());
  EXPECT_EQ(r.readOffset(), 200u);
}

// A stream of messages from a sender to a receiver through a ring, each side acting in a random
// order with random delays in the "network": writes land, complete locally, and credits travel
// at random moments, as they do on an HCA. Every message's bytes come out as they went in, the
// sender never writes over unconsumed bytes, and the immediate-carrying messages in flight to
// either side never exceed what the other's receive queue holds (2 * maxWrites).
TEST(IbRingSimulation, MessagesStreamThroughASmallRingIntact) {
  for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    std::mt19937 rng(seed);
    const uint64_t ring = 1000 + seed * 37;
    const uint32_t maxWrites = 1 + seed % 4;
    const uint64_t slice = std::max<uint64_t>(1, ring / 4);
    RingSender s(ring, maxWrites, slice);
    RingReceiver r(ring);
    std::vector<uint8_t> staging(ring), remote(ring);

    // The messages: sizes from 1 to 5x the ring; byte k of message m is (m * 131 + k) % 251.
    std::vector<uint64_t> sizes;
    for (int m = 0; m < 60; ++m) sizes.push_back(1 + rng() % (5 * ring));
    auto byteOf = [](size_t m, uint64_t k) { return uint8_t((m * 131 + k) % 251); };

    size_t sendMsg = 0, recvMsg = 0;
    uint64_t sentInMsg = 0, gotInMsg = 0;
    std::deque<uint64_t> wire;          // writes posted, not yet landed (sizes)
    std::deque<uint64_t> landedWrites;  // landed at the receiver, completion not yet polled
    std::deque<int> localDone;          // writes landed, local completion not yet polled
    std::deque<uint32_t> credits;       // credits in flight to the sender
    uint64_t wirePos = 0;               // stream position of the next write to land
    size_t maxToReceiver = 0, maxToSender = 0;

    for (int step = 0; step < 2000000 && recvMsg < sizes.size(); ++step) {
      switch (rng() % 6) {
        case 0: {  // the sender posts a write of the current message
          if (sendMsg == sizes.size()) break;
          const uint64_t n = s.nextWriteBytes(sizes[sendMsg] - sentInMsg);
          if (n == 0) break;
          const uint64_t at = s.headOffset();
          // Never over bytes the receiver has not consumed.
          ASSERT_LE(s.head() + n, r.consumed() + ring) << "overrun, seed " << seed;
          for (uint64_t k = 0; k < n; ++k) staging[at + k] = byteOf(sendMsg, sentInMsg + k);
          s.wrote(n);
          wire.push_back(n);
          sentInMsg += n;
          if (sentInMsg == sizes[sendMsg]) {
            ++sendMsg;
            sentInMsg = 0;
          }
          break;
        }
        case 1: {  // the oldest write lands (in order): bytes copied from staging *now*
          if (wire.empty()) break;
          const uint64_t n = wire.front();
          wire.pop_front();
          const uint64_t at = wirePos % ring;
          std::copy(staging.begin() + at, staging.begin() + at + n, remote.begin() + at);
          wirePos += n;
          landedWrites.push_back(n);
          localDone.push_back(1);
          break;
        }
        case 2:  // the sender polls a local completion
          if (!localDone.empty()) {
            localDone.pop_front();
            s.writeCompleted();
          }
          break;
        case 3:  // the receiver polls an arrival
          if (!landedWrites.empty()) {
            ASSERT_TRUE(r.arrived(landedWrites.front()));
            landedWrites.pop_front();
          }
          break;
        case 4: {  // the receiver consumes what it can and credits
          uint64_t n = std::min<uint64_t>(r.available(), 1 + rng() % (ring / 2));
          while (n > 0 && recvMsg < sizes.size()) {
            const uint64_t take = std::min(n, sizes[recvMsg] - gotInMsg);
            for (uint64_t k = 0; k < take; ++k)
              ASSERT_EQ(remote[(r.consumed() + k) % ring], byteOf(recvMsg, gotInMsg + k))
                  << "message " << recvMsg << " byte " << gotInMsg + k << ", seed " << seed;
            r.consume(take);
            gotInMsg += take;
            n -= take;
            if (gotInMsg == sizes[recvMsg]) {
              ++recvMsg;
              gotInMsg = 0;
            }
          }
          if (r.creditDue()) {
            credits.push_back(r.creditValue());
            r.creditSent();
          }
          break;
        }
        case 5:  // a credit reaches the sender
          if (!credits.empty()) {
            ASSERT_TRUE(s.credit(credits.front()));
            credits.pop_front();
          }
          break;
      }
      // Receive-queue use: data writes the receiver has not polled, credits the sender has not.
      maxToReceiver = std::max(maxToReceiver, wire.size() + landedWrites.size());
      maxToSender = std::max(maxToSender, credits.size());
    }
    ASSERT_EQ(recvMsg, sizes.size()) << "the stream stalled, seed " << seed;
    EXPECT_LE(maxToReceiver, maxWrites) << "seed " << seed;
    EXPECT_LE(maxToSender, maxWrites) << "seed " << seed;
  }
}

}  // namespace
}  // namespace squeeze
