// The registration cache (see ib_reg_cache.h).
#include "transports/ib/ib_reg_cache.h"

#include <utility>
#include <vector>

#include "base/error.h"

namespace squeeze {

RegCache::RegCache(size_t maxIdleBytes, RegisterFn reg, DeregisterFn dereg)
    : maxIdleBytes_(maxIdleBytes), reg_(std::move(reg)), dereg_(std::move(dereg)) {}

RegCache::~RegCache() {
  for (auto& [begin, e] : index_) {
    dereg_(e->handle);
    delete e;
  }
  for (Entry* e : detached_) {
    dereg_(e->handle);
    delete e;
  }
}

RegCache::Entry* RegCache::find(uintptr_t begin, uintptr_t end) {
  auto it = index_.upper_bound(begin);
  while (it != index_.begin()) {
    --it;
    Entry* e = it->second;
    if (e->end >= end) return e;
  }
  return nullptr;
}

const RegCache::Entry* RegCache::acquire(void* addr, size_t len) {
  SQZ_ENFORCE(len > 0, "registering an empty range");
  const auto begin = reinterpret_cast<uintptr_t>(addr);
  SQZ_ENFORCE(begin + len > begin, "range wraps the address space");
  if (Entry* e = find(begin, begin + len)) {
    ++hits_;
    if (e->refs++ == 0) {
      idle_.erase(e->lru);
      idleBytes_ -= e->end - e->begin;
    }
    return e;
  }
  ++misses_;
  void* handle = reg_(addr, len);
  SQZ_ENFORCE(handle != nullptr, "the registration callback returned no handle");
  auto* e = new Entry{begin, begin + len, handle, 1, false, {}};
  index_.emplace(begin, e);
  return e;
}

void RegCache::release(const Entry* ce) {
  auto* e = const_cast<Entry*>(ce);
  SQZ_ENFORCE(e != nullptr && e->refs > 0, "releasing a registration nobody holds");
  if (--e->refs > 0) return;
  if (e->detached) {
    detached_.remove(e);
    dereg_(e->handle);
    delete e;
    return;
  }
  e->lru = idle_.insert(idle_.end(), e);
  idleBytes_ += e->end - e->begin;
  evict();
}

void RegCache::evict() {
  while (idleBytes_ > maxIdleBytes_ && !idle_.empty()) {
    Entry* e = idle_.front();
    idle_.pop_front();
    idleBytes_ -= e->end - e->begin;
    erase(e);
  }
}

void RegCache::erase(Entry* e) {
  auto range = index_.equal_range(e->begin);
  for (auto it = range.first; it != range.second; ++it)
    if (it->second == e) {
      index_.erase(it);
      break;
    }
  dereg_(e->handle);
  delete e;
}

void RegCache::invalidate(const void* addr, size_t len) {
  const auto begin = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = begin + len;
  std::vector<Entry*> hit;
  for (auto it = index_.begin(); it != index_.end() && it->first < end; ++it)
    if (it->second->end > begin) hit.push_back(it->second);
  for (Entry* e : hit) {
    if (e->refs == 0) {
      idle_.erase(e->lru);
      idleBytes_ -= e->end - e->begin;
      erase(e);
    } else {
      auto range = index_.equal_range(e->begin);
      for (auto it = range.first; it != range.second; ++it)
        if (it->second == e) {
          index_.erase(it);
          break;
        }
      e->detached = true;
      detached_.push_back(e);
    }
  }
}

}  // namespace squeeze
