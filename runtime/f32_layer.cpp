#include "runtime/f32_layer.hpp"

#include <cstring>

#include "base/error.hpp"
#include "format/quantize_hqq.hpp"
#include "format/quantize_milo.hpp"
#include "format/quantize_rtn.hpp"

namespace qjit {

void validate_quant_config(const qjit_quant_config& config, int64_t k) {
    validate_bits(config.bits);
    resolve_group_size(config.group_size, k);
    require(config.scale_dtype == QJIT_DTYPE_F32 || config.scale_dtype == QJIT_DTYPE_F16, "config->scale_dtype is ",
            int(config.scale_dtype), "; expected QJIT_DTYPE_F32 or QJIT_DTYPE_F16");
    // Read as the int the caller stored: a negative value is outside the enum's range, and loading
    // it as the enum would be undefined.
    int method = 0;
    std::memcpy(&method, &config.method, sizeof method);
    require(method == QJIT_QUANT_RTN || method == QJIT_QUANT_HQQ || method == QJIT_QUANT_MILO, "config->method is ",
            method, "; expected QJIT_QUANT_RTN, QJIT_QUANT_HQQ or QJIT_QUANT_MILO");
    if (method == QJIT_QUANT_MILO) {
        require(config.rank >= 1 && config.rank <= kMaxLowRank, "config->rank is ", config.rank,
                "; MiLo needs a rank in 1 .. ", kMaxLowRank);
        validate_low_rank_bits(config.low_rank_bits);
    } else {
        require(config.rank == 0, "config->rank is ", config.rank, "; only QJIT_QUANT_MILO adds a compensator");
    }
}

std::unique_ptr<qjit_linear> make_linear_from_f32(qjit_context* context, const qjit_quant_config& config, int64_t k,
                                                  int64_t n, const float* weights) {
    validate_quant_config(config, k);
    const int64_t group_size = resolve_group_size(config.group_size, k);
    const bool symmetric = config.symmetric != 0;
    switch (config.method) {
        case QJIT_QUANT_HQQ: {
            HqqConfig hqq;
            hqq.bits = config.bits;
            hqq.group_size = group_size;
            hqq.symmetric = symmetric;
            hqq.scale_dtype = config.scale_dtype;
            return make_linear(context, quantize_hqq(hqq, k, n, weights));
        }
        case QJIT_QUANT_MILO: {
            require(config.rank <= std::min(k, n), "config->rank is ", config.rank, "; a ", k, " x ", n,
                    " layer takes at most min(K, N) = ", std::min(k, n));
            MiloConfig milo;
            milo.bits = config.bits;
            milo.group_size = group_size;
            milo.symmetric = symmetric;
            milo.scale_dtype = config.scale_dtype;
            milo.rank = config.rank;
            milo.factor_bits = config.low_rank_bits;
            MiloResult result = quantize_milo(milo, k, n, weights);
            return make_linear(context, std::move(result.weights), std::move(result.compensator));
        }
        default:
            return make_linear(context,
                               quantize_rtn({config.bits, group_size, symmetric, config.scale_dtype}, k, n, weights));
    }
}

}  // namespace qjit
