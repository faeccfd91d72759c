// CUDA kernels behind device/reduce.h (being written).
