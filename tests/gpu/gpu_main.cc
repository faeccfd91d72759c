// main() of the GPU test binaries: without a usable GPU (CI has the CUDA toolkit but no device)
// it prints why and exits 77, which meson counts as skipped; with one, it runs the gtests.
#include <gtest/gtest.h>

#include <cstdio>

#include "device/cuda/runtime.h"

int main(int argc, char** argv) {
  if (squeeze::cuda::deviceCount() == 0) {
    std::printf("SKIP: %s\n", squeeze::cuda::unavailableReason().c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
