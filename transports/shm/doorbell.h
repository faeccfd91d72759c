// Doorbell: one futex word per rank in shared memory. Any local peer that writes a message for
// the rank, or frees ring space the rank is waiting for, rings it; the rank sleeps on it when
// nothing can move. One word per rank lets one thread wait on all its shm peers at once.
#pragma once

#include <atomic>
#include <cstdint>

namespace squeeze {

class Doorbell {
 public:
  uint32_t snapshot() const { return seq_.load(std::memory_order_seq_cst); }
  // Wakes the owner if it sleeps. Lock-free; safe from any process mapping the word.
  void ring();
  // Sleeps while the word still equals `seen`, at most timeoutMs.
  void wait(uint32_t seen, int timeoutMs);

 private:
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint32_t> sleepers_{0};
};

}  // namespace squeeze
