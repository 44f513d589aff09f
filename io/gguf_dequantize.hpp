// ggml's dequantization of GGUF tensors to fp32, bit for bit as the gguf Python package computes it
// (gguf-py/gguf/quants.py in llama.cpp): fp16 scales are converted to fp32 first, then each value
// takes the same fp32 operations in the same order, e.g. Q4_1 `d * q + m`, Q4_K
// `(d * sc) * q - (dmin * m)`, Q6_K `(d * sc) * (code - 32)`. A product of an fp16 scale and the
// small integer codes is exact in fp32, so a value is rounded once, where numpy rounds it; the
// source is compiled without floating-point contraction all the same.
//
// Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. Any other is
// refused with QJIT_ERROR_UNSUPPORTED naming it.
#pragma once

#include <cstdint>
#include <vector>

#include "io/gguf_file.hpp"

namespace qjit {

// Whether the functions below dequantize `type`.
bool gguf_dequantize_supported(GgmlType type);

// One row of `k` values (a multiple of the type's block, else QJIT_ERROR_INVALID_ARGUMENT) from the
// k / block values * block bytes at `row` into out[0..k).
void dequantize_gguf_row(GgmlType type, const uint8_t* row, int64_t k, float* out);

// The whole tensor as [rows][dims[0]], in the order it is stored. QJIT_ERROR_INVALID_ARGUMENT when
// its byte count does not match its type and dimensions (a tensor not from GgufFile).
std::vector<float> dequantize_gguf(const GgufTensor& tensor);

}  // namespace qjit
