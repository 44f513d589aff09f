// The baseline quantizer: round-to-nearest with each group's scale and zero point taken from the
// group's min and max (widened to include 0, as GPTQ's quantizer does).
#pragma once

#include <cstdint>

#include "format/quantized_matrix.hpp"

namespace qjit {

// The range a group of values in [lo, hi] is quantized over (GPTQ's find_params): widened to
// contain 0, mirrored when symmetric, [-1, 1] for an all-zero group.
struct QuantRange {
    float lo, hi;
};
QuantRange quantization_range(float lo, float hi, bool symmetric);
// A scale as `type` stores it: fp16 scales rounded to half precision (the smallest normal half where
// it would round to 0, so codes stay finite), others as they are.
float stored_scale(float scale, ScaleType type);
// The step of `range` at `bits`, as `type` stores it.
float range_scale(const QuantRange& range, int bits, ScaleType type);

// weights: the dense K x N matrix, row-major (W[k][n] at weights[k * n + n]). RTN has no options of
// its own: `format` (bits, group size, symmetry, F16 or F32 scales; its shape is set to K x N) is all
// it reads. Throws an invalid-argument Error naming the field for a format it does not make: mixed
// widths, second-order scales, act-order, outliers or a compensator.
QuantizedMatrix quantize_rtn(const WeightFormat& format, int64_t k, int64_t n, const float* weights);

}  // namespace qjit
