// What the GPU kernel tests share (kernels_test, round_kernels_test): device bytes with room for
// a misalignment, random elements of every type, byte-for-byte comparison (two NaNs of the type
// are equal: x86 and CUDA make different default NaNs) and the datatypes and ops.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/types.h"
#include "device/cuda/runtime.h"
#include "device/elementwise.h"

namespace squeeze::device {

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                  DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBfloat16};
constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};

// Device bytes with room for a misalignment offset on either side.
class Dev {
 public:
  explicit Dev(size_t bytes) : buf_(bytes + 64) {}
  Dev(const void* host, size_t bytes, size_t offset = 0) : buf_(bytes + 64) {
    put(host, bytes, offset);
  }
  void put(const void* host, size_t bytes, size_t offset = 0) {
    if (!bytes) return;
    cuda::check(cudaMemcpy(at(offset), host, bytes, cudaMemcpyHostToDevice), "upload");
    // From pageable memory cudaMemcpy may return before the copy lands (it is staged), and the
    // kernels run on non-blocking streams, which do not wait for the legacy one.
    cuda::check(cudaStreamSynchronize(cudaStreamLegacy), "upload");
  }
  template <class T = unsigned char>
  std::vector<T> get(size_t count, size_t offset = 0) const {
    std::vector<T> h(count);
    if (count)
      cuda::check(cudaMemcpy(h.data(), at(offset), count * sizeof(T), cudaMemcpyDeviceToHost),
                  "download");
    return h;
  }
  unsigned char* at(size_t offset) const {
    return static_cast<unsigned char*>(buf_.data()) + offset;
  }

 private:
  cuda::DeviceBuffer buf_;
};

// dst = the bytes of src (nothing for none: memcpy's pointers may not be null, even for 0 bytes,
// and an empty vector's data() may be).
inline void copyBytes(void* dst, const std::vector<unsigned char>& src) {
  if (!src.empty()) std::memcpy(dst, src.data(), src.size());
}

inline std::vector<unsigned char> randomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t r = gen();
    std::memcpy(v.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return v;
}

// Random elements: integers any bits; floats mostly ordinary values (so sums and products mean
// something), with some arbitrary bit patterns (subnormals, infinities, NaN) mixed in.
inline std::vector<unsigned char> randomElements(DataType t, size_t n, uint64_t seed) {
  std::vector<unsigned char> v = randomBytes(n * dataTypeSize(t), seed);
  std::mt19937 gen(static_cast<uint32_t>(seed * 31 + 7));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (size_t i = 0; i < n; ++i) {
    if (gen() % 8 == 0) continue;  // keep the random bits
    const float f = normal(gen);
    unsigned char* p = v.data() + i * dataTypeSize(t);
    switch (t) {
      case DataType::kFloat16: {
        const uint16_t h = floatToHalf(f);
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBfloat16: {
        const uint16_t h = floatToBfloat16(f);
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kFloat32:
        std::memcpy(p, &f, 4);
        break;
      case DataType::kFloat64: {
        const double d = double(f) * 1e-3;
        std::memcpy(p, &d, 8);
        break;
      }
      default:
        break;
    }
  }
  return v;
}

inline bool isNan(DataType t, const unsigned char* p) {
  switch (t) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    }
    case DataType::kBfloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    }
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return std::isnan(d);
    }
    default:
      return false;
  }
}

// Byte-for-byte equality of n elements (two NaNs of the type are equal).
inline void expectSame(DataType t, const unsigned char* cpu, const unsigned char* gpu, size_t n,
                       const std::string& what) {
  const size_t size = dataTypeSize(t);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char *c = cpu + i * size, *g = gpu + i * size;
    if (std::memcmp(c, g, size) == 0 || (isNan(t, c) && isNan(t, g))) continue;
    if (bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " elements differ, first at "
                     << first;
}
inline void expectSameFloats(const std::vector<float>& cpu, const std::vector<float>& gpu,
                             const std::string& what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  expectSame(DataType::kFloat32, reinterpret_cast<const unsigned char*>(cpu.data()),
             reinterpret_cast<const unsigned char*>(gpu.data()), cpu.size(), what);
}
inline void expectSameBytes(const std::vector<unsigned char>& cpu,
                            const std::vector<unsigned char>& gpu, const std::string& what) {
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  expectSame(DataType::kUint8, cpu.data(), gpu.data(), cpu.size(), what);
}

inline std::string name(DataType t, RedOp op, size_t n) {
  return std::string(dataTypeName(t)) + "/" + redOpName(op) + "/n=" + std::to_string(n);
}

}  // namespace squeeze::device
