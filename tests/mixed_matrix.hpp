// Random matrices of the 2/4/16 formats' parts (mixed widths, second-order scales, sparse
// outliers), alone or together, for the tests of every backend that runs them.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/half.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit::test {

struct Features {
    bool mixed = false;         // 2- and 4-bit groups (else uniform 3-bit)
    bool second_order = false;  // second-order scales (else fp16)
    bool outliers = false;      // sparse outliers at about half the cap
    bool act_order = false;
    bool symmetric = false;     // zero points fixed at 2^(width - 1)
};

inline std::string features_name(const Features& f) {
    std::string name = f.mixed ? "mixed" : "q3";
    if (f.second_order) name += "_sq4";
    if (f.outliers) name += "_sp";
    if (f.act_order) name += "_act";
    if (f.symmetric) name += "_sym";
    return name;
}

// Random codes, scales and zero points in the ranges the features allow (the kernels do not care
// how they were chosen), validated.
inline QuantizedMatrix synthetic_matrix(int64_t k, int64_t n, int64_t group_size, const Features& f, uint32_t seed) {
    std::mt19937 rng(seed);
    QuantizedMatrix m;
    QuantParams& p = m.params;
    p.k = k;
    p.n = n;
    p.group_size = group_size;
    p.bits = f.mixed ? 4 : 3;
    p.symmetric = f.symmetric;
    p.scale_type = f.second_order ? ScaleType::SecondOrder : ScaleType::F16;
    const int64_t groups = p.num_groups();
    if (f.mixed) {
        for (int64_t g = 0; g < groups; ++g) p.group_bits.push_back(uint8_t(rng() % 3 == 0 ? 4 : 2));
        p.group_bits[0] = 4;  // both widths present
        p.group_bits[size_t(groups - 1)] = 2;
    }
    std::uniform_real_distribution<float> scale(0.01f, 0.1f);
    for (int64_t i = 0; i < groups * n; ++i) {
        p.scales.push_back(half_to_float(float_to_half(scale(rng))));
        const int width = p.group_width(i / n);
        p.zeros.push_back(uint16_t(f.symmetric ? 1u << (width - 1) : rng() % (1u << width)));
    }
    if (f.second_order) {
        p.second_order = quantize_second_order(groups, n, p.scales);
        p.scales = dequantize_second_order(p.second_order, groups, n);
    }
    m.codes.resize(size_t(k * n));
    for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c) m.codes[size_t(r * n + c)] = uint8_t(rng() % (1u << p.group_width(r / group_size)));
    if (f.act_order) {
        p.act_order = true;
        p.row_order.resize(size_t(k));
        std::iota(p.row_order.begin(), p.row_order.end(), 0);
        std::shuffle(p.row_order.begin(), p.row_order.end(), rng);
    }
    if (f.outliers) {
        std::set<std::pair<int32_t, int32_t>> taken;
        std::vector<OutlierEntry> entries;
        std::uniform_real_distribution<float> value(-2.0f, 2.0f);
        while (int64_t(entries.size()) < std::max<int64_t>(1, max_outliers(k, n) / 2)) {
            const int32_t r = int32_t(rng() % uint32_t(k)), c = int32_t(rng() % uint32_t(n));
            if (taken.insert({r, c}).second) entries.push_back({r, c, value(rng)});
        }
        p.outliers = int64_t(entries.size());
        p.outliers_data = make_sparse_outliers(k, n, std::move(entries));
    }
    validate(m);
    return m;
}

}  // namespace qjit::test
