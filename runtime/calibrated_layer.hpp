// The quantization methods that read a calibration of the layer's inputs (format/hessian.hpp):
// GPTQ (format/quantize_gptq.hpp) and the 2/4/16 mixed format (format/quantize_mixed.hpp), as
// qjit_linear_create_calibrated and qjit_linear_create_from_f32 ask for them.
#pragma once

#include <cstdint>

#include "format/hessian.hpp"
#include "format/quantized_matrix.hpp"
#include "qjit/qjit.h"

namespace qjit {

// Throws an invalid-argument Error naming the field of `config` (method GPTQ or MIXED) that is out
// of range for a layer of k rows: GPTQ bits 2/3/4/8 and damp in [0, 1]; MIXED groups of 32 rows or
// more (not per column), asymmetric, mixed_alpha in [0, 1], outlier_fraction in [0, 0.005], damp in
// [0, 1]. bits is not read for MIXED.
void validate_calibrated_config(const qjit_quant_config& config, int64_t k);

// weights: K x N row-major (W[k][n]). hessian: the calibration of the layer's K inputs, or null.
// GPTQ needs one; MIXED without one ranks its groups by their range and rounds to nearest (and
// then takes no act-order). A calibration of another K, or one with nothing in it, is refused.
QuantizedMatrix quantize_calibrated(const qjit_quant_config& config, const Hessian* hessian, int64_t k, int64_t n,
                                    const float* weights);

}  // namespace qjit
