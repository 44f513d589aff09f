#include "format/reference.hpp"

#include <algorithm>

#include "base/half.hpp"

namespace qjit {

std::vector<float> dequantize(const QuantizedMatrix& matrix) {
    const QuantParams& p = matrix.params;
    std::vector<float> w(size_t(p.k * p.n));
    for (int64_t r = 0; r < p.k; ++r) {
        const int64_t g = r / p.group_size;
        const int64_t original_row = p.act_order ? p.row_order[size_t(r)] : r;
        for (int64_t c = 0; c < p.n; ++c) {
            const size_t meta = size_t(g * p.n + c);
            const float q = float(p.value_of(matrix.codes[size_t(r * p.n + c)]));
            // In this order: an imported GGUF tensor's dequantization is ggml's, bit for bit.
            w[size_t(original_row * p.n + c)] =
                p.float_offsets ? p.scales[meta] * q + p.offsets[meta] : p.scales[meta] * (q - float(p.zeros[meta]));
        }
    }
    const SparseOutliers& o = p.outliers_data;
    for (int64_t c = 0; c < p.n && p.outliers > 0; ++c)
        for (int64_t i = o.column_start[size_t(c)]; i < o.column_start[size_t(c + 1)]; ++i) {
            const int64_t r = o.rows[size_t(i)], original_row = p.act_order ? p.row_order[size_t(r)] : r;
            w[size_t(original_row * p.n + c)] += half_to_float(o.values[size_t(i)]);
        }
    return w;
}

void reference_forward(const QuantizedMatrix& matrix, const float* x, int64_t m, float* y) {
    const int64_t k = matrix.params.k, n = matrix.params.n;
    const std::vector<float> w = dequantize(matrix);
    std::vector<double> row(static_cast<size_t>(n));
    for (int64_t i = 0; i < m; ++i) {
        std::fill(row.begin(), row.end(), 0.0);
        for (int64_t r = 0; r < k; ++r) {
            const double xv = x[i * k + r];
            const float* wr = &w[size_t(r * n)];
            for (int64_t c = 0; c < n; ++c) row[size_t(c)] += xv * double(wr[c]);
        }
        for (int64_t c = 0; c < n; ++c) y[i * n + c] = float(row[size_t(c)]);
    }
}

void reference_forward(const QuantizedMatrix& matrix, const LowRankFactors& compensator, const float* x, int64_t m,
                       float* y) {
    const int64_t k = matrix.params.k, n = matrix.params.n, rank = compensator.rank;
    reference_forward(matrix, x, m, y);
    const std::vector<float> u = dense_u(compensator), v = dense_v(compensator);
    std::vector<double> t(static_cast<size_t>(rank));
    for (int64_t i = 0; i < m; ++i) {
        std::fill(t.begin(), t.end(), 0.0);
        for (int64_t r = 0; r < k; ++r)
            for (int64_t j = 0; j < rank; ++j) t[size_t(j)] += double(x[i * k + r]) * double(u[size_t(r * rank + j)]);
        for (int64_t c = 0; c < n; ++c) {
            double sum = 0.0;
            for (int64_t j = 0; j < rank; ++j) sum += t[size_t(j)] * double(v[size_t(j * n + c)]);
            y[i * n + c] = float(double(y[i * n + c]) + sum);
        }
    }
}

std::vector<float> dequantize(const QuantizedMatrix& matrix, const LowRankFactors& compensator) {
    const int64_t k = matrix.params.k, n = matrix.params.n, rank = compensator.rank;
    std::vector<float> w = dequantize(matrix);
    const std::vector<float> u = dense_u(compensator), v = dense_v(compensator);
    for (int64_t r = 0; r < k; ++r)
        for (int64_t j = 0; j < rank; ++j) {
            const float ur = u[size_t(r * rank + j)];
            for (int64_t c = 0; c < n; ++c) w[size_t(r * n + c)] += ur * v[size_t(j * n + c)];
        }
    return w;
}

}  // namespace qjit
