#include "runtime/activation_prologue.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qjit {

namespace {

// Round to nearest even for |v| < 2^22 without a libm call (baseline x86-64 has no roundps):
// adding 1.5 * 2^23 pushes the fraction bits out of the mantissa.
inline float round_to_nearest(float v) {
    constexpr float kShift = 12582912.0f;
    return (v + kShift) - kShift;
}

template <typename T>
T* grow(std::vector<T>& buffer, size_t count) {
    if (buffer.size() < count) buffer.resize(count);
    return buffer.data();
}

}  // namespace

PreparedActivations prepare_activations(const jit::CpuKernelSpec& spec, const QuantParams& params, const float* x,
                                        int64_t m) {
    thread_local std::vector<float> gathered, f32_rows, scales, sums;
    thread_local std::vector<int8_t> int8_rows;

    const int64_t k = params.k, padded_k = spec.padded_k(), groups = spec.num_groups(), gs = spec.group_size;
    const bool int8 = spec.path == jit::ActivationPath::Int8;
    float* row = grow(gathered, size_t(padded_k));
    float* scale_out = grow(scales, size_t(m * groups));
    float* sum_out = grow(sums, size_t(m * groups));
    float* f32_out = int8 ? nullptr : grow(f32_rows, size_t(m * padded_k));
    int8_t* int8_out = int8 ? grow(int8_rows, size_t(m * padded_k)) : nullptr;
    const float qmax = float(spec.int8_activation_max());

    for (int64_t i = 0; i < m; ++i) {
        const float* src = x + i * k;
        if (params.act_order()) {
            for (int64_t r = 0; r < k; ++r) row[r] = src[params.row_order[size_t(r)]];
        } else {
            std::copy(src, src + k, row);
        }
        std::fill(row + k, row + padded_k, 0.0f);
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t r0 = g * gs, r1 = std::min(padded_k, r0 + gs);
            if (!int8) {
                float sum = 0.0f;
                for (int64_t r = r0; r < r1; ++r) sum += row[r];
                sum_out[i * groups + g] = sum;
                continue;
            }
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; ++r) amax = std::max(amax, std::fabs(row[r]));
            const float inverse = amax > 0.0f ? qmax / amax : 0.0f;
            int32_t sum = 0;
            for (int64_t r = r0; r < r1; ++r) {
                const int32_t q = int32_t(round_to_nearest(row[r] * inverse));
                int8_out[i * padded_k + r] = int8_t(q);
                sum += q;
            }
            scale_out[i * groups + g] = amax / qmax;
            sum_out[i * groups + g] = float(sum);
        }
        if (!int8) std::copy(row, row + padded_k, f32_out + i * padded_k);
    }
    return {int8 ? static_cast<const void*>(int8_out) : static_cast<const void*>(f32_out), scale_out, sum_out};
}

}  // namespace qjit
