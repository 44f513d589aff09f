// A layer quantized from dense fp32 weights by one of the calibration-free methods: RTN, HQQ, or
// MiLo (HQQ plus a low-rank compensator), as qjit_linear_create_from_f32 asks.
#pragma once

#include <cstdint>
#include <memory>

#include "qjit/qjit.h"
#include "runtime/linear_layer.hpp"

namespace qjit {

// Throws an invalid-argument Error naming the field of `config` that is out of range for a layer of
// k rows.
void validate_quant_config(const qjit_quant_config& config, int64_t k);

// weights: K x N row-major (W[k][n]).
std::unique_ptr<qjit_linear> make_linear_from_f32(qjit_context* context, const qjit_quant_config& config, int64_t k,
                                                  int64_t n, const float* weights);

}  // namespace qjit
