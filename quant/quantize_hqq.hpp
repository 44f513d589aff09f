// A calibration-free quantizer that improves on RTN: each group's quantizer is optimised in the
// spirit of HQQ (half-quadratic quantization): the error W - deq(Wq) is split into a sparse part
// W_e, found by an lp shrinkage (p < 1, so a few large errors are set aside instead of dragging
// the fit), and the rest, fitted in closed form. With float offsets (W = scale * code + offset) the
// fit is HQQ's own: scale and offset by least squares, both real. With integer zero points the
// zero HQQ moves is rounded to a code (the best of three) and the scale refitted, the scale being the
// continuous freedom left. Each group keeps its best iterate by its error, starting from RTN's
// integer grid (hqq_start: zero a code, also for float offsets), so it is never worse than that start
// by that error.
//
// The error is weighed, because the weights' plain L2 is a poor guide to the model's loss (measured
// in docs/quantization.md): a layer's inputs differ in second moment by hundreds of times between
// channels, and by millions where activations are massive, and a fit that trades error freely
// between rows moves it onto the few that matter.
// - Rows: by a calibration's diag(H) (the inputs' second moments: the layer's output error when the
//   inputs are uncorrelated) when there is one; without one, by the inverse of the row's own mean
//   square weight. A trained layer balances its channels' contributions, so a channel fed by large
//   inputs carries small weights: the rows of massive activations are the rows of small weights.
// - Weights: each by |w| + the group's rms, so the few large weights of a group, which carry most of
//   its output, are fitted more closely than the bulk around zero.
#pragma once

#include <cstdint>
#include <vector>

#include "format/quantized_matrix.hpp"
#include "quant/hessian.hpp"

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
    bool balance_rows = true;        // no row_weights: rows by the inverse of their mean square weight
    bool weigh_by_magnitude = true;  // each weight's error by |w| + its group's rms
};

struct HqqConfig {
    // What quantize_rtn makes; HQQ starts from its integer grid. Symmetric: the zero stays 2^(bits-1),
    // only the scale is refitted; float_offsets: scale and offset are both refitted.
    WeightFormat format{.bits = 3, .group_size = 64, .scale_type = ScaleType::F16};
    HqqOptions options;
    // K weights >= 0 of each row's squared error (empty: all 1). A group whose rows all weigh 0 keeps
    // RTN's quantizer.
    std::vector<float> row_weights;
};

// The row weights of a calibration: its diag(H), each input's second moment.
std::vector<float> calibration_row_weights(const Hessian& hessian);

// The row weights without one: 1 / (row's mean square weight), capped at kMaxBalancedRowWeight times
// their mean so that a row of zeros does not take the whole fit. weights: K x N, row-major.
constexpr float kMaxBalancedRowWeight = 100.0f;
std::vector<float> balanced_row_weights(int64_t k, int64_t n, const float* weights);

// Where HQQ starts: quantize_rtn's integer grid in `format`; with float offsets, offset = -zero *
// scale (rounded to the scales' type), so zero stays a code unless the fit finds better. (RTN's own
// float offsets span each group's min..max, and zero is then no code: measured much worse.)
QuantizedMatrix hqq_start(const WeightFormat& format, int64_t k, int64_t n, const float* weights);

// weights: the dense K x N matrix, row-major (W[k][n] at weights[k * n + n]), as quantize_rtn.
QuantizedMatrix quantize_hqq(const HqqConfig& config, int64_t k, int64_t n, const float* weights);

}  // namespace qjit
