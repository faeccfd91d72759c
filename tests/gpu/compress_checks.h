// What the compressed-call tests on device buffers share (compress_test, stream_compressed_test):
// the ranks' inputs, device bytes copied on a rank's own stream, bitwise and tolerant
// comparisons, a codec's saved state parsed, and one compressed call on device (or host) buffers.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../collective/test_util.h"
#include "device/quantize.h"

namespace sqztest {

// ---- inputs ----------------------------------------------------------------------------------

// Gradient-like values in [-1, 1] on a grid of 1/1000 (so magnitudes tie, which exercises the
// selection's tie rule), about 5% exact zeros, and a larger scale on every 97th element.
inline float inputValue(int rank, int call, size_t i) {
  const uint64_t key = (uint64_t(rank) << 48) ^ (uint64_t(call) << 40) ^ i;
  const uint64_t h = squeeze::device::mix64(key + 0x9e3779b97f4a7c15ull);  // splitmix64's step
  if (h % 20 == 0) return 0.0f;
  const float v = float(int64_t(h >> 20) % 2001 - 1000) / 1000.0f;
  return i % 97 == 0 ? v * 8.0f : v;
}

inline std::vector<float> inputs(int rank, int call, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = inputValue(rank, call, i);
  return v;
}

// ---- device memory ---------------------------------------------------------------------------

// Device memory, or pinned mapped host memory. With a stream (ranks as threads sharing one
// GPU), device memory is allocated and freed stream-ordered and copied on that non-blocking
// stream, which the rank synchronizes alone: nothing a rank does waits for the whole device
// while another rank's stream is held by its call (NCCL's rule holds for tests too).
class GpuBytes {
 public:
  explicit GpuBytes(size_t bytes, bool pinned = false, cudaStream_t stream = nullptr)
      : pinned_(pinned), stream_(pinned ? nullptr : stream) {
    const size_t n = std::max<size_t>(bytes, 1);
    const cudaError_t rc =
        pinned    ? cudaHostAlloc(&ptr_, n, cudaHostAllocMapped | cudaHostAllocPortable)
        : stream_ ? cudaMallocAsync(&ptr_, n, stream_)
                  : cudaMalloc(&ptr_, n);
    if (rc != cudaSuccess) {
      ADD_FAILURE() << "allocating " << n << " bytes: " << cudaGetErrorString(rc);
      ptr_ = nullptr;
    }
  }
  ~GpuBytes() {
    if (!ptr_) return;
    if (pinned_)
      (void)cudaFreeHost(ptr_);
    else if (stream_)
      (void)cudaFreeAsync(ptr_, stream_);
    else
      (void)cudaFree(ptr_);
  }
  GpuBytes(const GpuBytes&) = delete;
  GpuBytes& operator=(const GpuBytes&) = delete;
  void* ptr() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void put(const void* src, size_t bytes) {
    if (bytes) copy(ptr_, src, bytes);
  }
  template <class T>
  void put(const std::vector<T>& v) {
    put(v.data(), v.size() * sizeof(T));
  }
  template <class T>
  std::vector<T> get(size_t count) const {
    std::vector<T> v(count);
    if (count) copy(v.data(), ptr_, count * sizeof(T));
    return v;
  }

 private:
  void copy(void* dst, const void* src, size_t bytes) const {
    if (!stream_) {
      EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), cudaSuccess);
      // From pageable memory cudaMemcpy may return before the copy lands (it is staged).
      EXPECT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
      return;
    }
    EXPECT_EQ(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }

  bool pinned_;
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

// ---- results -----------------------------------------------------------------------------------

// A test's init errors and its ranks' failures (failures[r]: rank r's), the first 40 shown.
inline void reportFailures(const RunResult& run,
                           const std::vector<std::vector<std::string>>& failures) {
  for (const std::string& e : run.initErrors) ADD_FAILURE() << "init failed: " << e;
  size_t shown = 0;
  for (size_t r = 0; r < failures.size(); ++r)
    for (const std::string& f : failures[r])
      if (shown++ < 40) ADD_FAILURE() << "rank " << r << ": " << f;
  if (shown > 40) ADD_FAILURE() << shown - 40 << " more failures not shown";
}

inline bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Bitwise equal, or both NaN.
inline bool sameOrBothNan(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i])))
      return false;
  return true;
}

// "" when a and b agree to tol * max|b| (+ a tiny floor) at all but `outliers` elements, else
// where they differ most.
inline std::string closeEnough(const std::vector<float>& a, const std::vector<float>& b,
                               double tol, size_t outliers) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < b.size(); ++i) scale = std::max(scale, std::fabs(double(b[i])));
  const double limit = tol * scale + 1e-6;
  size_t at = 0, over = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= limit)) ++over;
    if (!(d <= worst)) {
      worst = d;
      at = i;
    }
  }
  if (over <= outliers) return "";
  return std::to_string(over) + " elements differ by more than " + std::to_string(limit) +
         ", the most at element " + std::to_string(at) + ": " + std::to_string(a[at]) + " vs " +
         std::to_string(b[at]);
}

inline std::string firstDifference(const std::vector<float>& dev,
                                   const std::vector<float>& host) {
  for (size_t i = 0; i < std::min(dev.size(), host.size()); ++i)
    if (std::memcmp(&dev[i], &host[i], sizeof(float)) != 0)
      return "element " + std::to_string(i) + ": device " +
             describeElement(sqzFloat32, dev.data(), i) + ", host " +
             describeElement(sqzFloat32, host.data(), i);
  return "sizes " + std::to_string(dev.size()) + " and " + std::to_string(host.size());
}

// The arrays of a saved state (format in compress/handle.cc), after a header compared as bytes.
struct SavedState {
  std::vector<char> header;
  std::vector<std::pair<std::string, std::vector<float>>> arrays;
  bool ok = false;
};

inline SavedState parseState(const std::vector<char>& b) {
  SavedState s;
  size_t at = 8 + 4 + 4 + 8 + 8;
  auto u32 = [&](uint32_t& v) {
    if (at + 4 > b.size()) return false;
    std::memcpy(&v, &b[at], 4);
    at += 4;
    return true;
  };
  uint32_t n = 0, arrays = 0;
  if (!u32(n) || (at += n) > b.size() || !u32(arrays)) return s;
  s.header.assign(b.begin(), b.begin() + at);
  for (uint32_t a = 0; a < arrays; ++a) {
    if (!u32(n) || at + n + 8 > b.size()) return s;
    std::string name(&b[at], n);
    at += n;
    uint64_t len;
    std::memcpy(&len, &b[at], 8);
    at += 8;
    if (at + len * 4 > b.size()) return s;
    std::vector<float> v(len);
    if (len) std::memcpy(v.data(), &b[at], len * 4);
    at += len * 4;
    s.arrays.emplace_back(std::move(name), std::move(v));
  }
  // Version 2: the adaptive policy's section (not parsed: skipped by the tolerance comparison).
  uint64_t policyBytes = 0;
  if (at + 8 > b.size()) return s;
  std::memcpy(&policyBytes, &b[at], 8);
  at += 8;
  if (at + policyBytes > b.size()) return s;
  at += policyBytes;
  s.ok = at == b.size();
  return s;
}

inline std::vector<char> saveState(sqzCodec_t codec) {
  size_t bytes = 0;
  if (sqzCodecSaveState(codec, nullptr, &bytes) != sqzSuccess) return {};
  std::vector<char> buf(bytes);
  if (sqzCodecSaveState(codec, buf.data(), &bytes) != sqzSuccess) return {};
  return buf;
}

// The all-reduce of `in` through `codec` on device buffers (host buffers when onHost), in place
// or not; false (with a failure) when it did not succeed.
inline bool deviceCodecCall(sqzCodec_t codec, sqzComm_t comm, const std::vector<float>& in,
                            sqzRedOp_t op, bool inPlace, bool onHost, GpuBytes& din,
                            GpuBytes& dout, cudaStream_t stream, const std::string& key,
                            std::vector<float>& result, std::vector<std::string>& failures) {
  const size_t count = in.size();
  if (onHost) {
    std::vector<float> hin = in, hout(count, -1.0f);
    if (sqzAllReduceCompressed(hin.data(), inPlace ? hin.data() : hout.data(), count, sqzFloat32,
                               op, codec, comm, nullptr) != sqzSuccess) {
      failures.push_back(key + ": host call on the device codec: " + sqzGetLastError(comm));
      return false;
    }
    result = inPlace ? hin : hout;
    return true;
  }
  din.put(in);
  dout.put(std::vector<float>(count, -1.0f));
  if (sqzAllReduceCompressed(din.ptr(), inPlace ? din.ptr() : dout.ptr(), count, sqzFloat32, op,
                             codec, comm, stream) != sqzSuccess) {
    failures.push_back(key + ": device call: " + sqzGetLastError(comm));
    return false;
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) {
    failures.push_back(key + ": stream: " + cudaGetErrorString(cudaGetLastError()));
    return false;
  }
  sqzResult_t async = sqzSuccess;
  sqzCommGetAsyncError(comm, &async);
  if (async != sqzSuccess) {
    failures.push_back(key + ": device call failed: " + sqzGetLastError(comm));
    return false;
  }
  result = (inPlace ? din : dout).get<float>(count);
  if (!inPlace && !sameBits(din.get<float>(count), in))
    failures.push_back(key + ": the device call modified sendbuff");
  return true;
}

}  // namespace sqztest
