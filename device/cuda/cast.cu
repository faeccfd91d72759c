// CUDA kernels behind device/cast.h (being written).
