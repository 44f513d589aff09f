// A layer quantized from dense fp32 weights, as qjit_linear_create_from_f32 and
// qjit_linear_create_calibrated ask: RTN, HQQ, MiLo (HQQ plus a low-rank compensator), or, with a
// calibration of the layer's inputs, GPTQ and the 2/4/16 mixed format.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "quant/hessian.hpp"
#include "qjit/qjit.h"
#include "runtime/linear_layer.hpp"
#include "runtime/quant_config.hpp"

namespace qjit {

// weights: K x N row-major (W[k][n]). hessian: the calibration of the layer's K inputs, or null; GPTQ
// needs one, MIXED uses it when given (and takes act-order only with one), the other methods ignore
// it. A calibration with nothing in it is refused for GPTQ and MIXED, naming it.
std::unique_ptr<qjit_linear> make_linear_from_f32(qjit_context* context, const QuantizerConfig& quantizer, int64_t k,
                                                  int64_t n, const float* weights, const Hessian* hessian = nullptr);

// W[n][k] (QJIT_LAYOUT_N_BY_K) -> W[k][n], in tiles that stay in cache.
std::vector<float> k_by_n_from_n_by_k(const float* weights_n_by_k, int64_t k, int64_t n);

}  // namespace qjit
