#include "runtime/f32_layer.hpp"

#include <algorithm>
#include <cstring>

#include "base/error.hpp"
#include "runtime/calibrated_layer.hpp"
#include "format/quantize_hqq.hpp"
#include "format/quantize_milo.hpp"
#include "format/quantize_rtn.hpp"

namespace qjit {

void validate_quant_config(const qjit_quant_config& config, int64_t k) {
    // Read as the int the caller stored: a negative value is outside the enum's range, and loading
    // it as the enum would be undefined.
    int method = 0;
    std::memcpy(&method, &config.method, sizeof method);
    require(method >= QJIT_QUANT_RTN && method <= QJIT_QUANT_MIXED, "config->method is ", method,
            "; expected QJIT_QUANT_RTN, QJIT_QUANT_HQQ, QJIT_QUANT_MILO, QJIT_QUANT_GPTQ or QJIT_QUANT_MIXED");
    if (method != QJIT_QUANT_MIXED) validate_bits(config.bits);  // MIXED picks 2 or 4 bits per group
    resolve_group_size(config.group_size, k);
    require(config.scale_dtype == QJIT_DTYPE_F32 || config.scale_dtype == QJIT_DTYPE_F16, "config->scale_dtype is ",
            int(config.scale_dtype), "; expected QJIT_DTYPE_F32 or QJIT_DTYPE_F16");
    if (method == QJIT_QUANT_GPTQ || method == QJIT_QUANT_MIXED) validate_calibrated_config(config, k);
    if (method == QJIT_QUANT_MILO) {
        require(config.rank >= 1 && config.rank <= kMaxLowRank, "config->rank is ", config.rank,
                "; MiLo needs a rank in 1 .. ", kMaxLowRank);
        validate_low_rank_bits(config.low_rank_bits);
    } else {
        require(config.rank == 0, "config->rank is ", config.rank, "; only QJIT_QUANT_MILO adds a compensator");
    }
}

std::unique_ptr<qjit_linear> make_linear_from_f32(qjit_context* context, const qjit_quant_config& config, int64_t k,
                                                  int64_t n, const float* weights, const Hessian* hessian) {
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
        case QJIT_QUANT_GPTQ:
        case QJIT_QUANT_MIXED: return make_linear(context, quantize_calibrated(config, hessian, k, n, weights));
        default:
            return make_linear(context,
                               quantize_rtn({config.bits, group_size, symmetric, config.scale_dtype}, k, n, weights));
    }
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
