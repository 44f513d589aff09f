// The C API of calibration: a handle that keeps H = sum of x^T x over a layer's inputs
// (quant/hessian.hpp), and the layers quantized with it (GPTQ, the 2/4/16 mixed format).
#include <algorithm>
#include <variant>
#include <vector>

#include "base/error.hpp"
#include "quant/hessian.hpp"
#include "format/weight_format.hpp"
#include "qjit/qjit.h"
#include "runtime/f32_layer.hpp"
#include "runtime/forward_arguments.hpp"
#include "runtime/quant_config.hpp"

struct qjit_calibration {
    explicit qjit_calibration(int64_t k) : hessian(k) {}
    qjit::Hessian hessian;
};

using namespace qjit;

extern "C" {

qjit_status qjit_calibration_create(int64_t k, qjit_calibration** calibration) {
    return guarded([&] {
        require(calibration != nullptr, "calibration (the output pointer) is NULL");
        *calibration = nullptr;
        // H is K x K: K stays within a layer's limit on weights, so that H's size cannot overflow.
        require(k >= 1 && k < kMaxDimension, "k is ", k, "; expected 1 .. 2^31 - 1");
        require(k <= kMaxWeights / k, "k is ", k, "; a K x K calibration holds more than the 2^36 values a layer may");
        *calibration = new qjit_calibration(k);
    });
}

qjit_status qjit_calibration_destroy(qjit_calibration* calibration) {
    return guarded([&] { delete calibration; });
}

qjit_status qjit_calibration_add(qjit_calibration* calibration, const float* x, int64_t m) {
    return guarded([&] {
        require(calibration != nullptr, "calibration is NULL");
        require(x != nullptr, "x is NULL");
        require_row_count(m);
        const int64_t k = calibration->hessian.k();
        require(m <= kMaxActivations / k, "m is ", m, "; m x K = ", m, " x ", k,
                " is more than the 2^40 activations a call may take");
        calibration->hessian.add(x, m);  // refuses a value that is not finite, naming x[row][column]
    });
}

qjit_status qjit_calibration_set_hessian(qjit_calibration* calibration, const float* h) {
    return guarded([&] {
        require(calibration != nullptr, "calibration is NULL");
        require(h != nullptr, "h is NULL");
        calibration->hessian.set_full(h);  // refuses non-finite, asymmetric or negative-diagonal h, naming h[i][j]
    });
}

qjit_status qjit_calibration_set_diagonal(qjit_calibration* calibration, const float* diagonal) {
    return guarded([&] {
        require(calibration != nullptr, "calibration is NULL");
        require(diagonal != nullptr, "diagonal is NULL");
        calibration->hessian.set_diagonal(diagonal);  // refuses non-finite or negative values, naming diagonal[i]
    });
}

qjit_status qjit_calibration_rows(const qjit_calibration* calibration, int64_t* rows) {
    return guarded([&] {
        require(calibration != nullptr, "calibration is NULL");
        require(rows != nullptr, "rows is NULL");
        *rows = calibration->hessian.rows();
    });
}

qjit_status qjit_linear_create_calibrated(qjit_context* context, const qjit_quant_config* config,
                                          const qjit_calibration* calibration, int64_t k, int64_t n,
                                          const float* weights, qjit_weight_layout layout, qjit_linear** layer) {
    return guarded([&] {
        require(layer != nullptr, "layer (the output pointer) is NULL");
        *layer = nullptr;
        require(context != nullptr, "context is NULL");
        require(config != nullptr, "config is NULL");
        require(weights != nullptr, "weights is NULL");
        validate_shape(k, n);
        const QuantizerConfig quantizer = quantizer_config(*config, k, n);
        require(layout == QJIT_LAYOUT_K_BY_N || layout == QJIT_LAYOUT_N_BY_K, "layout is ", int(layout),
                "; expected QJIT_LAYOUT_K_BY_N or QJIT_LAYOUT_N_BY_K");
        if (calibration)
            require(calibration->hessian.k() == k, "calibration has K = ", calibration->hessian.k(),
                    " inputs but the layer has K = ", k);
        const Hessian* hessian = calibration ? &calibration->hessian : nullptr;
        if (layout == QJIT_LAYOUT_K_BY_N) {
            *layer = make_linear_from_f32(context, quantizer, k, n, weights, hessian).release();
        } else {
            const std::vector<float> k_by_n = k_by_n_from_n_by_k(weights, k, n);
            *layer = make_linear_from_f32(context, quantizer, k, n, k_by_n.data(), hessian).release();
        }
    });
}

qjit_status qjit_mixed_widening_gains(const qjit_quant_config* config, const qjit_calibration* calibration, int64_t k,
                                      int64_t n, const float* weights, qjit_weight_layout layout, double* gains) {
    return guarded([&] {
        require(config != nullptr, "config is NULL");
        require(calibration != nullptr, "calibration is NULL");
        require(weights != nullptr, "weights is NULL");
        require(gains != nullptr, "gains is NULL");
        validate_shape(k, n);
        const QuantizerConfig quantizer = quantizer_config(*config, k, n);
        const MixedConfig* mixed = std::get_if<MixedConfig>(&quantizer);
        require(mixed != nullptr, "config->method is ", int(config->method), "; expected QJIT_QUANT_MIXED");
        require(layout == QJIT_LAYOUT_K_BY_N || layout == QJIT_LAYOUT_N_BY_K, "layout is ", int(layout),
                "; expected QJIT_LAYOUT_K_BY_N or QJIT_LAYOUT_N_BY_K");
        require(calibration->hessian.k() == k, "calibration has K = ", calibration->hessian.k(),
                " inputs but the layer has K = ", k);
        std::vector<float> k_by_n;
        if (layout == QJIT_LAYOUT_N_BY_K) k_by_n = k_by_n_from_n_by_k(weights, k, n);
        const std::vector<double> found = group_widening_gains(
            *mixed, calibration->hessian, k, n, layout == QJIT_LAYOUT_N_BY_K ? k_by_n.data() : weights);
        std::copy(found.begin(), found.end(), gains);
    });
}

qjit_status qjit_mixed_stored_bits(const qjit_quant_config* config, int64_t k, int64_t n, int64_t wide_groups,
                                   double* bits) {
    return guarded([&] {
        require(config != nullptr, "config is NULL");
        require(bits != nullptr, "bits is NULL");
        validate_shape(k, n);
        const QuantizerConfig quantizer = quantizer_config(*config, k, n);
        const MixedConfig* mixed = std::get_if<MixedConfig>(&quantizer);
        require(mixed != nullptr, "config->method is ", int(config->method), "; expected QJIT_QUANT_MIXED");
        *bits = mixed_stored_bits(*mixed, k, n, wide_groups);
    });
}

}  // extern "C"
