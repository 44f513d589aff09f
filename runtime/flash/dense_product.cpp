#include "runtime/flash/dense_product.hpp"

#include <algorithm>

namespace qjit {

void dense_product(const float* x, int64_t n, const float* w, int64_t d_model, int64_t d_ff, float* out,
                   ThreadPool& pool) {
    // A few rows at a time against a slice of columns, so each slice of w is read once per block
    // of rows and the block's outputs stay in L1.
    constexpr int64_t kRows = 8, kColumns = 512;
    const int64_t row_blocks = (n + kRows - 1) / kRows, column_blocks = (d_ff + kColumns - 1) / kColumns;
    auto task = [&](int64_t t) {
        const int64_t r0 = t / column_blocks * kRows, c0 = t % column_blocks * kColumns;
        const int64_t rows = std::min(kRows, n - r0), columns = std::min(kColumns, d_ff - c0);
        for (int64_t r = 0; r < rows; ++r) std::fill_n(out + (r0 + r) * d_ff + c0, columns, 0.0f);
        for (int64_t k = 0; k < d_model; ++k) {
            const float* w_row = w + k * d_ff + c0;
            for (int64_t r = 0; r < rows; ++r) {
                const float xv = x[(r0 + r) * d_model + k];
                float* o = out + (r0 + r) * d_ff + c0;
                for (int64_t c = 0; c < columns; ++c) o[c] += xv * w_row[c];
            }
        }
    };
    pool.parallel_for(row_blocks * column_blocks, task);
}

}  // namespace qjit
