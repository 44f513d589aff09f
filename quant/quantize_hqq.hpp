// A calibration-free quantizer that improves on RTN: each group's quantizer is optimised in the
// spirit of HQQ (half-quadratic quantization): the error W - deq(Wq) is split into a sparse part
// W_e, found by an lp shrinkage (p < 1, so a few large errors are set aside instead of dragging
// the fit), and the rest, fitted in closed form. qjit's kernels need integer zero points, so where
// HQQ moves a continuous zero, this one rounds the zero to a code and refits the scale (least
// squares), the scale being the continuous freedom left. Each group keeps its best iterate by
// plain L2 error, starting from RTN's quantizer, so it is never worse than quantize_rtn.
#pragma once

#include <cstdint>

#include "format/quantized_matrix.hpp"

namespace qjit {

// HQQ's own options.
struct HqqOptions {
    int iterations = 20;      // at most; a group stops earlier once its error has stopped falling
    float lp = 0.7f;          // the p of the shrinkage, in (0, 1]
    // The shrinkage acts on errors in code units (divided by the group's scale), so one beta
    // suits weights of any magnitude: errors below beta^(-1/(2-p)) codes are fitted, larger ones
    // are (partly) set aside. beta grows by beta_growth each iteration, setting less aside.
    float beta = 10.f;
    float beta_growth = 1.01f;
};

struct HqqConfig {
    // What quantize_rtn makes (HQQ starts from it); symmetric: the zero stays 2^(bits-1), only the
    // scale is refitted.
    WeightFormat format{.bits = 3, .group_size = 64, .scale_type = ScaleType::F16};
    HqqOptions options;
};

// weights: the dense K x N matrix, row-major (W[k][n] at weights[k * n + n]), as quantize_rtn.
QuantizedMatrix quantize_hqq(const HqqConfig& config, int64_t k, int64_t n, const float* weights);

}  // namespace qjit
