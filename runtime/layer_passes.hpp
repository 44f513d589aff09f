// A layer's forward as a list of passes over its weight format. A pass is data (what it does and
// over which part of the weights), planned once at layer creation; the layer's backend
// (runtime/layer_backend.hpp) runs the list and may fuse passes: the x86 JIT folds the gather into
// its activation prologue and runs the product passes of one width as one parallel dispatch
// (tasks = column panels x passes), adding their partial outputs after; the portable path runs
// them one after another.
//
// Today's forwards: [gather] product... [outliers] [low_rank]. A product walks K-groups of mixed
// widths itself (the kernels read each group's width), so products split only for a K-split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/quantized_matrix.hpp"
#include "format/weight_format.hpp"

namespace qjit {

enum class PassKind {
    Gather,   // x[:, r] <- x[:, row_order[r]]: activations into the stored (act-order) row order
    Product,  // y (+)= x[:, groups] * W[groups, :] over a range of K-groups
    Outliers, // y += x * S: the sparse fp16 outliers (the JIT adds a panel's in its product task)
    LowRank,  // y += (x U) V: the compensator (runtime/low_rank_pass.hpp), after the products
};

struct Pass {
    PassKind kind = PassKind::Product;
    int64_t first_group = 0;  // Product: K-groups [first_group, end_group)
    int64_t end_group = 0;
    int bits = 0;             // Product: the code width of those groups, 0 for mixed widths

    bool operator==(const Pass&) const = default;
};

// The forward of `format` on a backend that walks `groups` K-groups (the JIT's count over padded
// rows may exceed the format's by one) in units of `group_unit` groups (2 where groups of 16 rows
// share a 32-row block): a gather when the rows are permuted, then the products, split into
// `k_splits` ranges of nearly equal units (a split-K: partial sums added), then the outliers and
// the compensator when the format has them.
std::vector<Pass> plan_forward(const WeightFormat& format, int64_t groups, int k_splits, int64_t group_unit = 1);

// The code width a product pass over `format` names: its bits, 0 for mixed widths.
inline int product_bits(const WeightFormat& format) { return format.uniform_bits() ? format.bits : 0; }

// Whether a product pass can run over `format` with `groups` K-groups: its width is the format's
// and its groups are a non-empty range inside them.
inline bool product_fits(const Pass& product, const WeightFormat& format, int64_t groups) {
    return product.bits == product_bits(format) && 0 <= product.first_group &&
           product.first_group < product.end_group && product.end_group <= groups;
}

// "gather,product[0:32)q4" / "product[0:16)q4,product[16:32)q4" / "product[0:32)q3,low_rank[q8]" /
// "product[0:128)q2or4,outliers".
std::string passes_text(const std::vector<Pass>& passes);

bool has_pass(const std::vector<Pass>& passes, PassKind kind);

// The outlier pass over output columns [first_column, end_column): y[i][c] += sum over column c's
// outliers of x[i][row] * value, x (m x k) in storage row order.
void add_outliers(const SparseOutliers& outliers, int64_t k, int64_t n, int64_t first_column, int64_t end_column,
                  const float* x, int64_t m, float* y);

// The gather pass on one activation row of k values: dst[r] = src[row_order[r]].
void gather_row(const int32_t* row_order, int64_t k, const float* src, float* dst);

}  // namespace qjit
