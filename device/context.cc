// What every execution context shares (see context.h): the pool of call buffers and the scratch
// slots, over the backend's allocate(), and the count of pinned-slot fallbacks.
#include "device/context.h"

#include <atomic>
#include <cstring>

#include "base/error.h"

namespace squeeze::device {

Context::~Context() = default;

namespace {
std::atomic<uint64_t> gSlotFallbacks{0};
}  // namespace

uint64_t slotFallbacks() { return gSlotFallbacks.load(std::memory_order_relaxed); }

void countSlotFallback() { gSlotFallbacks.fetch_add(1, std::memory_order_relaxed); }

void Context::reserve(std::unique_ptr<Allocation>& a, size_t bytes, Space space) {
  if (a && a->size() >= bytes) return;
  if (a) retire(std::move(a));  // work enqueued before may still use it
  a = allocate(bytes, space);
}

void Context::checkWords(const void* src, const uint32_t* expected, size_t words,
                         std::function<void(const uint32_t* got)> fail) {
  SQZ_ENFORCE(words <= kCheckWords, "checkWords of ", words, " words");
  uint32_t got[kCheckWords];
  read(got, src, words * sizeof(uint32_t));
  if (std::memcmp(got, expected, words * sizeof(uint32_t)) != 0) fail(got);
}

void Context::checkIndices(const uint32_t* idx, size_t m, size_t count,
                           std::function<void(size_t j, uint32_t index)> fail) {
  const size_t j = firstBadIndex(idx, m, count);
  if (j == SIZE_MAX) return;
  uint32_t index;
  read(&index, idx + j, sizeof index);
  fail(j, index);
}

size_t Context::selectTopkFeedback(const float* x, size_t n, size_t k, bool sampled,
                                   uint32_t* idx, float* residual, double* inputSq,
                                   double* sentSq) {
  const size_t m = selectTopk(x, n, k, sampled, idx);
  gather(x, idx, m, reinterpret_cast<float*>(idx + m));
  sparseFeedback(x, n, idx, m, residual, inputSq, sentSq);
  return m;
}

void Context::gatherFeedback(const float* x, size_t n, const uint32_t* idx, size_t k,
                             float* values, float* residual, double* inputSq, double* sentSq) {
  gather(x, idx, k, values);
  sparseFeedback(x, n, idx, k, residual, inputSq, sentSq);
}

size_t Context::selectAtLeastFeedback(const float* x, size_t n, uint32_t minKey, uint32_t* idx,
                                      size_t cap, float* residual, double* inputSq,
                                      double* sentSq) {
  const size_t m = selectAtLeast(x, n, minKey, idx, cap);
  if (m != SIZE_MAX) sparseFeedback(x, n, idx, m, residual, inputSq, sentSq);
  return m;
}

void Context::castFeedback(Narrow kind, const float* x, uint16_t* payload, size_t n,
                           float* residual, double* inputSq, double* sentSq) {
  narrow(kind, x, payload, n);
  auto* back = reinterpret_cast<float*>(scratch(Slot::kDecoded, n * sizeof(float)));
  widen(kind, payload, back, n);
  feedbackPass(x, back, n, residual, inputSq, sentSq);
}

void Context::copyFeedback(const float* x, float* payload, size_t n, float* residual,
                           double* inputSq, double* sentSq) {
  copy(payload, x, n * sizeof(float));
  feedbackPass(x, payload, n, residual, inputSq, sentSq);
}

void Context::beginCall() {
  free_.clear();
  for (size_t i = 0; i < pool_.size(); ++i) free_.push_back(static_cast<int>(i));
}

int Context::acquire(size_t bytes, Space space) {
  SQZ_ENFORCE(onDevice() || space == Space::kHost, "device memory asked for on the host");
  // Reuse a free buffer of the same space, preferring one already large enough.
  int pick = -1;
  for (size_t k = 0; k < free_.size(); ++k) {
    const Pooled& e = pool_[free_[k]];
    if (e.space != space) continue;
    if (pick < 0 || (e.memory->size() >= bytes && pool_[free_[pick]].memory->size() < bytes))
      pick = static_cast<int>(k);
  }
  int index;
  if (pick >= 0) {
    index = free_[pick];
    free_.erase(free_.begin() + pick);
  } else {
    index = static_cast<int>(pool_.size());
    pool_.push_back(Pooled{space, nullptr});
  }
  reserve(pool_[index].memory, bytes, space);
  return index;
}

char* Context::data(int index) const { return pool_[index].memory->data(); }

Space Context::space(int index) const { return pool_[index].space; }

char* Context::scratch(Slot slot, size_t bytes) {
  std::unique_ptr<Allocation>& a = slots_[static_cast<int>(slot)];
  reserve(a, bytes, workSpace());
  return a->data();
}

}  // namespace squeeze::device
