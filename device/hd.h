// What the CPU and CUDA backends of device/ share: the marker for per-element math written once
// and compiled for both (SQZ_HD), and the opaque stream type the gpu* kernel entry points take,
// so headers that declare them need no CUDA header.
#pragma once

#if defined(__CUDACC__)
#define SQZ_HD __host__ __device__
#else
#define SQZ_HD
#endif

// 1 while nvcc compiles device code (the __device__ pass), 0 for host code and g++.
#if defined(__CUDA_ARCH__)
#define SQZ_DEVICE_COMPILE 1
#else
#define SQZ_DEVICE_COMPILE 0
#endif

// cudaStream_t is `struct CUstream_st*`; declared here so host headers stay CUDA-free.
struct CUstream_st;

namespace squeeze::device {
using GpuStream = CUstream_st*;
}  // namespace squeeze::device
