// What the CUDA kernels' tests share, on a device or in the host emulation: random matrices of a
// format and the comparison of a kernel's output with the oracle.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_variants.hpp"
#include "base/half.hpp"
#include "format/quantized_matrix.hpp"
#include "format/reference.hpp"
#include "jit/cuda/cuda_tiling.hpp"

namespace qjit::test {

inline QuantizedMatrix random_matrix(const CudaFormat& f, int64_t k, int64_t n, bool act_order, uint32_t seed,
                                     bool f16_scales = true) {
    std::mt19937 rng(seed);
    QuantizedMatrix m;
    QuantParams& p = m.params;
    p.k = k, p.n = n, p.bits = f.bits, p.symmetric = f.symmetric;
    p.group_size = f.group == 0 ? k : f.group;
    p.scale_type = f16_scales ? ScaleType::F16 : ScaleType::F32;
    std::uniform_real_distribution<float> scale(0.002f, 0.02f);
    p.scales.resize(size_t(p.num_groups() * n));
    for (float& s : p.scales) s = f16_scales ? round_to_half(scale(rng)) : scale(rng);
    if (f.scale_code_bits > 0) {  // super-block scales: random d (dmin) and codes, expanded
        p.scale_type = ScaleType::SuperBlock;
        p.scale_code_bits = f.scale_code_bits;
        p.float_offsets = f.float_offsets;
        SuperBlockScales& s = p.super_block;
        const size_t supers = size_t(k / kSuperBlockRows * n), groups = size_t(p.num_groups() * n);
        std::uniform_real_distribution<float> d(0.0005f, 0.002f);
        const int codes = 1 << f.scale_code_bits, lowest = f.symmetric ? -codes / 2 : 0;
        s.scales.resize(supers);
        for (uint16_t& v : s.scales) v = float_to_half(d(rng));
        s.scale_codes.resize(groups);
        for (int8_t& c : s.scale_codes) c = int8_t(lowest + int(rng() % unsigned(codes)));
        if (f.float_offsets) {
            s.mins.resize(supers);
            for (uint16_t& v : s.mins) v = float_to_half(d(rng));
            s.min_codes.resize(groups);
            for (uint8_t& c : s.min_codes) c = uint8_t(rng() % unsigned(codes));
        }
        expand_super_block_scales(p);
        if (f.symmetric) p.zeros.assign(groups, uint16_t(1u << (f.bits - 1)));
    } else if (f.float_offsets) {  // a group's offset near -scale * (a zero point), as a minimum of the group
        p.float_offsets = true;
        std::uniform_real_distribution<float> zero(0.f, float(1 << f.bits));
        p.offsets.resize(p.scales.size());
        for (size_t i = 0; i < p.offsets.size(); ++i) {
            const float offset = -p.scales[i] * zero(rng);
            p.offsets[i] = f16_scales ? round_to_half(offset) : offset;
        }
    } else {
        p.zeros.resize(p.scales.size());  // symmetric: the fixed midpoint, as the quantizers store it
        for (uint16_t& z : p.zeros) z = f.symmetric ? uint16_t(1u << (f.bits - 1)) : uint16_t(rng() % (1u << f.bits));
    }
    m.codes.resize(size_t(k * n));
    for (uint8_t& c : m.codes) c = uint8_t(rng() % (1u << f.bits));
    if (act_order) {
        p.act_order = true;
        p.row_order.resize(size_t(k));
        std::iota(p.row_order.begin(), p.row_order.end(), 0);
        std::shuffle(p.row_order.begin(), p.row_order.end(), rng);
    }
    return m;
}

// |y - oracle| <= 2^-6 * sum_k |x_k w_k| + (output rounding) |oracle|: weights are rounded to the
// activation type and fp16 products are summed 16 at a time; a wrong code, scale or index is off
// by the order of the whole sum.
inline void expect_matches_oracle(const QuantizedMatrix& matrix, const std::vector<float>& x, int64_t m,
                                  const std::vector<float>& y, jit::cuda::ActivationType type,
                                  const std::string& what) {
    std::vector<float> expected(size_t(m * matrix.params.n));
    reference_forward(matrix, x.data(), m, expected.data());
    const std::vector<float> w = dequantize(matrix);
    const int64_t k = matrix.params.k, n = matrix.params.n;
    const double output_rounding = type == jit::cuda::ActivationType::F16 ? 1.0 / 1024 : 1.0 / 128;
    int reported = 0;
    for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
            double magnitude = 0;
            for (int64_t i = 0; i < k; ++i) magnitude += std::fabs(x[size_t(r * k + i)] * w[size_t(i * n + c)]);
            const double e = expected[size_t(r * n + c)];
            const double bound = magnitude / 64 + std::fabs(e) * output_rounding + 1e-6;
            const double got = y[size_t(r * n + c)];
            if (!(std::fabs(got - e) <= bound) && reported++ < 5)
                ADD_FAILURE() << what << ": y[" << r << "][" << c << "] = " << got << ", oracle " << e << " (bound "
                              << bound << ")";
        }
}

// x as the kernels take it (fp16 or bf16 bits), and x rounded the same way for the oracle.
inline std::vector<uint16_t> to_activation_bits(std::vector<float>& x, jit::cuda::ActivationType type) {
    std::vector<uint16_t> bits(x.size());
    const bool f16 = type == jit::cuda::ActivationType::F16;
    for (size_t i = 0; i < x.size(); ++i) {
        bits[i] = f16 ? float_to_half(x[i]) : float_to_bf16(x[i]);
        x[i] = f16 ? half_to_float(bits[i]) : bf16_to_float(bits[i]);
    }
    return bits;
}

inline std::vector<float> from_activation_bits(const std::vector<uint16_t>& bits, jit::cuda::ActivationType type) {
    std::vector<float> values(bits.size());
    for (size_t i = 0; i < bits.size(); ++i)
        values[i] = type == jit::cuda::ActivationType::F16 ? half_to_float(bits[i]) : bf16_to_float(bits[i]);
    return values;
}

}  // namespace qjit::test
