#include "quant/quantize_mixed.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.hpp"
#include "format/reference.hpp"
#include "quant/quantize_gptq.hpp"
#include "quant/quantize_rtn.hpp"

namespace qjit {

namespace {

// Sum over each group's weights of w^2 / d^2, d = GPTQ's divisor of the row (the diagonal of its
// Cholesky factor of H^-1, "Hinv" in GPTQ and SparseGPT; d^2 is [H^-1]_rr of the rows from r on, in
// `order`), at the given damp: the output error of losing w, as SparseGPT ranks weights. Dead inputs
// count nothing: GPTQ stores them as 0.
std::vector<double> hessian_sensitivity(const Hessian& hessian, double damp, int64_t k, int64_t n,
                                        const float* weights, int64_t group_size, const std::vector<int32_t>& order) {
    const std::vector<double> diagonal = hessian.diagonal();
    const std::vector<double> d = gptq_error_divisors(hessian, damp, order);
    std::vector<double> sensitivity(size_t((k + group_size - 1) / group_size), 0.0);
    for (int64_t r = 0; r < k; ++r) {
        const int64_t from = order[size_t(r)];
        if (diagonal[size_t(from)] == 0.0) continue;
        const double inverse = 1.0 / (d[size_t(r)] * d[size_t(r)]);  // 1 / Hinv_rr^2
        double sum = 0.0;
        for (int64_t c = 0; c < n; ++c) sum += double(weights[from * n + c]) * double(weights[from * n + c]);
        sensitivity[size_t(r / group_size)] += sum * inverse;
    }
    return sensitivity;
}

// Group indices, most sensitive first (ties: lower index first).
std::vector<int64_t> groups_by_sensitivity(const std::vector<double>& sensitivity) {
    std::vector<int64_t> order(sensitivity.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return sensitivity[size_t(a)] > sensitivity[size_t(b)]; });
    return order;
}

std::vector<int32_t> identity_rows(int64_t k) {
    std::vector<int32_t> rows(static_cast<size_t>(k));
    std::iota(rows.begin(), rows.end(), 0);
    return rows;
}

}  // namespace

std::vector<double> group_sensitivity(GroupSensitivity kind, const Hessian* hessian, int64_t k, int64_t n,
                                      const float* weights, int64_t group_size,
                                      const std::vector<int32_t>& act_order_rows) {
    validate_shape(k, n);
    require(weights != nullptr, "weights is NULL");
    require(group_size >= 1, "group_size is ", group_size, "; expected 1 or more");
    require(act_order_rows.empty() || act_order_rows.size() == size_t(k), "act_order_rows holds ",
            act_order_rows.size(), " rows; expected K = ", k);
    std::vector<int32_t> order = act_order_rows.empty() ? identity_rows(k) : act_order_rows;
    if (!act_order_rows.empty()) {
        std::vector<bool> seen(size_t(k), false);
        for (int32_t r : order) {
            require(r >= 0 && r < k && !seen[size_t(r)], "act_order_rows is not a permutation of 0..K-1");
            seen[size_t(r)] = true;
        }
    }
    if (kind == GroupSensitivity::Hessian) {
        require(hessian != nullptr, "Hessian sensitivity needs a Hessian");
        require(!hessian->empty(), "the Hessian is empty: add calibration rows or set it");
        require(hessian->k() == k, "the Hessian is ", hessian->k(), " x ", hessian->k(), "; expected K x K = ", k,
                " x ", k);
        return hessian_sensitivity(*hessian, GptqConfig{}.damp, k, n, weights, group_size, order);
    }

    require(kind == GroupSensitivity::Range, "unknown group sensitivity ", int(kind));
    const int64_t groups = (k + group_size - 1) / group_size;
    std::vector<double> sensitivity(size_t(groups), 0.0);
    std::vector<float> lo(static_cast<size_t>(n)), hi(static_cast<size_t>(n));
    for (int64_t g = 0; g < groups; ++g) {
        const int64_t r0 = g * group_size, r1 = std::min(k, r0 + group_size);
        std::fill(lo.begin(), lo.end(), 0.0f);  // the range contains 0, as the quantizers' does
        std::fill(hi.begin(), hi.end(), 0.0f);
        for (int64_t r = r0; r < r1; ++r) {
            const float* row = weights + int64_t(order[size_t(r)]) * n;
            for (int64_t c = 0; c < n; ++c) {
                lo[size_t(c)] = std::min(lo[size_t(c)], row[c]);
                hi[size_t(c)] = std::max(hi[size_t(c)], row[c]);
            }
        }
        double sum = 0.0;
        for (int64_t c = 0; c < n; ++c) {
            const double step = (double(hi[size_t(c)]) - double(lo[size_t(c)])) / 3.0;
            sum += step * step;
        }
        sensitivity[size_t(g)] = sum * double(r1 - r0);
    }
    return sensitivity;
}

std::vector<uint8_t> assign_group_widths(const std::vector<double>& sensitivity, double alpha) {
    require(std::isfinite(alpha) && alpha >= 0 && alpha <= 1, "alpha is ", alpha, "; expected 0 .. 1");
    const int64_t groups = int64_t(sensitivity.size());
    // ceil(alpha * groups), the product's rounding error (0.3 * 10 = 3.0000000000000004) forgiven.
    const int64_t wide = std::clamp<int64_t>(int64_t(std::ceil(alpha * double(groups) - 1e-9)), 0, groups);
    const std::vector<int64_t> by_sensitivity = groups_by_sensitivity(sensitivity);
    std::vector<uint8_t> widths(size_t(groups), 2);
    for (int64_t i = 0; i < wide; ++i) widths[size_t(by_sensitivity[size_t(i)])] = 4;
    return widths;
}

std::vector<double> group_widening_gains(const MixedConfig& config, const Hessian& hessian, int64_t k, int64_t n,
                                         const float* weights) {
    validate_shape(k, n);
    require(weights != nullptr, "weights is NULL");
    require(!hessian.empty() && hessian.k() == k, "the Hessian is ", hessian.k(), " x ", hessian.k(),
            (hessian.empty() ? " and empty" : ""), "; expected K x K = ", k, " x ", k);
    const int64_t group = std::min(config.format.group_size, k);
    require(group >= 1, "group_size is ", config.format.group_size, "; expected 1 or more");
    const std::vector<double> diagonal = hessian.diagonal();
    const std::vector<double> d = gptq_error_divisors(hessian, config.damp, identity_rows(k));
    WeightFormat format{.group_size = group, .scale_type = ScaleType::F16};
    format.bits = 2;
    const std::vector<float> narrow = dequantize(quantize_rtn(format, k, n, weights));
    format.bits = 4;
    const std::vector<float> wide = dequantize(quantize_rtn(format, k, n, weights));
    std::vector<double> gains(size_t((k + group - 1) / group), 0.0);
    for (int64_t r = 0; r < k; ++r) {
        if (diagonal[size_t(r)] == 0.0) continue;  // a dead input: GPTQ stores 0 either way
        double sum = 0.0;
        for (int64_t c = 0; c < n; ++c) {
            const size_t i = size_t(r * n + c);
            const double e2 = double(weights[i]) - narrow[i], e4 = double(weights[i]) - wide[i];
            sum += e2 * e2 - e4 * e4;
        }
        gains[size_t(r / group)] += sum / (d[size_t(r)] * d[size_t(r)]);
    }
    return gains;
}

namespace {

// The stored bits of a K x N 2/4/16 matrix at p.group_bits, with the outliers GPTQ takes from its
// 2-bit groups (p's shape and format set; p.outliers is overwritten).
double stored_bits_at_widths(QuantParams& p, int64_t wanted_outliers) {
    int64_t narrow_rows = 0;
    for (int64_t g = 0; g < p.num_groups(); ++g)
        if (p.group_bits[size_t(g)] == 2) narrow_rows += std::min(p.k, (g + 1) * p.group_size) - g * p.group_size;
    p.outliers = std::min(wanted_outliers, narrow_rows * p.n);
    return double(stored_bytes(p)) * 8.0;
}

QuantParams mixed_params(const MixedConfig& config, int64_t k, int64_t n) {
    QuantParams p;
    static_cast<WeightFormat&>(p) = with_shape(config.format, k, n);
    if (p.act_order) p.row_order.resize(size_t(k));
    p.group_bits.assign(size_t(p.num_groups()), 2);
    return p;
}

int64_t wanted_outliers(const MixedConfig& config, int64_t k, int64_t n) {
    return std::min(int64_t(std::floor(config.outlier_fraction * double(k) * double(n))), max_outliers(k, n));
}

}  // namespace

double mixed_stored_bits(const MixedConfig& config, int64_t k, int64_t n, int64_t wide_groups) {
    QuantParams p = mixed_params(config, k, n);
    require(wide_groups >= 0 && wide_groups <= p.num_groups(), "wide_groups is ", wide_groups, "; expected 0 .. ",
            p.num_groups());
    for (int64_t g = 0; g < wide_groups; ++g) p.group_bits[size_t(g)] = 4;
    return stored_bits_at_widths(p, wanted_outliers(config, k, n));
}

std::vector<uint8_t> group_widths_within_budget(const MixedConfig& config, const std::vector<double>& sensitivity,
                                                int64_t k, int64_t n) {
    const double budget = config.bits_per_weight;
    require(std::isfinite(budget) && budget > 0, "bits_per_weight is ", budget, "; expected a budget > 0");
    QuantParams p = mixed_params(config, k, n);
    const int64_t groups = p.num_groups();
    require(int64_t(sensitivity.size()) == groups, "sensitivity holds ", sensitivity.size(), " groups; expected ",
            groups);
    const int64_t outliers = wanted_outliers(config, k, n);
    const double allowed = budget * double(k) * double(n);
    if (stored_bits_at_widths(p, outliers) > allowed)
        fail(QJIT_ERROR_INVALID_ARGUMENT, "bits_per_weight ", budget, " is below this ", k, " x ", n,
             " layer's smallest 2/4/16 storage, ", stored_bits_at_widths(p, outliers) / (double(k) * double(n)),
             " bits per weight with every group in 2 bits");
    // Every group in 4 bits stores no outliers, so it can fit where fewer 4-bit groups do not.
    std::fill(p.group_bits.begin(), p.group_bits.end(), uint8_t(4));
    if (stored_bits_at_widths(p, outliers) <= allowed) return p.group_bits;
    std::fill(p.group_bits.begin(), p.group_bits.end(), uint8_t(2));
    // The most sensitive first, each widened while the total stays within the budget (a shorter last
    // group may still fit after a full one did not).
    for (int64_t g : groups_by_sensitivity(sensitivity)) {
        p.group_bits[size_t(g)] = 4;
        if (stored_bits_at_widths(p, outliers) > allowed) p.group_bits[size_t(g)] = 2;
    }
    return p.group_bits;
}

QuantizedMatrix quantize_mixed(const MixedConfig& config, const Hessian* hessian, int64_t k, int64_t n,
                               const float* weights) {
    const WeightFormat format = with_shape(config.format, k, n);
    require(weights != nullptr, "weights is NULL");
    require(format.group_size >= 32, "group_size is ", format.group_size, "; mixed groups are 32 rows or more");
    if (format.bits != 4 || !format.uniform_bits() || format.symmetric || format.outliers > 0 ||
        format.low_rank.present())
        fail(QJIT_ERROR_INVALID_ARGUMENT, "format ", format.name(), " is not a 2/4/16 target: bits 4 (the widest; "
             "the quantizer chooses each group's width), asymmetric, outliers by outlier_fraction, no compensator");
    require(std::isfinite(config.alpha) && config.alpha >= 0 && config.alpha <= 1, "alpha is ", config.alpha,
            "; expected 0 .. 1");
    require(std::isfinite(config.outlier_fraction) && config.outlier_fraction >= 0 &&
                config.outlier_fraction <= kMaxOutlierFraction,
            "outlier_fraction is ", config.outlier_fraction, "; expected 0 .. ", kMaxOutlierFraction);
    require(std::isfinite(config.damp) && config.damp >= 0, "damp is ", config.damp, "; expected 0 or more");
    require(std::isfinite(config.bits_per_weight) && config.bits_per_weight >= 0, "bits_per_weight is ",
            config.bits_per_weight, "; expected 0 (alpha decides) or a budget > 0");
    require(hessian != nullptr || !format.act_order, "act_order needs a Hessian (its diagonal orders the rows)");
    if (hessian != nullptr) {
        require(!hessian->empty(), "the Hessian is empty: add calibration rows or set it");
        require(hessian->k() == k, "the Hessian is ", hessian->k(), " x ", hessian->k(), "; expected K x K = ", k,
                " x ", k);
    }

    std::vector<int32_t> order;
    if (format.act_order) order = gptq_act_order(*hessian);
    std::vector<double> sensitivity;
    if (hessian != nullptr) {
        // The divisors GPTQ will use: this damp, this order.
        sensitivity = hessian_sensitivity(*hessian, config.damp, k, n, weights, format.group_size,
                                          order.empty() ? identity_rows(k) : order);
    } else {
        sensitivity = group_sensitivity(GroupSensitivity::Range, nullptr, k, n, weights, format.group_size);
    }
    const std::vector<uint8_t> widths = config.bits_per_weight > 0
                                            ? group_widths_within_budget(config, sensitivity, k, n)
                                            : assign_group_widths(sensitivity, config.alpha);

    GptqConfig gptq;
    gptq.format = format;
    gptq.damp = config.damp;
    gptq.outlier_fraction = config.outlier_fraction;
    const bool uniform = std::all_of(widths.begin(), widths.end(), [&](uint8_t w) { return w == widths.front(); });
    if (uniform)
        gptq.format.bits = widths.front();  // one width (alpha 0 or 1, or a single group): an ordinary format
    else
        gptq.format.group_bits = widths;
    if (hessian != nullptr) return quantize_gptq(gptq, *hessian, k, n, weights);
    // No calibration: round-to-nearest (a diagonal of ones feeds nothing on and weighs every error alike).
    Hessian ones(k);
    ones.set_diagonal(std::vector<float>(size_t(k), 1.0f).data());
    return quantize_gptq(gptq, ones, k, n, weights);
}

}  // namespace qjit
