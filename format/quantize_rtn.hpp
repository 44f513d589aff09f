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

// The range a group of values in [lo, hi] is quantized over (GPTQ's find_params): widened to
// contain 0, mirrored when symmetric, [-1, 1] for an all-zero group.
struct QuantRange {
    float lo, hi;
};
QuantRange quantization_range(float lo, float hi, bool symmetric);
// The step of `range` at `bits`; with fp16 scales rounded to half precision (the smallest normal
// half where it would round to 0, so codes stay finite).
float range_scale(const QuantRange& range, int bits, bool f16_scales);

// weights: the dense K x N matrix, row-major (W[k][n] at weights[k * n + n]).
QuantizedMatrix quantize_rtn(const RtnConfig& config, int64_t k, int64_t n, const float* weights);

}  // namespace qjit
