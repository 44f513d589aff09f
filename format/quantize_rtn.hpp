// The baseline quantizer: round-to-nearest with each group's scale and zero point taken from the
// group's min and max (widened to include 0, as GPTQ's quantizer does).
#pragma once

#include <cstdint>

#include "format/quantized_matrix.hpp"

namespace qjit {

struct RtnConfig {
    int bits = 4;
    int64_t group_size = 128;  // rows per group; k for per column
    bool symmetric = false;
    qjit_dtype scale_dtype = QJIT_DTYPE_F32;
};

// weights: the dense K x N matrix, row-major (W[k][n] at weights[k * n + n]).
QuantizedMatrix quantize_rtn(const RtnConfig& config, int64_t k, int64_t n, const float* weights);

}  // namespace qjit
