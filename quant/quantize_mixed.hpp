// The 2/4/16 format: K-groups of mixed width (the most sensitive fraction alpha in 4 bits, the rest
// in 2), second-order scales, and a few fp16 outliers taken from the 2-bit groups.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/hessian.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit {

enum class GroupSensitivity {
    Hessian,  // sum over the group's weights of w^2 / [H^-1]_kk^2 (the 2/4/16 paper's saliency), with
              // [H^-1]_kk GPTQ's "Hinv": the diagonal of the upper Cholesky factor of the damped H^-1 in
              // the quantization order (gptq_error_divisors), as SparseGPT ranks weights; its square is
              // [H^-1]_kk of the rows from k on, so w^2 / Hinv_kk^2 is the output error of losing w
    Range,    // no calibration: the group's 2-bit round-to-nearest error, sum over its columns of
              // ((max - min) / 3)^2 * rows, a fallback named as such
};

struct MixedConfig {
    // The target: groups of group_size rows (32 or more), asymmetric, second-order (or F16 or F32)
    // scales, act_order with a Hessian only. Each group's width is the quantizer's to choose: bits is
    // the widest, 4, and group_bits is left empty.
    WeightFormat format{.bits = 4, .group_size = 32, .scale_type = ScaleType::SecondOrder};
    double alpha = 0.25;              // fraction of groups in 4 bits (0 .. 1), unless bits_per_weight is set
    double bits_per_weight = 0;       // > 0: as many 4-bit groups as keep stored_bytes * 8 <= this * K N (the
                                      // sensitive first); a budget below every group in 2 bits is refused
    double outlier_fraction = 0.002;  // of the weights, as fp16 outliers (0 .. 0.005)
    double damp = 0.01;
};

// Sensitivity of each K-group (groups over rows in quantization order: act-order's when
// act_order_rows is given), merged over all output columns. The Hessian kind damps H as GptqConfig's
// default damp does (quantize_mixed uses its own config's damp).
std::vector<double> group_sensitivity(GroupSensitivity kind, const Hessian* hessian, int64_t k, int64_t n,
                                      const float* weights, int64_t group_size,
                                      const std::vector<int32_t>& act_order_rows = {});

// The widths: the ceil(alpha * groups) most sensitive groups 4 bits, the others 2 (ties: lower index
// first).
std::vector<uint8_t> assign_group_widths(const std::vector<double>& sensitivity, double alpha);

// The widths within config.bits_per_weight: groups in decreasing sensitivity, each made 4 bits while the
// stored bits (codes, scales, zero points, act-order rows, the outliers GPTQ takes from 2-bit groups)
// stay within bits_per_weight * K * N. Throws when every group in 2 bits is already over.
std::vector<uint8_t> group_widths_within_budget(const MixedConfig& config, const std::vector<double>& sensitivity,
                                                int64_t k, int64_t n);

// For a budget shared by many matrices (a model's): what widening each K-group to 4 bits gains, the
// estimated output error of its 2-bit round-to-nearest codes less that of its 4-bit ones, each row's
// error weighed by 1 / [H^-1]_kk^2 as hessian sensitivity weighs it (rows in their original order;
// no act-order). And the stored bits of the matrix at a given number of 4-bit groups, the full groups
// counted first (an upper bound for any choice of that many), outliers as GPTQ takes them.
std::vector<double> group_widening_gains(const MixedConfig& config, const Hessian& hessian, int64_t k, int64_t n,
                                         const float* weights);
double mixed_stored_bits(const MixedConfig& config, int64_t k, int64_t n, int64_t wide_groups);

// Quantizes with GPTQ (hessian given, Hessian sensitivity) or round-to-nearest (hessian null:
// Range sensitivity) at the assigned widths. Throws an invalid-argument Error naming the field.
QuantizedMatrix quantize_mixed(const MixedConfig& config, const Hessian* hessian, int64_t k, int64_t n,
                               const float* weights);

}  // namespace qjit
