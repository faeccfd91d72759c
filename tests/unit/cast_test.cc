// The cast codecs' kernels (device/cpu/cast.cc: F16C and branch-free bfloat16 loops) give the
// same bits as the scalar conversions of device/reduce.h, over every 16-bit pattern and over
// float inputs that include rounding ties, subnormals, infinities and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device/cast.h"
#include "device/reduce.h"

namespace squeeze::device {
namespace {

std::vector<float> trickyFloats() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 1e-8f, -1e-40f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), 3.4e38f};
  std::mt19937 gen(7);
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = gen();
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);  // every exponent, including ties at both widths
  }
  return v;
}

uint32_t bitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(CastKernels, WidenMatchesScalarForEveryPattern) {
  std::vector<uint16_t> in(65536);
  for (uint32_t i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
  std::vector<float> out(65536), sum(65536), local(65536, 0.5f);
  for (Narrow k : {Narrow::kHalf, Narrow::kBfloat16}) {
    cpuWiden(k, in.data(), out.data(), in.size());
    cpuWidenAdd(k, sum.data(), local.data(), in.data(), in.size());
    for (uint32_t i = 0; i < 65536; ++i) {
      float ref = k == Narrow::kHalf ? halfToFloat(in[i]) : bfloat16ToFloat(in[i]);
      if (std::isnan(ref)) {  // F16C quiets signalling NaNs; NaN must stay NaN
        ASSERT_TRUE(std::isnan(out[i])) << "pattern " << i;
        continue;
      }
      ASSERT_EQ(bitsOf(out[i]), bitsOf(ref)) << "pattern " << i;
      float refSum = 0.5f + ref;
      if (!std::isnan(refSum)) {
        ASSERT_EQ(bitsOf(sum[i]), bitsOf(refSum)) << "pattern " << i;
      }
    }
  }
}

TEST(CastKernels, NarrowMatchesScalar) {
  std::vector<float> in = trickyFloats();
  std::vector<uint16_t> out(in.size());
  for (Narrow k : {Narrow::kHalf, Narrow::kBfloat16}) {
    cpuNarrow(k, in.data(), out.data(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      uint16_t ref = k == Narrow::kHalf ? floatToHalf(in[i]) : floatToBfloat16(in[i]);
      if (std::isnan(in[i])) {  // any NaN payload is fine, but it must stay NaN
        float back = k == Narrow::kHalf ? halfToFloat(out[i]) : bfloat16ToFloat(out[i]);
        ASSERT_TRUE(std::isnan(back)) << i;
      } else {
        ASSERT_EQ(out[i], ref) << "input " << in[i] << " (element " << i << ")";
      }
    }
  }
}

}  // namespace
}  // namespace squeeze::device
