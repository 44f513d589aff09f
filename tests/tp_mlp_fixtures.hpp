// Tensor-parallel MLP fixtures shared by the CPU tests (test_tp_mlp.cpp) and the device tests
// (test_cuda_device.cpp): random quantized MLPs and the whole MLP by the oracle, in double.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "format/reference.hpp"
#include "runtime/tp_mlp.hpp"

namespace qjit::tp_test {

// A random K x N matrix at `bits`, groups of `group` rows, its rows stored in a shuffled group order
// (act-order) when asked.
inline QuantizedMatrix random_matrix(int64_t k, int64_t n, int bits, int64_t group, bool act_order, uint32_t seed) {
    std::mt19937 rng(seed);
    QuantizedMatrix m;
    QuantParams& p = m.params;
    static_cast<WeightFormat&>(p) = with_shape(WeightFormat{.bits = bits, .group_size = group,
                                                            .scale_type = ScaleType::F32, .act_order = act_order},
                                               k, n);
    const int64_t metadata = p.num_groups() * n;
    std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
    std::uniform_real_distribution<float> scale(0.01f, 0.05f);
    for (int64_t i = 0; i < metadata; ++i) {
        p.scales.push_back(scale(rng));
        p.zeros.push_back(uint16_t(code(rng)));
    }
    for (int64_t i = 0; i < k * n; ++i) m.codes.push_back(uint8_t(code(rng)));
    if (act_order) {
        p.row_order.resize(size_t(k));
        std::iota(p.row_order.begin(), p.row_order.end(), 0);
        std::shuffle(p.row_order.begin(), p.row_order.end(), rng);
    }
    validate(m);
    return m;
}

struct Shapes {
    int64_t k1, n1, n2;
    int64_t group;
};

inline MlpMatrices random_mlp(qjit_mlp_kind kind, const Shapes& s, int bits, bool act_order, uint32_t seed) {
    return {kind, random_matrix(s.k1, s.n1, bits, s.group, act_order, seed),
            random_matrix(s.k1, s.n1, bits, s.group, act_order, seed + 1),
            random_matrix(s.n1, s.n2, bits, s.group, act_order, seed + 2)};
}

// The whole MLP by the oracle, in double; also sum_k |h_k| |W_down[k][n]| per output, the scale of
// the rounding a sharded fp32 computation may differ by.
struct Expected {
    std::vector<double> y, scale;
};

inline Expected whole_mlp(const MlpMatrices& mlp, const std::vector<float>& x, int64_t m) {
    const int64_t k1 = mlp.up.params.k, n1 = mlp.up.params.n, n2 = mlp.down.params.n;
    const std::vector<float> up = dequantize(mlp.up), down = dequantize(mlp.down);
    const std::vector<float> gate = mlp.kind == QJIT_MLP_SWIGLU ? dequantize(mlp.gate) : std::vector<float>{};
    Expected e{std::vector<double>(size_t(m * n2)), std::vector<double>(size_t(m * n2))};
    for (int64_t i = 0; i < m; ++i) {
        std::vector<double> h(static_cast<size_t>(n1));
        for (int64_t j = 0; j < n1; ++j) {
            double u = 0, g = 0;
            for (int64_t k = 0; k < k1; ++k) {
                u += double(x[size_t(i * k1 + k)]) * up[size_t(k * n1 + j)];
                if (!gate.empty()) g += double(x[size_t(i * k1 + k)]) * gate[size_t(k * n1 + j)];
            }
            h[size_t(j)] = mlp.kind == QJIT_MLP_SWIGLU
                               ? g / (1 + std::exp(-g)) * u
                               : 0.5 * u * (1 + std::tanh(0.7978845608 * (u + 0.044715 * u * u * u)));
        }
        for (int64_t c = 0; c < n2; ++c)
            for (int64_t j = 0; j < n1; ++j) {
                e.y[size_t(i * n2 + c)] += h[size_t(j)] * down[size_t(j * n2 + c)];
                e.scale[size_t(i * n2 + c)] += std::fabs(h[size_t(j)] * down[size_t(j * n2 + c)]);
            }
    }
    return e;
}

// fp32 products, sums and activations along the way: well within 1e-5 of the terms' magnitude
// (K1 and N1 are a few hundred); a misplaced column or row is off by whole terms.
inline void expect_close(const std::vector<float>& y, const Expected& e, const std::string& what) {
    for (size_t i = 0; i < y.size(); ++i)
        ASSERT_LE(std::fabs(double(y[i]) - e.y[i]), 1e-5 * e.scale[i] + 1e-7) << what << " output " << i;
}

}  // namespace qjit::tp_test
