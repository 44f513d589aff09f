#include "quant/quantize_hqq.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/error.hpp"
#include "base/half.hpp"
#include "quant/quantize_rtn.hpp"

namespace qjit {

namespace {

using Group = Eigen::Map<Eigen::ArrayXf>;
using ConstGroup = Eigen::Map<const Eigen::ArrayXf>;

// Columns handled together: one group's block of them (64 rows x 64 columns) stays in L1 while
// its columns are optimised, and the row-major matrix is read in 256-byte runs.
constexpr int64_t kPanel = 64;
// Scratch arrays are padded to whole runs of this many floats, so the shrinkage loop has a fixed
// trip count and vectorises.
constexpr int64_t kRun = 8;

// Adding and subtracting 1.5 * 2^23 rounds a float of magnitude below 2^22 to the nearest
// integer, ties to even (as nearbyint in the default mode), and vectorises without SSE4.1.
constexpr float kRoundingShift = 12582912.0f;

// |x|^power for power in [-2, 0), approximately (relative error below 4e-4): log2 from the float's
// exponent and a polynomial in its mantissa, then 2^y split the same way. The shrinkage is a
// weighting that needs no more, and unlike std::pow (or Eigen's exp and log) this is a few vector
// instructions: it halves the time of quantize_hqq. Polynomials: least-squares fits on [1, 2) and
// [0, 1). Only integer comparisons: with float ones GCC does not vectorise the loop (trapping math).
inline float approximate_power(float magnitude, float power) {
    // |x| clamped to [2^-60, 2^60]: y = power log2|x| stays within +-120, a normal float's range;
    // a smaller |x| gives a weight of 0 either way.
    uint32_t bits = std::bit_cast<uint32_t>(magnitude);
    bits = bits < 0x21800000u ? 0x21800000u : bits;
    bits = bits > 0x5d800000u ? 0x5d800000u : bits;
    const float mantissa = std::bit_cast<float>((bits & 0x7fffffu) | 0x3f800000u) - 1.5f;
    const float log2 = float(int32_t(bits >> 23) - 127) +
                       ((((-0.0791538344f * mantissa + 0.153918478f) * mantissa - 0.319918782f) * mantissa +
                         0.961167861f) * mantissa + 0.584954274f);
    const float shifted = power * log2 + 128.0f;  // positive: truncation is floor
    const int32_t whole = int32_t(shifted);
    const float fraction = shifted - float(whole) - 0.5f;
    const float power_of_fraction =
        ((0.077822868f * fraction + 0.34260424f) * fraction + 0.980407991f) * fraction + 1.41414469f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(power_of_fraction) + (uint32_t(whole - 128) << 23));
}

// In place, x <- x max(0, 1 - |x|^(p-2) / beta): the lp shrinkage (proximal step of |x|^p) in
// HQQ's form. Runs over whole kRun-float runs; values past the group's rows are scratch.
void shrink(float* x, int64_t rows, float lp, float beta) {
    const float exponent = lp - 2.0f, inverse_beta = 1.0f / beta;
    for (int64_t i = 0; i < rows; i += kRun)
        for (int64_t j = i; j < i + kRun; ++j) {
            const float weight = 1.0f - approximate_power(std::abs(x[j]), exponent) * inverse_beta;
            uint32_t weight_bits = std::bit_cast<uint32_t>(weight);
            weight_bits &= ~uint32_t(int32_t(weight_bits) >> 31);  // max(weight, 0): a negative one is 0
            x[j] *= std::bit_cast<float>(weight_bits);
        }
}

// W = scale * (code - zero) + offset: an integer zero with offset 0, or a float offset with zero 0.
struct GroupQuantizer {
    float scale;
    int zero;
    float offset;
};

// The scratch arrays of one group (sized for the largest group once).
struct Scratch {
    Eigen::ArrayXf codes, best_codes, shrunk, target, weights;
    explicit Scratch(int64_t rows)
        : codes(rows),
          best_codes(rows),
          shrunk(Eigen::ArrayXf::Zero((rows + kRun - 1) / kRun * kRun)),
          target(rows),
          weights(Eigen::ArrayXf::Ones(rows)) {}
};

// Weighted sums over a group: sum a, sum a x, sum a x^2, sum a y, sum a x y (in double).
struct WeightedSums {
    double a, x, xx, y, xy;
};

WeightedSums weighted_sums(const Eigen::Ref<const Eigen::ArrayXf>& a, const Eigen::Ref<const Eigen::ArrayXf>& x,
                           const Eigen::Ref<const Eigen::ArrayXf>& y) {
    return {double(a.sum()), double((a * x).sum()), double((a * x.square()).sum()), double((a * y).sum()),
            double((a * x * y).sum())};
}

bool representable_scale(double scale) {
    return scale >= double(std::numeric_limits<float>::min()) && scale <= double(std::numeric_limits<float>::max());
}

class GroupOptimizer {
public:
    GroupOptimizer(const WeightFormat& format, const HqqOptions& options, int64_t max_rows)
        : format_(format), options_(options), max_code_(float(format.max_code())), scratch_(max_rows) {}

    // Optimises one group: w holds its weights, row_weights its rows' weights (NULL: all 1), codes
    // its RTN codes on entry and the best codes on exit; the best quantizer is returned.
    GroupQuantizer optimise(ConstGroup w, const float* row_weights, Eigen::Ref<Eigen::ArrayXf> codes,
                            GroupQuantizer start) {
        const Eigen::Index rows = w.size();
        auto q = scratch_.codes.head(rows);
        auto best_q = scratch_.best_codes.head(rows);
        auto a = scratch_.weights.head(rows);
        if (row_weights) a = ConstGroup(row_weights, rows);
        else a.setOnes();
        if (options_.weigh_by_magnitude) a *= w.abs() + std::sqrt(w.square().mean());
        q = codes;
        best_q = codes;
        GroupQuantizer current = start, best = start;
        double best_error = error_of(w, a, q, current);
        float beta = options_.beta;
        for (int it = 0; it < options_.iterations && best_error > 0.0; ++it) {
            current = format_.float_offsets ? refit_offset(w, a, q, current, beta) : refit_zero(w, a, q, current, beta);
            requantize(w, q, current);
            const double error = error_of(w, a, q, current);
            if (error < best_error) {
                best_error = error;
                best = current;
                best_q = q;
            } else {
                break;  // as HQQ: stop once the error rises (a second chance rarely pays)
            }
            beta *= options_.beta_growth;
        }
        codes = best_q;
        return best;
    }

private:
    static double error_of(ConstGroup w, const Eigen::Ref<const Eigen::ArrayXf>& a,
                           const Eigen::Ref<const Eigen::ArrayXf>& q, GroupQuantizer g) {
        return double((a * (w - (g.scale * (q - float(g.zero)) + g.offset)).square()).sum());
    }

    // The half-quadratic split: the error W - deq in code units, shrunk (W_e / s), set aside; what
    // is left, W - W_e, is the target the closed-form fit follows.
    void shrunk_target(ConstGroup w, const Eigen::Ref<const Eigen::ArrayXf>& q, GroupQuantizer g, float beta) {
        const Eigen::Index rows = w.size();
        auto shrunk = scratch_.shrunk.head(rows);
        shrunk = (w - g.offset) * (1.0f / g.scale) - (q - float(g.zero));
        shrink(scratch_.shrunk.data(), rows, options_.lp, beta);
        scratch_.target.head(rows) = w - g.scale * shrunk;
    }

    // HQQ's own step with real offsets: the target = s q + o by weighted least squares, the codes fixed.
    GroupQuantizer refit_offset(ConstGroup w, const Eigen::Ref<const Eigen::ArrayXf>& a,
                                const Eigen::Ref<const Eigen::ArrayXf>& q, GroupQuantizer g, float beta) {
        shrunk_target(w, q, g, beta);
        const WeightedSums s = weighted_sums(a, q, scratch_.target.head(w.size()));
        const double spread = s.a * s.xx - s.x * s.x;
        if (!(spread > 0.0) || !(s.a > 0.0)) return g;
        const double slope = (s.a * s.xy - s.x * s.y) / spread;
        if (!(slope > 0.0) || !representable_scale(slope)) return g;
        const float scale = stored_scale(float(slope), format_.scale_type);
        if (!std::isfinite(scale)) return g;  // beyond fp16's range
        // The offset refitted to the stored scale, then stored at the scales' type too.
        const float offset = stored_scale_type_value(float((s.y - double(scale) * s.x) / s.a));
        if (!std::isfinite(offset)) return g;
        return {scale, 0, offset};
    }

    float stored_scale_type_value(float value) const {
        return format_.f16_scales() ? round_to_half(value) : value;
    }

    // With integer zeros: the target = s (q - z) with the codes fixed: z among the integers around
    // the least-squares zero (and the current one), each with its least-squares scale, keeping the
    // lowest residual.
    GroupQuantizer refit_zero(ConstGroup w, const Eigen::Ref<const Eigen::ArrayXf>& a,
                              const Eigen::Ref<const Eigen::ArrayXf>& q, GroupQuantizer g, float beta) {
        shrunk_target(w, q, g, beta);
        // Codes are centred on the current zero (b = q - z) so the sums do not cancel.
        const Eigen::Index rows = w.size();
        const WeightedSums s = weighted_sums(a, q - float(g.zero), scratch_.target.head(rows));

        // Candidates for the zero shift d (z' = z + d): 0, and the two integers around the
        // continuous least-squares shift when there is one.
        double shifts[3] = {0.0, 0.0, 0.0};
        int candidates = 1;
        const double spread = s.a * s.xx - s.x * s.x;
        if (!format_.symmetric && spread > 0.0) {
            const double slope = (s.a * s.xy - s.x * s.y) / spread;
            if (slope > 0.0 && std::isfinite(slope)) {
                const double shift = (s.x - s.y / slope) / s.a;
                if (std::isfinite(shift) && std::abs(shift) <= double(max_code_) + 1.0) {
                    shifts[candidates++] = std::floor(shift);
                    shifts[candidates++] = std::floor(shift) + 1.0;
                }
            }
        }
        GroupQuantizer fitted = g;
        double lowest = std::numeric_limits<double>::infinity();
        for (int i = 0; i < candidates; ++i) {
            const double d = shifts[i];
            const int zero = g.zero + int(d);
            if (zero < 0 || zero > int(max_code_)) continue;
            const double numerator = s.xy - d * s.y;
            const double denominator = s.xx - 2.0 * d * s.x + s.a * d * d;
            if (!(denominator > 0.0) || !(numerator > 0.0)) continue;
            const double scale = numerator / denominator;
            const double residual = -numerator * scale;  // the fit's squared residual less sum a t^2
            // A scale outside the normal floats would divide codes by 0 or overflow.
            if (residual < lowest && representable_scale(scale)) {
                lowest = residual;
                fitted = {float(scale), zero, 0.0f};
            }
        }
        fitted.scale = stored_scale(fitted.scale, format_.scale_type);
        if (!std::isfinite(fitted.scale)) fitted = g;  // beyond fp16's range
        return fitted;
    }

    // The codes nearest to W for a quantizer: clamp(round((w - o) / s) + z, 0, max).
    void requantize(ConstGroup w, Eigen::Ref<Eigen::ArrayXf> q, GroupQuantizer g) const {
        const float limit = max_code_ + 1.0f;  // |w / s| beyond it clamps whatever z is
        q = ((w - g.offset) * (1.0f / g.scale)).max(-limit).min(limit);
        q = (q + kRoundingShift) - kRoundingShift;
        q = (q + float(g.zero)).max(0.0f).min(max_code_);
    }

    const WeightFormat& format_;
    const HqqOptions& options_;
    float max_code_;
    Scratch scratch_;
};

// The format is quantize_rtn's to check.
void validate_config(const HqqConfig& config, int64_t k, const float* weights) {
    const HqqOptions& options = config.options;
    require(weights != nullptr, "weights is NULL");
    require(config.row_weights.empty() || int64_t(config.row_weights.size()) == k, "row_weights holds ",
            config.row_weights.size(), " values; expected K = ", k, " (or none)");
    for (size_t i = 0; i < config.row_weights.size(); ++i)
        require(config.row_weights[i] >= 0.0f && std::isfinite(config.row_weights[i]), "row_weights[", i, "] is ",
                config.row_weights[i], "; expected a finite value >= 0");
    require(options.iterations >= 0, "iterations is ", options.iterations, "; expected >= 0");
    require(options.lp > 0.0f && options.lp <= 1.0f, "lp is ", options.lp, "; expected 0 < lp <= 1");
    require(options.beta > 0.0f && std::isfinite(options.beta), "beta is ", options.beta, "; expected > 0");
    require(options.beta_growth >= 1.0f && std::isfinite(options.beta_growth), "beta_growth is ", options.beta_growth,
            "; expected >= 1");
}

}  // namespace

QuantizedMatrix hqq_start(const WeightFormat& format, int64_t k, int64_t n, const float* weights) {
    if (!format.float_offsets) return quantize_rtn(format, k, n, weights);
    WeightFormat integer_format = format;
    integer_format.float_offsets = false;
    QuantizedMatrix out = quantize_rtn(integer_format, k, n, weights);
    QuantParams& p = out.params;
    p.float_offsets = true;
    p.offsets.resize(p.scales.size());
    for (size_t i = 0; i < p.scales.size(); ++i) {
        const float offset = -float(p.zeros[i]) * p.scales[i];
        p.offsets[i] = format.f16_scales() ? round_to_half(offset) : offset;
    }
    p.zeros.clear();
    return out;
}

std::vector<float> calibration_row_weights(const Hessian& hessian) {
    const std::vector<double> diagonal = hessian.diagonal();
    return {diagonal.begin(), diagonal.end()};
}

std::vector<float> balanced_row_weights(int64_t k, int64_t n, const float* weights) {
    std::vector<double> inverse(static_cast<size_t>(k));
    double mean = 0.0;
    for (int64_t r = 0; r < k; ++r) {
        double square_sum = 0.0;
        for (int64_t c = 0; c < n; ++c) square_sum += double(weights[r * n + c]) * double(weights[r * n + c]);
        // A row of zeros has nothing to fit; the cap below bounds its weight.
        inverse[size_t(r)] = square_sum > 0.0 ? double(n) / square_sum : std::numeric_limits<double>::infinity();
    }
    int64_t finite = 0;
    for (double v : inverse)
        if (std::isfinite(v)) mean += v, ++finite;
    mean = finite > 0 ? mean / double(finite) : 1.0;
    std::vector<float> out(static_cast<size_t>(k));
    for (int64_t r = 0; r < k; ++r) out[size_t(r)] = float(std::min(inverse[size_t(r)], double(kMaxBalancedRowWeight) * mean));
    return out;
}

QuantizedMatrix quantize_hqq(const HqqConfig& config, int64_t k, int64_t n, const float* weights) {
    validate_config(config, k, weights);
    QuantizedMatrix out = hqq_start(config.format, k, n, weights);  // the start; also checks the weights are finite
    if (config.options.iterations == 0) return out;

    QuantParams& p = out.params;
    const int64_t group_rows = std::min(k, p.group_size);
    GroupOptimizer optimizer(p, config.options, group_rows);
    // Row weights scaled to a mean of 1, so the weighted errors stay in float's comfortable range.
    std::vector<float> row_weights = config.row_weights;
    if (row_weights.empty() && config.options.balance_rows) row_weights = balanced_row_weights(k, n, weights);
    if (!row_weights.empty()) {
        double mean = 0.0;
        for (float h : row_weights) mean += double(h) / double(k);
        if (mean > 0.0)  // all 0: every group keeps RTN's quantizer
            for (float& h : row_weights) h = float(double(h) / mean);
    }
    // One group's block of up to kPanel columns, transposed so each column's group is contiguous.
    Eigen::ArrayXXf block_w(group_rows, kPanel), block_q(group_rows, kPanel);
    for (int64_t g = 0; g < p.num_groups(); ++g) {
        const int64_t r0 = g * p.group_size, rows = std::min(k, r0 + p.group_size) - r0;
        for (int64_t c0 = 0; c0 < n; c0 += kPanel) {
            const int64_t cols = std::min(kPanel, n - c0);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                    block_w(r, c) = weights[(r0 + r) * n + c0 + c];
                    block_q(r, c) = float(out.codes[size_t((r0 + r) * n + c0 + c)]);
                }
            for (int64_t c = 0; c < cols; ++c) {
                const size_t meta = size_t(g * n + c0 + c);
                const ConstGroup w(&block_w(0, c), rows);
                const GroupQuantizer start = p.float_offsets ? GroupQuantizer{p.scales[meta], 0, p.offsets[meta]}
                                                             : GroupQuantizer{p.scales[meta], int(p.zeros[meta]), 0.0f};
                const GroupQuantizer best = optimizer.optimise(
                    w, row_weights.empty() ? nullptr : row_weights.data() + r0, block_q.col(c).head(rows), start);
                p.scales[meta] = best.scale;
                if (p.float_offsets) p.offsets[meta] = best.offset;
                else p.zeros[meta] = uint16_t(best.zero);
            }
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    out.codes[size_t((r0 + r) * n + c0 + c)] = uint8_t(block_q(r, c));
        }
    }
    return out;
}

}  // namespace qjit
