#include "runtime/calibrated_layer.hpp"

#include "base/error.hpp"
#include "format/quantize_gptq.hpp"
#include "format/quantize_mixed.hpp"
#include "format/weight_format.hpp"

namespace qjit {

namespace {

// A fraction in [lo, hi]; NaN fails the test.
void require_within(double value, double lo, double hi, const char* field) {
    require(value >= lo && value <= hi, "config->", field, " is ", value, "; expected ", lo, " .. ", hi);
}

// K is the caller's to match (qjit_linear_create_calibrated names both); the quantizers refuse another.
void require_filled(const Hessian& hessian) {
    require(!hessian.empty(), "calibration is empty: no rows were added and no Hessian or diagonal was set");
}

}  // namespace

void validate_calibrated_config(const qjit_quant_config& config, int64_t k) {
    require_within(config.damp, 0.0, 1.0, "damp");
    if (config.method == QJIT_QUANT_GPTQ) {
        validate_bits(config.bits);
        return;
    }
    require(config.method == QJIT_QUANT_MIXED, "config->method is ", int(config.method),
            "; expected QJIT_QUANT_GPTQ or QJIT_QUANT_MIXED");
    const int64_t group_size = resolve_group_size(config.group_size, k);
    require(group_size >= 32 && group_size < k, "config->group_size is ", config.group_size, " for K = ", k,
            "; QJIT_QUANT_MIXED needs groups of 32 rows or more and more than one group");
    require(config.symmetric == 0, "config->symmetric is ", config.symmetric,
            "; QJIT_QUANT_MIXED stores asymmetric zero points only");
    require_within(config.mixed_alpha, 0.0, 1.0, "mixed_alpha");
    require_within(config.outlier_fraction, 0.0, kMaxOutlierFraction, "outlier_fraction");
}

QuantizedMatrix quantize_calibrated(const qjit_quant_config& config, const Hessian* hessian, int64_t k, int64_t n,
                                    const float* weights) {
    validate_calibrated_config(config, k);
    if (hessian) require_filled(*hessian);
    const int64_t group_size = resolve_group_size(config.group_size, k);
    if (config.method == QJIT_QUANT_GPTQ) {
        require(hessian != nullptr, "config->method is QJIT_QUANT_GPTQ: GPTQ needs a calibration of the layer's "
                                    "inputs (qjit_linear_create_calibrated with a calibration)");
        GptqConfig gptq;
        gptq.bits = config.bits;
        gptq.group_size = group_size;
        gptq.symmetric = config.symmetric != 0;
        gptq.scale_dtype = config.scale_dtype;
        gptq.act_order = config.act_order != 0;
        gptq.damp = config.damp;
        return quantize_gptq(gptq, *hessian, k, n, weights);
    }
    require(hessian != nullptr || config.act_order == 0, "config->act_order is ", config.act_order,
            "; QJIT_QUANT_MIXED takes act-order with a calibration only");
    MixedConfig mixed;
    mixed.group_size = group_size;
    mixed.alpha = config.mixed_alpha;
    mixed.outlier_fraction = config.outlier_fraction;
    mixed.second_order_scales = config.second_order_scales != 0;
    mixed.act_order = config.act_order != 0;
    mixed.damp = config.damp;
    return quantize_mixed(mixed, hessian, k, n, weights);
}

}  // namespace qjit
