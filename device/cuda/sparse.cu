// CUDA kernels behind device/sparse.h (being written).
