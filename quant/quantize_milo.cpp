#include "quant/quantize_milo.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/QR>
#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "quant/quantize_gptq.hpp"
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
WeightFormat checked_base_format(const MiloConfig& config, int64_t k, int64_t n, const float* weights,
                                 const Hessian* hessian) {
    WeightFormat format = with_shape(config.format, k, n);
    require(format.low_rank.present(), "low_rank.rank is 0; MiLo fits a compensator of rank 1 .. min(K, N, ",
            kMaxLowRank, ")");
    require(weights != nullptr, "weights is NULL");
    require(config.base == BaseQuantizer::Rtn || config.base == BaseQuantizer::Hqq || config.base == BaseQuantizer::Gptq,
            "base quantizer ", int(config.base), " is not RTN, HQQ or GPTQ");
    require(config.base != BaseQuantizer::Gptq || hessian != nullptr,
            "the GPTQ base needs a calibration of the layer's inputs");
    require(config.base != BaseQuantizer::Gptq || !format.float_offsets,
            "float offsets go with the RTN or HQQ base; GPTQ stores integer zero points");
    require(config.max_iterations >= 1, "max_iterations is ", config.max_iterations, "; expected >= 1");
    require(config.tolerance >= 0.0 && std::isfinite(config.tolerance), "tolerance is ", config.tolerance,
            "; expected a finite value >= 0");
    require(config.window >= 1, "window is ", config.window, "; expected >= 1");
    require(config.damp >= 0.0 && config.damp <= 1.0, "damp is ", config.damp, "; expected 0 .. 1");
    if (hessian != nullptr) {
        require(!hessian->empty(), "the Hessian is empty: add calibration rows or set it");
        require(hessian->k() == k, "the Hessian is ", hessian->k(), " x ", hessian->k(), "; expected K x K = ", k,
                " x ", k);
    }
    format.low_rank = {};
    return format;
}

// The norm every step minimises: the weights' ||E||_F, or with a Hessian the output error
// ||L^T E||_F, H + damp mean(diag H) I = L L^T (only the diagonal known: L = its square root).
class ErrorNorm {
public:
    ErrorNorm(const Hessian* hessian, double damp, int64_t k) {
        if (hessian == nullptr) return;
        const std::vector<double> diagonal = hessian->diagonal();
        double mean = 0.0;
        for (double d : diagonal) mean += d / double(k);
        const double added = damp * mean > 0.0 ? damp * mean : 1.0;  // an all-zero H: the identity's scale
        Eigen::MatrixXd h = Eigen::MatrixXd::Zero(k, k);
        if (hessian->has_full())
            h = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                hessian->full().data(), k, k);
        else
            h.diagonal() = Eigen::Map<const Eigen::VectorXd>(diagonal.data(), k);
        h.diagonal().array() += added;
        const Eigen::LLT<Eigen::MatrixXd> llt(h);
        require(llt.info() == Eigen::Success, "the calibration's Hessian is not positive definite after damping");
        upper_ = llt.matrixU().toDenseMatrix().cast<float>();
        weighted_ = true;
    }

    bool weighted() const { return weighted_; }
    // L^T e, or e.
    RowMatrix weigh(const RowMatrix& e) const {
        if (!weighted_) return e;
        return upper_.triangularView<Eigen::Upper>() * e;
    }
    // The inverse of weigh on a K x r factor: solves L^T u = u'.
    RowMatrix unweigh(const RowMatrix& u) const {
        if (!weighted_) return u;
        return upper_.triangularView<Eigen::Upper>().solve(u);
    }
    double operator()(const RowMatrix& e) const { return std::sqrt(weigh(e).cast<double>().squaredNorm()); }

private:
    bool weighted_ = false;
    Eigen::MatrixXf upper_;  // L^T
};

QuantizedMatrix quantize_base(const MiloConfig& config, const WeightFormat& base_format, int64_t k, int64_t n,
                              const float* weights, const Hessian* hessian) {
    switch (config.base) {
        case BaseQuantizer::Rtn: return quantize_rtn(base_format, k, n, weights);
        case BaseQuantizer::Gptq: {
            GptqConfig gptq;
            gptq.format = base_format;
            gptq.damp = config.damp;
            return quantize_gptq(gptq, *hessian, k, n, weights);
        }
        case BaseQuantizer::Hqq: break;
    }
    return quantize_hqq({base_format, config.hqq, hessian ? calibration_row_weights(*hessian) : std::vector<float>{}},
                        k, n, weights);
}

// U V as a dense K x N matrix (u: K x rank, v: rank x N, row-major).
RowMatrix low_rank_product(int64_t k, int64_t n, int rank, const float* u, const float* v) {
    return ConstMatrixMap(u, k, rank) * ConstMatrixMap(v, rank, n);
}

// The best rank-r fit of `residual` in the error norm: the truncated SVD of L^T R, U mapped back.
TruncatedSvd compensator_fit(const ErrorNorm& norm, const RowMatrix& residual, int rank) {
    const int64_t k = residual.rows(), n = residual.cols();
    if (!norm.weighted()) return truncated_svd(k, n, rank, residual.data());
    const RowMatrix weighed = norm.weigh(residual);
    TruncatedSvd svd = truncated_svd(k, n, rank, weighed.data());
    const RowMatrix u = norm.unweigh(ConstMatrixMap(svd.u.data(), k, rank));
    std::copy(u.data(), u.data() + u.size(), svd.u.begin());
    return svd;
}

// The compensator at its stored precision. With codes, U is rounded first and V refitted by least
// squares (in the error norm) to the residual U's rounding leaves, then rounded itself: V absorbs
// much of U's error, which counts most in the output-error norm, where U's rows differ in size.
LowRankFactors stored_compensator(const LowRankTerms& terms, const ErrorNorm& norm, const RowMatrix& residual,
                                  const TruncatedSvd& svd) {
    const int64_t k = residual.rows(), n = residual.cols();
    LowRankFactors rounded = quantize_low_rank(terms.bits, k, n, terms.rank, svd.u.data(), svd.v.data());
    if (terms.bits == 16) return rounded;
    const std::vector<float> u = dense_u(rounded);
    const RowMatrix weighed_u = norm.weigh(ConstMatrixMap(u.data(), k, terms.rank));
    const RowMatrix v = weighed_u.colPivHouseholderQr().solve(norm.weigh(residual));
    if (!v.allFinite()) return rounded;
    return quantize_low_rank(terms.bits, k, n, terms.rank, u.data(), v.data());
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

MiloResult quantize_milo(const MiloConfig& config, int64_t k, int64_t n, const float* weights,
                         const Hessian* hessian) {
    const WeightFormat base_format = checked_base_format(config, k, n, weights, hessian);
    const LowRankTerms& terms = config.format.low_rank;
    const ConstMatrixMap w(weights, k, n);
    require(std::isfinite(w.cast<double>().squaredNorm()), "weights are not all finite");
    const ErrorNorm error_norm(hessian, config.damp, k);
    const double norm = error_norm(w);
    const double scale = norm > 0.0 ? 1.0 / norm : 1.0;  // an all-zero W: absolute errors (all 0)

    MiloResult result;
    struct Iterate {
        QuantizedMatrix weights;
        TruncatedSvd compensator;
        RowMatrix residual;
        double error = 0.0;
    } best;
    RowMatrix target = w;  // what Wq must carry: W - U V
    for (int it = 0; it < config.max_iterations; ++it) {
        QuantizedMatrix quantized = quantize_base(config, base_format, k, n, target.data(), hessian);
        const std::vector<float> dequantized = dequantize(quantized);
        const RowMatrix residual = w - ConstMatrixMap(dequantized.data(), k, n);
        TruncatedSvd svd = compensator_fit(error_norm, residual, terms.rank);
        const RowMatrix product = low_rank_product(k, n, terms.rank, svd.u.data(), svd.v.data());
        const double error = error_norm(residual - product) * scale;
        result.relative_errors.push_back(error);
        result.iterations = it + 1;
        target = w - product;
        if (it == 0 || error < best.error) best = {std::move(quantized), std::move(svd), residual, error};
        if (converged(result.relative_errors, config)) break;
    }

    // Store the compensator, then let Wq absorb its rounding; keep whichever Wq is closer.
    result.compensator = stored_compensator(terms, error_norm, best.residual, best.compensator);
    const std::vector<float> u = dense_u(result.compensator);
    const std::vector<float> v = dense_v(result.compensator);
    const RowMatrix product = low_rank_product(k, n, terms.rank, u.data(), v.data());
    const std::vector<float> before = dequantize(best.weights);
    const double error_before = error_norm(w - ConstMatrixMap(before.data(), k, n) - product) * scale;

    const RowMatrix target_after = w - product;
    QuantizedMatrix requantized = quantize_base(config, base_format, k, n, target_after.data(), hessian);
    const std::vector<float> after = dequantize(requantized);
    const double error_after = error_norm(w - ConstMatrixMap(after.data(), k, n) - product) * scale;
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
