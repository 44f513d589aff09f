// The sparse FFN's kernels for baseline x86-64 (each 8-lane vector two SSE halves).
#include "runtime/flash/sparse_ffn_simd.hpp"

QJIT_SPARSE_FFN_KERNEL_TABLE(sparse_ffn_kernels_baseline)
