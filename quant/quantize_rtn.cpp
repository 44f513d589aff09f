#include "quant/quantize_rtn.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "base/half.hpp"

namespace qjit {

namespace {

struct GroupQuantizer {
    float scale;
    int zero;
    float offset;  // float offsets only
};

// Scale and zero point for values in [lo, hi]: symmetric ranges are centred on 2^(bits-1). With
// float offsets the range is the group's own (it need not contain 0) and the offset is its low end
// as stored (ggml's Q4_1 quantizer, at any width).
GroupQuantizer fit_group(float lo, float hi, const WeightFormat& format) {
    const int max_code = format.max_code();
    if (format.float_offsets) {
        const float offset = format.f16_scales() ? round_to_half(lo) : lo;
        if (hi <= offset) return {1.0f, 0, offset};  // one value (as stored): code 0 at any scale
        return {range_scale({offset, hi}, format.bits, format.scale_type), 0, offset};
    }
    const QuantRange range = quantization_range(lo, hi, format.symmetric);
    const float scale = range_scale(range, format.bits, format.scale_type);
    const int zero = format.symmetric ? (max_code + 1) / 2
                                      : std::clamp(int(std::nearbyint(-range.lo / scale)), 0, max_code);
    return {scale, zero, 0.0f};
}

}  // namespace

QuantRange quantization_range(float lo, float hi, bool symmetric) {
    lo = std::min(lo, 0.0f);
    hi = std::max(hi, 0.0f);
    if (symmetric) {
        hi = std::max(-lo, hi);
        lo = -hi;
    }
    if (lo == 0.0f && hi == 0.0f) return {-1.0f, 1.0f};  // an all-zero group: any scale represents it exactly
    return {lo, hi};
}

float stored_scale(float scale, ScaleType type) {
    if (type != ScaleType::F16) return scale;
    const float rounded = round_to_half(scale);
    return rounded == 0.0f ? half_to_float(0x0400) : rounded;
}

float range_scale(const QuantRange& range, int bits, ScaleType type) {
    return stored_scale((range.hi - range.lo) / float((1 << bits) - 1), type);
}

QuantizedMatrix quantize_rtn(const WeightFormat& format, int64_t k, int64_t n, const float* weights) {
    QuantizedMatrix out;
    QuantParams& p = out.params;
    static_cast<WeightFormat&>(p) = with_shape(format, k, n);
    if (!p.uniform_bits() || p.second_order_scales() || p.act_order || p.outliers > 0 || p.low_rank.present())
        fail(QJIT_ERROR_INVALID_ARGUMENT, "format ", p.name(), " is not one round-to-nearest makes: it makes one "
             "width, fp16 or fp32 scales, rows in order, no outliers or compensator");
    require(weights != nullptr, "weights is NULL");
    const int64_t groups = p.num_groups();
    p.scales.resize(size_t(groups * n));
    if (p.float_offsets) p.offsets.resize(size_t(groups * n));
    else p.zeros.resize(size_t(groups * n));
    out.codes.resize(size_t(k * n));

    const float max_code = float(p.max_code());
    std::vector<float> lo(static_cast<size_t>(n)), hi(static_cast<size_t>(n));
    std::vector<GroupQuantizer> quantizers(static_cast<size_t>(n));
    for (int64_t g = 0; g < groups; ++g) {
        const int64_t r0 = g * p.group_size, r1 = std::min(k, r0 + p.group_size);
        std::copy(weights + r0 * n, weights + (r0 + 1) * n, lo.begin());
        std::copy(weights + r0 * n, weights + (r0 + 1) * n, hi.begin());
        for (int64_t r = r0; r < r1; ++r) {  // rows outer, columns inner: streams W once
            for (int64_t c = 0; c < n; ++c) {
                const float w = weights[r * n + c];
                require(std::isfinite(w), "weights[", r, "][", c, "] (K x N order) is not finite");
                lo[size_t(c)] = std::min(lo[size_t(c)], w);
                hi[size_t(c)] = std::max(hi[size_t(c)], w);
            }
        }
        for (int64_t c = 0; c < n; ++c) quantizers[size_t(c)] = fit_group(lo[size_t(c)], hi[size_t(c)], p);
        for (int64_t c = 0; c < n; ++c) {
            const GroupQuantizer& gq = quantizers[size_t(c)];
            p.scales[size_t(g * n + c)] = gq.scale;
            if (p.float_offsets) p.offsets[size_t(g * n + c)] = gq.offset;
            else p.zeros[size_t(g * n + c)] = uint16_t(gq.zero);
        }
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t c = 0; c < n; ++c) {
                const GroupQuantizer& gq = quantizers[size_t(c)];
                const float q = std::nearbyint((weights[r * n + c] - gq.offset) / gq.scale) + float(gq.zero);
                out.codes[size_t(r * n + c)] = uint8_t(std::clamp(q, 0.0f, max_code));
            }
        }
    }
    return out;
}

}  // namespace qjit
