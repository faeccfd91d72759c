// CUDA kernels behind device/linalg.h (being written).
