#include "runtime/layer_passes.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "base/half.hpp"

namespace qjit {

std::vector<Pass> plan_forward(const WeightFormat& format, int64_t groups, int k_splits, int64_t group_unit) {
    require(groups >= 1 && k_splits >= 1 && group_unit >= 1, "plan_forward: ", groups, " groups, ", k_splits,
            " K splits, units of ", group_unit);
    std::vector<Pass> passes;
    if (format.act_order) passes.push_back({PassKind::Gather});
    const int bits = product_bits(format);
    const int64_t units = std::max<int64_t>(1, groups / group_unit);
    const int64_t parts = std::min<int64_t>(k_splits, units);
    for (int64_t s = 0; s < parts; ++s) {
        const int64_t first = s * units / parts * group_unit;
        const int64_t end = s + 1 == parts ? groups : (s + 1) * units / parts * group_unit;
        passes.push_back({PassKind::Product, first, end, bits});
    }
    if (format.outliers > 0) passes.push_back({PassKind::Outliers});
    if (format.low_rank.present()) passes.push_back({PassKind::LowRank, 0, 0, format.low_rank.bits});
    return passes;
}

std::string passes_text(const std::vector<Pass>& passes) {
    std::string text;
    for (const Pass& p : passes) {
        if (!text.empty()) text += ',';
        switch (p.kind) {
            case PassKind::Gather: text += "gather"; break;
            case PassKind::Product:
                text += concat("product[", p.first_group, ":", p.end_group, ")q", p.bits == 0 ? "mixed" : std::to_string(p.bits));
                break;
            case PassKind::Outliers: text += "outliers"; break;
            case PassKind::LowRank: text += concat("low_rank[", p.bits == 16 ? "f16" : concat("q", p.bits), "]"); break;
        }
    }
    return text;
}

void add_outliers(const SparseOutliers& outliers, int64_t k, int64_t n, int64_t first_column, int64_t end_column,
                  const float* x, int64_t m, float* y) {
    for (int64_t c = first_column; c < end_column; ++c) {
        const int64_t begin = outliers.column_start[size_t(c)], end = outliers.column_start[size_t(c + 1)];
        for (int64_t i = 0; i < m; ++i) {
            float sum = 0;
            for (int64_t e = begin; e < end; ++e)
                sum += x[i * k + outliers.rows[size_t(e)]] * half_to_float(outliers.values[size_t(e)]);
            y[i * n + c] += sum;
        }
    }
}

void gather_row(const int32_t* row_order, int64_t k, const float* src, float* dst) {
    for (int64_t r = 0; r < k; ++r) dst[r] = src[row_order[r]];
}

bool has_pass(const std::vector<Pass>& passes, PassKind kind) {
    return std::any_of(passes.begin(), passes.end(), [kind](const Pass& p) { return p.kind == kind; });
}

}  // namespace qjit
