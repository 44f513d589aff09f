#include "format/cuda_mixed_weights.hpp"

#include <utility>

#include "base/error.hpp"
#include "format/cuda_code_layout.hpp"
#include "format/cuda_weights.hpp"

namespace qjit {

using cuda_layout::kCodesPerBlock;

namespace {

template <typename T>
int64_t size_bytes(const std::vector<T>& v) {
    return int64_t(v.size() * sizeof(T));
}

}  // namespace

int64_t CudaMixedWeights::bytes() const {
    return size_bytes(codes) + size_bytes(group_words) + size_bytes(scales_f16) + size_bytes(scales_f32) +
           size_bytes(scale_codes) + size_bytes(scale2) + size_bytes(zero2) + size_bytes(zeros) +
           size_bytes(outlier_start) + size_bytes(outlier_rows) + size_bytes(outlier_values);
}

CudaMixedWeights pack_cuda_mixed(const QuantizedMatrix& matrix) {
    const QuantParams& p = matrix.params;
    require(p.group_size % kCodesPerBlock == 0, "the mixed-format CUDA layout needs K-groups of a multiple of 32 rows, not ",
            p.group_size);
    CudaMixedWeights w;
    w.k = p.k, w.n = p.n, w.group_size = p.group_size, w.num_groups = p.num_groups();
    w.kp = w.num_groups * w.group_size;
    w.np = cuda_layout::padded_n(p.n);
    const int64_t blocks_per_group = w.group_size / kCodesPerBlock;
    w.group_words.push_back(0);
    for (int64_t g = 0; g < w.num_groups; ++g)
        w.group_words.push_back(w.group_words.back() + int32_t(blocks_per_group * p.group_width(g)));
    const int64_t column_words = w.group_words.back();

    w.codes.assign(size_t(w.np * column_words), 0);
    for (int64_t col = 0; col < p.n; ++col)
        for (int64_t g = 0; g < w.num_groups; ++g) {
            const int width = p.group_width(g);
            for (int64_t b = 0; b < blocks_per_group; ++b) {
                uint8_t codes[kCodesPerBlock] = {};
                for (int i = 0; i < kCodesPerBlock; ++i) {
                    const int64_t row = g * w.group_size + b * kCodesPerBlock + i;
                    if (row < p.k) codes[i] = matrix.codes[size_t(row * p.n + col)];
                }
                pack_cuda_block(width, codes, &w.codes[size_t(col * column_words + w.group_words[size_t(g)] + b * width)]);
            }
        }

    // Scales and zero points as the plain layout lays them out ([num_groups][np]); zero points, at
    // most 16 here, shrink to a byte each.
    CudaWeights plain = pack_cuda_metadata(matrix);
    w.zeros.assign(plain.zeros.begin(), plain.zeros.end());
    if (p.second_order_scales()) {
        const SecondOrderScales& s = p.second_order;
        const int64_t column_groups = SecondOrderScales::column_groups(p.n), padded_groups = w.np / SecondOrderScales::kColumns;
        w.scale_codes.assign(size_t(w.num_groups * w.np), 0);
        w.scale2.assign(size_t(w.num_groups * padded_groups), 0);
        w.zero2.assign(w.scale2.size(), 0);
        for (int64_t g = 0; g < w.num_groups; ++g) {
            for (int64_t col = 0; col < p.n; ++col) w.scale_codes[size_t(g * w.np + col)] = s.codes[size_t(g * p.n + col)];
            for (int64_t c = 0; c < column_groups; ++c) {
                w.scale2[size_t(g * padded_groups + c)] = s.scales[size_t(g * column_groups + c)];
                w.zero2[size_t(g * padded_groups + c)] = s.zeros[size_t(g * column_groups + c)];
            }
        }
    } else {
        w.f16_scales = plain.f16_scales;
        w.scales_f16 = std::move(plain.scales_f16);
        w.scales_f32 = std::move(plain.scales_f32);
    }
    if (p.outliers > 0) {
        const SparseOutliers& o = p.outliers_data;
        w.outlier_start.assign(o.column_start.begin(), o.column_start.end());
        w.outlier_rows = o.rows;
        w.outlier_values = o.values;
    }
    return w;
}

}  // namespace qjit
