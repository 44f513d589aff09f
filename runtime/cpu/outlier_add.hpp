// The sparse outlier term of a 2/4/16 layer on the generated kernels' machines (AVX2 or
// AVX-512): y[i][c] += sum over column c's outliers (r, v) of x[i][r] * v.
//
// One activation row reads x as given: each column's outliers (8 on average at 0.2 % of K = 4096)
// are one masked gather and one fused multiply-add, with no branch on how many there are. Several
// rows read x transposed (row r's activations side by side), so each outlier is one vector
// multiply-add across the rows instead of one gather per row.
#pragma once

#include <cstdint>
#include <vector>

namespace qjit {

// A layer's outliers by output column (format/quantized_matrix.hpp's SparseOutliers, values in
// fp32 and rows in the order of the x they are applied to).
struct OutlierColumns {
    const int64_t* column_start;  // [n + 1]
    const int32_t* rows;
    const float* values;
};

// Rows a transposed call takes at once; the transposed activations need this many floats of
// padding after their last row.
inline constexpr int64_t kOutlierRowChunk = 16;

// y[c] += the term of columns [first_column, end_column) for one row x (k floats).
void add_outliers_one_row(const OutlierColumns& outliers, const float* x, int64_t first_column, int64_t end_column,
                          float* y, bool avx512);

// y[i * ldy + c] += the term for rows i < rows, reading x[i][r] at xt[r * stride + i] (stride >=
// rows; kOutlierRowChunk floats readable past the last one).
void add_outliers_transposed(const OutlierColumns& outliers, const float* xt, int64_t stride, int64_t rows,
                             int64_t first_column, int64_t end_column, float* y, int64_t ldy, bool avx512);

// xt[r * m + i] = x[i * k + r] (m rows of k), in `buffer`, padded for add_outliers_transposed.
const float* transpose_for_outliers(const float* x, int64_t m, int64_t k, std::vector<float>& buffer);

}  // namespace qjit
