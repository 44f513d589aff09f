// MiLo's calibration-free quantizer: a group-quantized matrix plus a low-rank compensator that
// carries what the quantization loses, W ~ deq(Wq) + U V. The two are fitted alternately: quantize
// W - U V, take the best rank-r approximation of what that leaves (W - deq(Wq)), and repeat until
// the error stops improving. The compensator is then stored at its own precision and Wq is
// quantized once more against W - deq(U) deq(V), so it absorbs the compensator's rounding too.
//
// Forward: y = x deq(Wq) + (x deq(U)) deq(V)   (dequantize; dense_u and dense_v of format/low_rank.hpp).
//
// Given a calibration of the layer's inputs (H = X^T X), the error every step minimises is the layer's
// output error on them, ||X E||_F = ||L^T E||_F with H + damp mean(diag H) I = L L^T, instead of the
// weights' ||E||_F: the compensator is the best rank-r fit of L^T E mapped back (U = L^-T U'), and the
// base may be GPTQ (which minimises the same error) or HQQ weighted by diag(H).
#pragma once

#include <cstdint>
#include <vector>

#include "format/low_rank.hpp"
#include "quant/hessian.hpp"
#include "quant/quantize_hqq.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit {

enum class BaseQuantizer { Rtn, Hqq, Gptq };  // Gptq needs a Hessian

struct MiloConfig {
    // The quantized weights' format, and in low_rank the compensator's rank (1 .. min(K, N,
    // kMaxLowRank)) and storage: 8, 3 (codes) or 16 (fp16) bits.
    WeightFormat format{.bits = 3, .group_size = 64, .scale_type = ScaleType::F16, .low_rank = {16, 8}};
    BaseQuantizer base = BaseQuantizer::Hqq;  // float offsets in `format`: Rtn or Hqq only
    double damp = 0.01;                       // with a Hessian: added to its diagonal, times its mean
    int max_iterations = 20;
    // Stop once each of the last `window` iterations changed the relative error by less than
    // `tolerance` (relative to the error before it), or the error is exactly zero.
    double tolerance = 1e-4;
    int window = 3;
    HqqOptions hqq;
};

struct MiloResult {
    QuantizedMatrix weights;
    LowRankFactors compensator;
    int iterations = 0;                   // of the alternating loop
    std::vector<double> relative_errors;  // per iteration: ||W - deq(Wq) - U V|| / ||W||, fp32 U, V, in the
                                          // output-error norm with a Hessian
    double relative_error = 0.0;          // of the result, with the stored (quantized) compensator
};

// weights: the dense K x N matrix, row-major, as quantize_rtn. hessian: the calibration of the layer's
// inputs (K x K; its diagonal alone weighs rows only), or NULL for the weights' own error.
MiloResult quantize_milo(const MiloConfig& config, int64_t k, int64_t n, const float* weights,
                         const Hessian* hessian = nullptr);

}  // namespace qjit
