// The sparse outlier term of a 2/4/16 layer on the generated kernels' machines (AVX2 and FMA at
// least): y[i][c] += sum over column c's outliers (r, v) of x[i][r] * v.
//
// One activation row reads x as given: each column's outliers (8 on average at 0.2 % of K = 4096)
// are one masked gather and one fused multiply-add per 8, with no branch on how many there are.
// Several rows read x transposed (row r's activations side by side), so each outlier is a vector
// multiply-add across 16 rows instead of one gather per row. Both prefetch the outlier arrays
// ahead: they stream from memory once per forward.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cpu/thread_pool.hpp"

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
                          float* y);

// y[i * ldy + c] += the term for rows i < rows, reading x[i][r] at xt[r * stride + i] (stride >=
// rows; kOutlierRowChunk floats readable past the last one).
void add_outliers_transposed(const OutlierColumns& outliers, const float* xt, int64_t stride, int64_t rows,
                             int64_t first_column, int64_t end_column, float* y, int64_t ldy);

// xt[r * m + i] = x[i * k + r] (m rows of k), in `buffer`, padded for add_outliers_transposed; in
// blocks of K spread over `pool`.
const float* transpose_for_outliers(const float* x, int64_t m, int64_t k, std::vector<float>& buffer,
                                   ThreadPool& pool);

}  // namespace qjit
