#include "quant/quantize_hqq.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/error.hpp"
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

struct GroupQuantizer {
    float scale;
    int zero;
};

// The scratch arrays of one group (sized for the largest group once).
struct Scratch {
    Eigen::ArrayXf codes, best_codes, shrunk, target;
    explicit Scratch(int64_t rows)
        : codes(rows), best_codes(rows), shrunk(Eigen::ArrayXf::Zero((rows + kRun - 1) / kRun * kRun)), target(rows) {}
};

class GroupOptimizer {
public:
    GroupOptimizer(const WeightFormat& format, const HqqOptions& options, int64_t max_rows)
        : format_(format), options_(options), max_code_(float(format.max_code())), scratch_(max_rows) {}

    // Optimises one group: w holds its weights, codes its RTN codes on entry and the best codes on
    // exit; the best quantizer is returned.
    GroupQuantizer optimise(ConstGroup w, Eigen::Ref<Eigen::ArrayXf> codes, GroupQuantizer start) {
        const Eigen::Index rows = w.size();
        auto q = scratch_.codes.head(rows);
        auto best_q = scratch_.best_codes.head(rows);
        q = codes;
        best_q = codes;
        GroupQuantizer current = start, best = start;
        double best_error = l2_error(w, q, current);
        float beta = options_.beta;
        for (int it = 0; it < options_.iterations && best_error > 0.0; ++it) {
            current = refit(w, q, current, beta);
            requantize(w, q, current);
            const double error = l2_error(w, q, current);
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
    static double l2_error(ConstGroup w, const Eigen::Ref<const Eigen::ArrayXf>& q, GroupQuantizer g) {
        return double((w - g.scale * (q - float(g.zero))).square().sum());
    }

    // The half-quadratic step: set aside the shrunk error W_e, then fit W - W_e = s (q - z) with
    // the codes fixed: z among the integers around the least-squares zero (and the current one),
    // each with its least-squares scale, keeping the lowest residual.
    GroupQuantizer refit(ConstGroup w, const Eigen::Ref<const Eigen::ArrayXf>& q, GroupQuantizer g, float beta) {
        const Eigen::Index rows = w.size();
        auto shrunk = scratch_.shrunk.head(rows);
        auto target = scratch_.target.head(rows);
        // The error in code units, shrunk: W_e / s.
        shrunk = w * (1.0f / g.scale) - (q - float(g.zero));
        shrink(scratch_.shrunk.data(), rows, options_.lp, beta);
        target = w - g.scale * shrunk;

        // Codes are centred on the current zero (b = q - z) so the sums do not cancel.
        const double size = double(rows);
        const double sum_b = double((q - float(g.zero)).sum());
        const double sum_bb = double((q - float(g.zero)).square().sum());
        const double sum_t = double(target.sum());
        const double sum_bt = double(((q - float(g.zero)) * target).sum());

        // Candidates for the zero shift d (z' = z + d): 0, and the two integers around the
        // continuous least-squares shift when there is one.
        double shifts[3] = {0.0, 0.0, 0.0};
        int candidates = 1;
        const double spread = size * sum_bb - sum_b * sum_b;
        if (!format_.symmetric && spread > 0.0) {
            const double slope = (size * sum_bt - sum_b * sum_t) / spread;
            if (slope > 0.0 && std::isfinite(slope)) {
                const double shift = (sum_b - sum_t / slope) / size;
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
            const double numerator = sum_bt - d * sum_t;
            const double denominator = sum_bb - 2.0 * d * sum_b + size * d * d;
            if (!(denominator > 0.0) || !(numerator > 0.0)) continue;
            const double scale = numerator / denominator;
            const double residual = -numerator * scale;  // the fit's squared residual less sum t^2
            // A scale outside the normal floats would divide codes by 0 or overflow.
            const bool representable = scale >= double(std::numeric_limits<float>::min()) &&
                                       scale <= double(std::numeric_limits<float>::max());
            if (residual < lowest && representable) {
                lowest = residual;
                fitted = {float(scale), zero};
            }
        }
        fitted.scale = stored_scale(fitted.scale, format_.scale_type);
        if (!std::isfinite(fitted.scale)) fitted = g;  // beyond fp16's range
        return fitted;
    }

    // The codes nearest to W for a quantizer: clamp(round(w / s) + z, 0, max).
    void requantize(ConstGroup w, Eigen::Ref<Eigen::ArrayXf> q, GroupQuantizer g) const {
        const float limit = max_code_ + 1.0f;  // |w / s| beyond it clamps whatever z is
        q = (w * (1.0f / g.scale)).max(-limit).min(limit);
        q = (q + kRoundingShift) - kRoundingShift;
        q = (q + float(g.zero)).max(0.0f).min(max_code_);
    }

    const WeightFormat& format_;
    const HqqOptions& options_;
    float max_code_;
    Scratch scratch_;
};

// The format is quantize_rtn's to check.
void validate_options(const HqqOptions& options, const float* weights) {
    require(weights != nullptr, "weights is NULL");
    require(options.iterations >= 0, "iterations is ", options.iterations, "; expected >= 0");
    require(options.lp > 0.0f && options.lp <= 1.0f, "lp is ", options.lp, "; expected 0 < lp <= 1");
    require(options.beta > 0.0f && std::isfinite(options.beta), "beta is ", options.beta, "; expected > 0");
    require(options.beta_growth >= 1.0f && std::isfinite(options.beta_growth), "beta_growth is ", options.beta_growth,
            "; expected >= 1");
}

}  // namespace

QuantizedMatrix quantize_hqq(const HqqConfig& config, int64_t k, int64_t n, const float* weights) {
    validate_options(config.options, weights);
    QuantizedMatrix out = quantize_rtn(config.format, k, n, weights);  // the start; also checks the weights are finite
    if (config.options.iterations == 0) return out;

    QuantParams& p = out.params;
    const int64_t group_rows = std::min(k, p.group_size);
    GroupOptimizer optimizer(p, config.options, group_rows);
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
                const GroupQuantizer best =
                    optimizer.optimise(w, block_q.col(c).head(rows), {p.scales[meta], int(p.zeros[meta])});
                p.scales[meta] = best.scale;
                p.zeros[meta] = uint16_t(best.zero);
            }
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    out.codes[size_t((r0 + r) * n + c0 + c)] = uint8_t(block_q(r, c));
        }
    }
    return out;
}

}  // namespace qjit
