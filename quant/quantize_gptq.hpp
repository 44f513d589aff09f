// GPTQ: quantizes a K x N matrix row by row (rows = input features) and feeds each row's rounding
// error forward into the rows not yet quantized through the Cholesky factor of H^-1, so that the
// layer's output on the calibration inputs, not its weights, stays close. With act-order the rows
// are taken in decreasing diag(H) and the layer stores them in that order (an act-order layer).
// Its output is an ordinary QuantizedMatrix: saved, loaded and run like any other.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/hessian.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit {

struct GptqConfig {
    // The target: any width, group size and symmetry; F16, F32 or second-order scales (each group's
    // scales quantized again as the group starts, its codes then chosen against them); act_order:
    // rows in decreasing diag(H); group_bits: mixed precision, a width (2 or 4) per K-group in storage
    // (quantization) order. Outliers are outlier_fraction's to decide; no compensator.
    WeightFormat format{.bits = 4, .group_size = 128, .scale_type = ScaleType::F16};
    double damp = 0.01;           // added to H's diagonal: damp * mean(diag(H))
    int64_t block_size = 128;     // rows whose updates are applied to the rest together
    double outlier_fraction = 0;  // up to this fraction of the weights, from 2-bit groups only, kept as fp16
                                  // outliers (those whose rounding error, weighted by 1 / [H^-1]_kk^2, is
                                  // largest); their error is not fed on
};

// weights: K x N row-major (W[k][n]). Throws an invalid-argument Error naming the field for a bad
// config or a Hessian of another size; an empty Hessian is refused. With only a diagonal, no error
// is fed forward (H^-1 is diagonal): the result is RTN with the act-order and outliers H asks for.
QuantizedMatrix quantize_gptq(const GptqConfig& config, const Hessian& hessian, int64_t k, int64_t n,
                              const float* weights);

// The pieces of quantize_gptq the 2/4/16 quantizer (quant/quantize_mixed.hpp) reads too.
//
// The act-order row order: rows by decreasing diag(H), ties in row order (a dead input, diag 0, counts
// as 1, as GPTQ sets it). Storage row r holds original row result[r].
std::vector<int32_t> gptq_act_order(const Hessian& hessian);
// The divisor of each row's rounding error in quantize_gptq, d[r] = U[r][r] for the upper Cholesky
// factor U of (H' + damp * mean(diag H') I)^-1, H' being H with dead inputs set to 1 and its rows and
// columns taken in `order` (storage order; empty: the original order). d[r]^2 is [H^-1]_rr of the
// rows from r on (the inverse of H' restricted to rows r.. of the order), which is how GPTQ and
// SparseGPT weight an error: (w - q)^2 / d^2 is the output error it costs. With only a diagonal,
// d[r] = 1 / sqrt(H_rr + damp * mean).
std::vector<double> gptq_error_divisors(const Hessian& hessian, double damp, const std::vector<int32_t>& order);

}  // namespace qjit
