#include "quant/quantize_milo.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/reference.hpp"
#include "quant/truncated_svd.hpp"
#include "quant/quantize_low_rank.hpp"

namespace qjit {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;

// The format the base quantizer makes: `format` (checked) without the compensator.
WeightFormat checked_base_format(const MiloConfig& config, int64_t k, int64_t n, const float* weights) {
    WeightFormat format = with_shape(config.format, k, n);
    require(format.low_rank.present(), "low_rank.rank is 0; MiLo fits a compensator of rank 1 .. min(K, N, ",
            kMaxLowRank, ")");
    require(weights != nullptr, "weights is NULL");
    require(config.base == BaseQuantizer::Rtn || config.base == BaseQuantizer::Hqq, "base quantizer ",
            int(config.base), " is not RTN or HQQ");
    require(config.max_iterations >= 1, "max_iterations is ", config.max_iterations, "; expected >= 1");
    require(config.tolerance >= 0.0 && std::isfinite(config.tolerance), "tolerance is ", config.tolerance,
            "; expected a finite value >= 0");
    require(config.window >= 1, "window is ", config.window, "; expected >= 1");
    format.low_rank = {};
    return format;
}

QuantizedMatrix quantize_base(const MiloConfig& config, const WeightFormat& base_format, int64_t k, int64_t n,
                              const float* weights) {
    if (config.base == BaseQuantizer::Rtn) return quantize_rtn(base_format, k, n, weights);
    return quantize_hqq({base_format, config.hqq}, k, n, weights);
}

// U V as a dense K x N matrix (u: K x rank, v: rank x N, row-major).
RowMatrix low_rank_product(int64_t k, int64_t n, int rank, const float* u, const float* v) {
    return ConstMatrixMap(u, k, rank) * ConstMatrixMap(v, rank, n);
}

// ||a - b - c||_F, accumulated in double: the stopping rule compares errors to 1e-4 relative.
double residual_norm(const ConstMatrixMap& a, const ConstMatrixMap& b, const RowMatrix& c) {
    return std::sqrt((a - b - c).cast<double>().squaredNorm());
}

// True once each of the last `window` steps changed the error by less than `tolerance` of the
// error before it (or the error has reached zero, where no step can change it).
bool converged(const std::vector<double>& errors, const MiloConfig& config) {
    if (!errors.empty() && errors.back() == 0.0) return true;
    if (errors.size() <= size_t(config.window)) return false;
    for (size_t i = errors.size() - size_t(config.window); i < errors.size(); ++i)
        if (std::abs(errors[i] - errors[i - 1]) >= config.tolerance * errors[i - 1]) return false;
    return true;
}

}  // namespace

MiloResult quantize_milo(const MiloConfig& config, int64_t k, int64_t n, const float* weights) {
    const WeightFormat base_format = checked_base_format(config, k, n, weights);
    const LowRankTerms& terms = config.format.low_rank;
    const ConstMatrixMap w(weights, k, n);
    const double norm = std::sqrt(w.cast<double>().squaredNorm());
    require(std::isfinite(norm), "weights are not all finite");
    const double scale = norm > 0.0 ? 1.0 / norm : 1.0;  // an all-zero W: absolute errors (all 0)

    MiloResult result;
    struct Iterate {
        QuantizedMatrix weights;
        TruncatedSvd compensator;
        double error = 0.0;
    } best;
    RowMatrix target = w;  // what Wq must carry: W - U V
    for (int it = 0; it < config.max_iterations; ++it) {
        QuantizedMatrix quantized = quantize_base(config, base_format, k, n, target.data());
        const std::vector<float> dequantized = dequantize(quantized);
        const RowMatrix residual = w - ConstMatrixMap(dequantized.data(), k, n);
        TruncatedSvd svd = truncated_svd(k, n, terms.rank, residual.data());
        const RowMatrix product = low_rank_product(k, n, terms.rank, svd.u.data(), svd.v.data());
        const double error = std::sqrt((residual - product).cast<double>().squaredNorm()) * scale;
        result.relative_errors.push_back(error);
        result.iterations = it + 1;
        target = w - product;
        if (it == 0 || error < best.error) best = {std::move(quantized), std::move(svd), error};
        if (converged(result.relative_errors, config)) break;
    }

    // Store the compensator, then let Wq absorb its rounding; keep whichever Wq is closer.
    result.compensator = quantize_low_rank(terms.bits, k, n, terms.rank, best.compensator.u.data(),
                                           best.compensator.v.data());
    const std::vector<float> u = dense_u(result.compensator);
    const std::vector<float> v = dense_v(result.compensator);
    const RowMatrix product = low_rank_product(k, n, terms.rank, u.data(), v.data());
    const std::vector<float> before = dequantize(best.weights);
    const double error_before = residual_norm(w, ConstMatrixMap(before.data(), k, n), product) * scale;

    const RowMatrix target_after = w - product;
    QuantizedMatrix requantized = quantize_base(config, base_format, k, n, target_after.data());
    const std::vector<float> after = dequantize(requantized);
    const double error_after = residual_norm(w, ConstMatrixMap(after.data(), k, n), product) * scale;
    if (error_after < error_before) {
        result.weights = std::move(requantized);
        result.relative_error = error_after;
    } else {
        result.weights = std::move(best.weights);
        result.relative_error = error_before;
    }
    return result;
}

}  // namespace qjit
