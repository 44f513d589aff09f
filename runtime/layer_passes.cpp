#include "runtime/layer_passes.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace qjit {

std::vector<Pass> plan_forward(const WeightFormat& format, int64_t groups, int k_splits, int64_t group_unit) {
    require(groups >= 1 && k_splits >= 1 && group_unit >= 1, "plan_forward: ", groups, " groups, ", k_splits,
            " K splits, units of ", group_unit);
    std::vector<Pass> passes;
    if (format.act_order) passes.push_back({PassKind::Gather});
    // Runs of groups of one width (one run while the format is uniform; groups past the format's
    // own, padding only, take the width of the last).
    auto width = [&](int64_t g) {
        if (format.uniform_bits()) return format.bits;
        return int(format.group_bits[size_t(std::min<int64_t>(g, int64_t(format.group_bits.size()) - 1))]);
    };
    for (int64_t run_start = 0; run_start < groups;) {
        int64_t run_end = run_start + 1;
        while (run_end < groups && width(run_end) == width(run_start)) ++run_end;
        const int64_t units = std::max<int64_t>(1, (run_end - run_start) / group_unit);
        const int64_t parts = std::min<int64_t>(k_splits, units);
        for (int64_t s = 0; s < parts; ++s) {
            const int64_t first = run_start + s * units / parts * group_unit;
            const int64_t end = s + 1 == parts ? run_end : run_start + (s + 1) * units / parts * group_unit;
            passes.push_back({PassKind::Product, first, end, width(run_start)});
        }
        run_start = run_end;
    }
    if (format.low_rank.present()) passes.push_back({PassKind::LowRank, 0, 0, format.low_rank.bits});
    return passes;
}

std::string passes_text(const std::vector<Pass>& passes) {
    std::string text;
    for (const Pass& p : passes) {
        if (!text.empty()) text += ',';
        switch (p.kind) {
            case PassKind::Gather: text += "gather"; break;
            case PassKind::Product: text += concat("product[", p.first_group, ":", p.end_group, ")q", p.bits); break;
            case PassKind::LowRank: text += concat("low_rank[", p.bits == 16 ? "f16" : concat("q", p.bits), "]"); break;
        }
    }
    return text;
}

void gather_row(const int32_t* row_order, int64_t k, const float* src, float* dst) {
    for (int64_t r = 0; r < k; ++r) dst[r] = src[row_order[r]];
}

bool has_gather(const std::vector<Pass>& passes) {
    return std::any_of(passes.begin(), passes.end(), [](const Pass& p) { return p.kind == PassKind::Gather; });
}

}  // namespace qjit
