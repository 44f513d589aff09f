#include "runtime/quant_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "format/low_rank.hpp"

namespace qjit {

namespace {

// A fraction in [lo, hi]; NaN fails the test.
void require_within(double value, double lo, double hi, const char* field) {
    require(value >= lo && value <= hi, "config->", field, " is ", value, "; expected ", lo, " .. ", hi);
}

// Read as the int the caller stored: a negative value is outside the enum's range, and loading it as
// the enum would be undefined.
qjit_quant_method checked_method(const qjit_quant_config& config) {
    int method = 0;
    std::memcpy(&method, &config.method, sizeof method);
    require(method >= QJIT_QUANT_RTN && method <= QJIT_QUANT_MIXED, "config->method is ", method,
            "; expected QJIT_QUANT_RTN, QJIT_QUANT_HQQ, QJIT_QUANT_MILO, QJIT_QUANT_GPTQ or QJIT_QUANT_MIXED");
    return qjit_quant_method(method);
}

// The MiLo base, read as an int like the method.
BaseQuantizer checked_milo_base(const qjit_quant_config& config) {
    int base = 0;
    std::memcpy(&base, &config.milo_base, sizeof base);
    switch (base) {
        case QJIT_QUANT_RTN: return BaseQuantizer::Rtn;
        case QJIT_QUANT_HQQ: return BaseQuantizer::Hqq;
        case QJIT_QUANT_GPTQ: return BaseQuantizer::Gptq;
        default:
            fail(QJIT_ERROR_INVALID_ARGUMENT, "config->milo_base is ", base,
                 "; expected QJIT_QUANT_HQQ, QJIT_QUANT_RTN or QJIT_QUANT_GPTQ");
    }
}

void check_rank(const qjit_quant_config& config, qjit_quant_method method, int64_t k, int64_t n) {
    if (method != QJIT_QUANT_MILO) {
        require(config.rank == 0, "config->rank is ", config.rank, "; only QJIT_QUANT_MILO adds a compensator");
        return;
    }
    require(config.rank >= 1 && config.rank <= kMaxLowRank, "config->rank is ", config.rank,
            "; MiLo needs a rank in 1 .. ", kMaxLowRank);
    validate_low_rank_bits(config.low_rank_bits);
    require(config.rank <= std::min(k, n), "config->rank is ", config.rank, "; a ", k, " x ", n,
            " layer takes at most min(K, N) = ", std::min(k, n));
}

void check_mixed(const qjit_quant_config& config, int64_t group_size, int64_t k) {
    require(group_size >= 32 && group_size < k, "config->group_size is ", config.group_size, " for K = ", k,
            "; QJIT_QUANT_MIXED needs groups of 32 rows or more and more than one group");
    require(config.symmetric == 0, "config->symmetric is ", config.symmetric,
            "; QJIT_QUANT_MIXED stores asymmetric zero points only");
    require_within(config.mixed_alpha, 0.0, 1.0, "mixed_alpha");
    require_within(config.outlier_fraction, 0.0, kMaxOutlierFraction, "outlier_fraction");
}

// QJIT_FLOAT_OFFSETS_BY_METHOD resolves to what measured best (docs/quantization.md): HQQ's fitted
// offsets for HQQ; integer zero points for the rest (MiLo's HQQ base included) and for symmetric
// formats.
bool wants_float_offsets(const qjit_quant_config& config, qjit_quant_method method, bool symmetric) {
    if (config.float_offsets != QJIT_FLOAT_OFFSETS_BY_METHOD) {
        require(config.float_offsets >= 0, "config->float_offsets is ", config.float_offsets,
                "; expected 0 (integer zero points), 1 (float offsets) or QJIT_FLOAT_OFFSETS_BY_METHOD");
        return config.float_offsets != 0;
    }
    return !symmetric && method == QJIT_QUANT_HQQ;
}

}  // namespace

bool uses_float_offsets(const qjit_quant_config& config) {
    const qjit_quant_method method = checked_method(config);
    if (method == QJIT_QUANT_MILO) checked_milo_base(config);  // refused here as by the quantizer
    return wants_float_offsets(config, method, config.symmetric != 0);
}

QuantizerConfig quantizer_config(const qjit_quant_config& config, int64_t k, int64_t n) {
    const qjit_quant_method method = checked_method(config);
    if (method != QJIT_QUANT_MIXED) validate_bits(config.bits);  // MIXED picks 2 or 4 bits per group
    WeightFormat format;
    format.k = k;
    format.n = n;
    format.bits = config.bits;
    format.group_size = resolve_group_size(config.group_size, k);
    format.symmetric = config.symmetric != 0;
    require(config.scale_dtype == QJIT_DTYPE_F32 || config.scale_dtype == QJIT_DTYPE_F16, "config->scale_dtype is ",
            int(config.scale_dtype), "; expected QJIT_DTYPE_F32 or QJIT_DTYPE_F16");
    format.scale_type = scale_type_of(config.scale_dtype);
    const BaseQuantizer milo_base = method == QJIT_QUANT_MILO ? checked_milo_base(config) : BaseQuantizer::Hqq;
    if (wants_float_offsets(config, method, format.symmetric)) {
        require(method == QJIT_QUANT_RTN || method == QJIT_QUANT_HQQ ||
                    (method == QJIT_QUANT_MILO && milo_base != BaseQuantizer::Gptq),
                "config->float_offsets is for QJIT_QUANT_RTN, QJIT_QUANT_HQQ or QJIT_QUANT_MILO over RTN or HQQ; "
                "method is ", int(method), (method == QJIT_QUANT_MILO ? " with the GPTQ base" : ""));
        require(!format.symmetric, "config->float_offsets and config->symmetric exclude each other");
        format.float_offsets = true;
    }
    if (method == QJIT_QUANT_GPTQ || method == QJIT_QUANT_MIXED) {
        require_within(config.damp, 0.0, 1.0, "damp");
        format.act_order = config.act_order != 0;
    }
    if (method == QJIT_QUANT_MIXED) check_mixed(config, format.group_size, k);
    check_rank(config, method, k, n);
    switch (method) {
        case QJIT_QUANT_HQQ: {
            HqqConfig hqq;
            hqq.format = format;
            return hqq;
        }
        case QJIT_QUANT_MILO: {
            MiloConfig milo;
            milo.format = format;
            milo.format.low_rank = {config.rank, config.low_rank_bits};
            milo.base = milo_base;
            require_within(config.damp, 0.0, 1.0, "damp");
            milo.damp = config.damp;
            return milo;
        }
        case QJIT_QUANT_GPTQ: {
            GptqConfig gptq;
            gptq.format = format;
            gptq.damp = config.damp;
            return gptq;
        }
        case QJIT_QUANT_MIXED: {
            MixedConfig mixed;
            mixed.format = format;
            mixed.format.bits = 4;  // the widest; the quantizer picks 2 or 4 bits per group
            mixed.format.scale_type = config.second_order_scales != 0 ? ScaleType::SecondOrder : ScaleType::F16;
            mixed.alpha = config.mixed_alpha;
            require(std::isfinite(config.mixed_bits_per_weight) && config.mixed_bits_per_weight >= 0,
                    "config->mixed_bits_per_weight is ", config.mixed_bits_per_weight,
                    "; expected 0 (mixed_alpha decides) or a budget > 0");
            mixed.bits_per_weight = config.mixed_bits_per_weight;
            mixed.outlier_fraction = config.outlier_fraction;
            mixed.damp = config.damp;
            return mixed;
        }
        default: return format;
    }
}

}  // namespace qjit
