// A memory registration cache, as pure logic (unit-tested without hardware): registering memory
// with an HCA pins its pages and costs far more than a lookup, so a registration outlives its
// user and is reused by the next one whose range [addr, addr + len) it contains.
//
// - acquire(addr, len): an entry containing the range (a hit), or a new registration (a miss).
//   Entries are reference-counted; each acquire needs one release.
// - release: an entry nobody uses becomes idle, newest last. Idle entries beyond maxIdleBytes
//   (the eviction bound on pinned-but-unused memory) are deregistered oldest first.
// - invalidate(addr, len): the memory is going away (munmap). Idle entries overlapping it are
//   deregistered now; an entry still in use stops matching lookups and is deregistered at its
//   last release. Registrations never outlive the memory they pin.
//
// Only memory whose lifetime the caller controls may go through it: a registration pins the
// pages that were mapped when it was made, so memory freed and mapped again at the same address
// without invalidate() would be served stale pages. The ib transport uses it for the ring and
// staging buffers it allocates itself (ib_device.h), never for caller buffers.
//
// Lookups scan the entries that start at or below addr: O(entries), fine for the few dozen a
// process holds. Not thread-safe; the owner locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>

namespace squeeze {

class RegCache {
 public:
  // Registers [addr, addr + len) and returns a non-null handle, or throws.
  using RegisterFn = std::function<void*(void* addr, size_t len)>;
  using DeregisterFn = std::function<void(void* handle)>;

  struct Entry {
    uintptr_t begin;
    uintptr_t end;
    void* handle;
    int refs;
    bool detached;                    // invalidated while in use: no longer found by lookups
    std::list<Entry*>::iterator lru;  // position in idle_ while refs == 0
  };

  RegCache(size_t maxIdleBytes, RegisterFn reg, DeregisterFn dereg);
  // Deregisters every entry left. Entries still held then are the owner's bug: they are
  // deregistered too, and must not be released afterwards.
  ~RegCache();
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  // An entry covering [addr, addr + len), len > 0. Throws what the RegisterFn throws.
  const Entry* acquire(void* addr, size_t len);
  void release(const Entry* e);
  void invalidate(const void* addr, size_t len);

  size_t entries() const { return index_.size() + detached_.size(); }
  size_t idleEntries() const { return idle_.size(); }
  size_t idleBytes() const { return idleBytes_; }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  Entry* find(uintptr_t begin, uintptr_t end);
  void evict();
  void erase(Entry* e);  // deregisters and frees an entry not in idle_

  const size_t maxIdleBytes_;
  RegisterFn reg_;
  DeregisterFn dereg_;
  std::multimap<uintptr_t, Entry*> index_;  // by begin; detached entries are not here
  std::list<Entry*> idle_;                  // refs == 0, oldest first
  std::list<Entry*> detached_;              // invalidated while in use
  size_t idleBytes_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace squeeze
