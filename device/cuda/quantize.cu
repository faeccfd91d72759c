// CUDA kernels behind device/quantize.h (being written).
