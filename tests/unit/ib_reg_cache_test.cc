// The ib transport's registration cache without hardware (transports/ib/ib_reg_cache.h), with a
// fake registrar that records every registration and deregistration: lookups hit on ranges
// contained in a registration and miss otherwise, references keep entries alive, idle entries
// beyond the byte bound are evicted oldest first, invalidation drops idle entries at once and
// in-use ones at their last release, a failed registration leaves nothing behind, and the
// destructor deregisters everything.
#include "transports/ib/ib_reg_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <vector>

#include "base/error.h"

namespace squeeze {
namespace {

// Registrations as (begin, len); a handle is an index + 1 into `regs`.
struct FakeRegistrar {
  struct Reg {
    uintptr_t begin;
    size_t len;
    bool live;
  };
  std::vector<Reg> regs;
  bool fail = false;

  RegCache::RegisterFn reg() {
    return [this](void* addr, size_t len) -> void* {
      if (fail) throw std::runtime_error("registration refused");
      regs.push_back(Reg{reinterpret_cast<uintptr_t>(addr), len, true});
      return reinterpret_cast<void*>(regs.size());
    };
  }
  RegCache::DeregisterFn dereg() {
    return [this](void* handle) {
      const size_t i = reinterpret_cast<uintptr_t>(handle) - 1;
      ASSERT_LT(i, regs.size());
      ASSERT_TRUE(regs[i].live) << "deregistered twice";
      regs[i].live = false;
    };
  }
  size_t live() const {
    size_t n = 0;
    for (const Reg& r : regs) n += r.live;
    return n;
  }
};

void* at(uintptr_t a) { return reinterpret_cast<void*>(a); }

TEST(IbRegCache, HitsOnContainedRangesOnly) {
  FakeRegistrar f;
  RegCache c(1 << 30, f.reg(), f.dereg());
  const auto* a = c.acquire(at(0x10000), 0x1000);
  EXPECT_EQ(c.misses(), 1u);
  const auto* b = c.acquire(at(0x10100), 0x100);  // inside
  EXPECT_EQ(a, b);
  const auto* whole = c.acquire(at(0x10000), 0x1000);  // exactly the same
  EXPECT_EQ(a, whole);
  EXPECT_EQ(c.hits(), 2u);
  const auto* over = c.acquire(at(0x10f00), 0x200);  // runs past the end
  EXPECT_NE(over, a);
  const auto* before = c.acquire(at(0xff00), 0x200);  // starts before
  EXPECT_NE(before, a);
  EXPECT_EQ(c.misses(), 3u);
  EXPECT_EQ(f.regs.size(), 3u);
  EXPECT_EQ(f.regs[1].begin, 0x10f00u);
  EXPECT_EQ(f.regs[1].len, 0x200u);
  for (const auto* e : {a, b, whole, over, before}) c.release(e);
}

TEST(IbRegCache, FindsTheCoveringEntryAmongOverlappingOnes) {
  FakeRegistrar f;
  RegCache c(1 << 30, f.reg(), f.dereg());
  const auto* big = c.acquire(at(0x1000), 0x10000);
  const auto* small = c.acquire(at(0x8000), 0x10000);  // overlaps big, reaches further
  EXPECT_NE(big, small);
  EXPECT_EQ(c.acquire(at(0x2000), 0x100), big);
  EXPECT_EQ(c.acquire(at(0x10800), 0x100), small);
  EXPECT_EQ(c.acquire(at(0x9000), 0x100)->begin, 0x8000u) << "either covers; the nearest start";
  EXPECT_EQ(f.regs.size(), 2u);
}

TEST(IbRegCache, IdleEntriesAreReusedUntilEvictedOldestFirst) {
  FakeRegistrar f;
  RegCache c(0x3000, f.reg(), f.dereg());  // room for three idle pages
  const void* pages[4] = {at(0x100000), at(0x200000), at(0x300000), at(0x400000)};
  std::vector<const RegCache::Entry*> held;
  for (const void* p : pages) held.push_back(c.acquire(const_cast<void*>(p), 0x1000));
  for (const auto* e : held) c.release(e);  // released in order: page 0 is the oldest idle
  EXPECT_EQ(c.idleBytes(), 0x3000u);
  EXPECT_EQ(c.idleEntries(), 3u);
  EXPECT_FALSE(f.regs[0].live) << "the oldest idle entry goes first";
  EXPECT_TRUE(f.regs[1].live && f.regs[2].live && f.regs[3].live);
  // Reusing an idle entry takes it off the idle list; releasing makes it the newest.
  const auto* again = c.acquire(const_cast<void*>(pages[1]), 0x800);
  EXPECT_EQ(c.hits(), 1u);
  EXPECT_EQ(c.idleEntries(), 2u);
  c.release(again);
  const auto* fifth = c.acquire(at(0x500000), 0x1000);
  c.release(fifth);
  EXPECT_FALSE(f.regs[2].live) << "page 2 was the oldest idle one now";
  EXPECT_TRUE(f.regs[1].live);
  EXPECT_EQ(c.idleBytes(), 0x3000u);
}

TEST(IbRegCache, EntriesInUseAreNeverEvicted) {
  FakeRegistrar f;
  RegCache c(0, f.reg(), f.dereg());  // nothing may stay idle
  const auto* a = c.acquire(at(0x1000), 0x1000);
  const auto* b = c.acquire(at(0x1000), 0x10);
  EXPECT_EQ(a, b);
  c.release(a);
  EXPECT_TRUE(f.regs[0].live) << "one reference is left";
  c.release(b);
  EXPECT_FALSE(f.regs[0].live);
  EXPECT_EQ(c.entries(), 0u);
}

TEST(IbRegCache, InvalidateDropsIdleEntriesAtOnce) {
  FakeRegistrar f;
  RegCache c(1 << 30, f.reg(), f.dereg());
  c.release(c.acquire(at(0x1000), 0x1000));
  c.release(c.acquire(at(0x3000), 0x1000));
  c.release(c.acquire(at(0x5000), 0x1000));
  c.invalidate(at(0x1800), 0x2000);  // overlaps the first two
  EXPECT_FALSE(f.regs[0].live);
  EXPECT_FALSE(f.regs[1].live);
  EXPECT_TRUE(f.regs[2].live);
  EXPECT_EQ(c.entries(), 1u);
  EXPECT_EQ(c.idleBytes(), 0x1000u);
  // The same addresses register afresh: no stale registration is served.
  c.release(c.acquire(at(0x1000), 0x1000));
  EXPECT_EQ(f.regs.size(), 4u);
}

TEST(IbRegCache, InvalidateWhileInUseDetachesUntilTheLastRelease) {
  FakeRegistrar f;
  RegCache c(1 << 30, f.reg(), f.dereg());
  const auto* a = c.acquire(at(0x1000), 0x1000);
  c.invalidate(at(0x1000), 0x1000);
  EXPECT_TRUE(f.regs[0].live) << "still in use";
  EXPECT_EQ(c.entries(), 1u);
  const auto* b = c.acquire(at(0x1000), 0x1000);
  EXPECT_NE(a, b) << "a detached entry is not found again";
  c.release(a);
  EXPECT_FALSE(f.regs[0].live);
  c.release(b);
  EXPECT_TRUE(f.regs[1].live);
  EXPECT_EQ(c.entries(), 1u);
}

TEST(IbRegCache, FailedRegistrationLeavesNothing) {
  FakeRegistrar f;
  RegCache c(1 << 30, f.reg(), f.dereg());
  f.fail = true;
  EXPECT_THROW(c.acquire(at(0x1000), 0x1000), std::runtime_error);
  EXPECT_EQ(c.entries(), 0u);
  f.fail = false;
  c.release(c.acquire(at(0x1000), 0x1000));
  EXPECT_EQ(c.entries(), 1u);
}

TEST(IbRegCache, RejectsEmptyRanges) {
  FakeRegistrar f;
  RegCache c(1 << 30, f.reg(), f.dereg());
  EXPECT_THROW(c.acquire(at(0x1000), 0), Error);
}

TEST(IbRegCache, DestructorDeregistersEverything) {
  FakeRegistrar f;
  {
    RegCache c(1 << 30, f.reg(), f.dereg());
    c.release(c.acquire(at(0x1000), 0x1000));
    c.acquire(at(0x9000), 0x1000);  // still held: the owner's bug, but nothing may leak
    const auto* d = c.acquire(at(0x20000), 0x1000);
    c.invalidate(at(0x20000), 1);  // detached and held
    (void)d;
  }
  EXPECT_EQ(f.live(), 0u);
}

}  // namespace
}  // namespace squeeze
