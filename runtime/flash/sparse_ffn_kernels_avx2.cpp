// The sparse FFN's kernels for AVX2 with FMA (compiled with -mavx2 -mfma -ffp-contract=fast, so
// a * b + c is one FMA and 8-lane vectors one register).
#include "runtime/flash/sparse_ffn_simd.hpp"

QJIT_SPARSE_FFN_KERNEL_TABLE(sparse_ffn_kernels_avx2)
