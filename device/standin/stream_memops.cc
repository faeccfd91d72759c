// The CUDA stand-in's stream memory operations (standin.h), the driver entry points
// cudaGetDriverEntryPointByVersion hands out: cuStreamWaitValue32 (the stream waits until a
// 32-bit word satisfies a comparison; its worker polls the word, and the stream is "held" for
// the watchdog meanwhile) and cuStreamWriteValue32 (the stream stores a word when it gets
// there, with release order after its earlier work). A progress thread and a stream hand work
// to each other through such words in pinned memory, with no CUDA call on the progress side.
#include <cuda.h>

#include <algorithm>
#include <thread>

#include "device/standin/internal.h"

namespace squeeze::standin::detail {

namespace {

// CUDA's comparisons; GEQ is cyclic, as the driver documents: (int32_t)(*addr - value) >= 0.
bool waitSatisfied(uint32_t now, uint32_t value, unsigned flags) {
  switch (flags & ~CU_STREAM_WAIT_VALUE_FLUSH) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return static_cast<int32_t>(now - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return now == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (now & value) != 0;
    default:
      return ~(now | value) != 0;  // CU_STREAM_WAIT_VALUE_NOR
  }
}

// The word a stream operation names: 4-aligned memory a GPU can reach (device or pinned).
CUresult streamWord(CUstream stream, CUdeviceptr addr, std::shared_ptr<Stream>* s,
                    volatile uint32_t** word) {
  cudaError_t rc;
  *s = resolveStream(reinterpret_cast<cudaStream_t>(stream), &rc);
  if (!*s) return static_cast<CUresult>(rc);  // the numbers agree (400: invalid handle)
  *word = reinterpret_cast<volatile uint32_t*>(addr);
  if (!*word || addr % 4 || !isDeviceAccessible(const_cast<const uint32_t*>(*word)))
    return CUDA_ERROR_INVALID_VALUE;  // a GPU can only reach device or pinned memory
  if (stickyError(*(*s)->device)) return CUDA_ERROR_LAUNCH_FAILED;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI streamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                   unsigned int flags) {
  const ApiCall api(__func__);
  count(Count::kStreamOps);
  if ((flags & ~CU_STREAM_WAIT_VALUE_FLUSH) > CU_STREAM_WAIT_VALUE_NOR)
    return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  volatile uint32_t* word = nullptr;
  if (CUresult rc = streamWord(stream, addr, &s, &word)) return rc;
  Item item;
  item.what = "cuStreamWaitValue32";
  item.run = [word, value, flags](Stream& self) {
    setHold(self, Hold{"cuStreamWaitValue32", word, value, flags, nullptr});
    auto pause = std::chrono::microseconds(1);
    while (!waitSatisfied(__atomic_load_n(word, __ATOMIC_ACQUIRE), value, flags)) {
      if (stickyError(*self.device)) return;  // a failed context stops waiting
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
  };
  enqueue(s, std::move(item));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI streamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                    unsigned int flags) {
  const ApiCall api(__func__);
  count(Count::kStreamOps);
  // CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER would let the store pass earlier writes: nothing
  // here may rely on that, so only the default (a release store) is accepted.
  if (flags != CU_STREAM_WRITE_VALUE_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> s;
  volatile uint32_t* word = nullptr;
  if (CUresult rc = streamWord(stream, addr, &s, &word)) return rc;
  Item item;
  item.what = "cuStreamWriteValue32";
  item.run = [word, value](Stream&) { __atomic_store_n(word, value, __ATOMIC_RELEASE); };
  enqueue(s, std::move(item));
  return CUDA_SUCCESS;
}

}  // namespace

void* streamWaitValue32Entry() { return reinterpret_cast<void*>(&streamWaitValue32); }
void* streamWriteValue32Entry() { return reinterpret_cast<void*>(&streamWriteValue32); }

}  // namespace squeeze::standin::detail
