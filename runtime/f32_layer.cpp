#include "runtime/f32_layer.hpp"

#include <algorithm>
#include <variant>

#include "base/error.hpp"
#include "quant/quantize_rtn.hpp"

namespace qjit {

namespace {

// K is the caller's to match (qjit_linear_create_calibrated names both); the quantizers refuse another.
void require_filled(const Hessian& hessian) {
    require(!hessian.empty(), "calibration is empty: no rows were added and no Hessian or diagonal was set");
}

// Quantizes by the method whose config it is given and makes the layer.
struct QuantizedLayerMaker {
    qjit_context* context;
    int64_t k, n;
    const float* weights;
    const Hessian* hessian;

    std::unique_ptr<qjit_linear> operator()(const WeightFormat& rtn) const {
        return make_linear(context, quantize_rtn(rtn, k, n, weights));
    }
    std::unique_ptr<qjit_linear> operator()(HqqConfig hqq) const {
        if (hessian) {  // each row's error weighed by its input's second moment
            require_filled(*hessian);
            hqq.row_weights = calibration_row_weights(*hessian);
        }
        return make_linear(context, quantize_hqq(hqq, k, n, weights));
    }
    std::unique_ptr<qjit_linear> operator()(const MiloConfig& milo) const {
        if (hessian) require_filled(*hessian);
        require(hessian != nullptr || milo.base != BaseQuantizer::Gptq,
                "config->milo_base is QJIT_QUANT_GPTQ: the GPTQ base needs a calibration of the layer's inputs "
                "(qjit_linear_create_calibrated with a calibration)");
        MiloResult result = quantize_milo(milo, k, n, weights, hessian);
        return make_linear(context, std::move(result.weights), std::move(result.compensator));
    }
    std::unique_ptr<qjit_linear> operator()(const GptqConfig& gptq) const {
        require(hessian != nullptr, "config->method is QJIT_QUANT_GPTQ: GPTQ needs a calibration of the layer's "
                                    "inputs (qjit_linear_create_calibrated with a calibration)");
        require_filled(*hessian);
        return make_linear(context, quantize_gptq(gptq, *hessian, k, n, weights));
    }
    std::unique_ptr<qjit_linear> operator()(const MixedConfig& mixed) const {
        if (hessian) require_filled(*hessian);
        require(hessian != nullptr || !mixed.format.act_order, "config->act_order is ", int(mixed.format.act_order),
                "; QJIT_QUANT_MIXED takes act-order with a calibration only");
        return make_linear(context, quantize_mixed(mixed, hessian, k, n, weights));
    }
};

}  // namespace

std::unique_ptr<qjit_linear> make_linear_from_f32(qjit_context* context, const QuantizerConfig& quantizer, int64_t k,
                                                  int64_t n, const float* weights, const Hessian* hessian) {
    return std::visit(QuantizedLayerMaker{context, k, n, weights, hessian}, quantizer);
}

std::vector<float> k_by_n_from_n_by_k(const float* weights_n_by_k, int64_t k, int64_t n) {
    constexpr int64_t kTile = 32;
    std::vector<float> out(size_t(k * n));
    for (int64_t c0 = 0; c0 < n; c0 += kTile)
        for (int64_t r0 = 0; r0 < k; r0 += kTile)
            for (int64_t c = c0; c < std::min(n, c0 + kTile); ++c)
                for (int64_t r = r0; r < std::min(k, r0 + kTile); ++r)
                    out[size_t(r * n + c)] = weights_n_by_k[c * k + r];
    return out;
}

}  // namespace qjit
