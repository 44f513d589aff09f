#include "tuner/search_space.hpp"

#include <algorithm>

#include "format/quantized_matrix.hpp"

namespace qjit {

namespace {

constexpr int kMaxColumnVectors = 8;
constexpr int kRowChoices[] = {1, 2, 3, 4, 6, 8, 12, 16};
constexpr int kPrefetchChoices[] = {0, 2, 4, 8, 16};
constexpr int kUnrollChoices[] = {1, 2, 4};
constexpr int kSplitChoices[] = {1, 2, 4, 8};
constexpr int kMaxTasksPerThread = 4;

bool registers_fit(const jit::CpuKernelSpec& spec) {
    return jit::vector_registers_needed(spec) <= jit::vector_registers_available(spec.isa);
}

// The mb values worth trying with `base` (tu already set).
std::vector<int> row_choices(jit::CpuKernelSpec base, int64_t batch) {
    std::vector<int> rows;
    for (int mb : kRowChoices) {
        base.tiling.mb = base.rows = mb;
        if (!registers_fit(base)) break;
        if (batch > 1 && mb <= batch) rows.push_back(mb);
        if (batch == 1) rows.assign(1, mb);  // the widest that fits
        if (mb >= batch && batch > 1) break;
    }
    return rows;
}

}  // namespace

std::vector<jit::CpuKernelSpec> enumerate_tilings(const TuningProblem& problem) {
    jit::CpuKernelSpec base = problem.kernel;
    base.tiling = jit::CpuTiling{};
    const int64_t vectors_needed = (problem.n + base.lanes() - 1) / base.lanes();
    const int64_t blocks_per_group = base.group_rows() >= 32 ? base.group_rows() / 32 : 0;
    // K splits at whole kernel steps (pairs of groups of 16, which share a block; super-blocks).
    const int64_t splittable = base.num_groups() / jit::groups_per_kernel_step(base);

    std::vector<jit::CpuKernelSpec> tilings;
    for (int tu = 1; tu <= kMaxColumnVectors && tu <= std::max<int64_t>(1, vectors_needed); ++tu) {
        base.tiling.tu = tu;
        // Second-order scales come per 16 columns, so panels hold whole such groups.
        if (base.format.second_order_scales() && base.panel_columns() % SecondOrderScales::kColumns != 0) continue;
        const int64_t panels = (problem.n + base.panel_columns() - 1) / base.panel_columns();
        for (int mb : row_choices(base, problem.batch))
            for (int prefetch : kPrefetchChoices)
                for (int ku : kUnrollChoices) {
                    if (ku > 1 && (blocks_per_group == 0 || blocks_per_group % ku != 0)) continue;
                    for (int splits : kSplitChoices) {
                        if (splits > 1 && (splits > splittable || panels * splits > kMaxTasksPerThread * problem.threads))
                            continue;
                        jit::CpuKernelSpec spec = base;
                        spec.tiling = {tu, mb, prefetch, ku, splits};
                        spec.rows = mb;
                        if (registers_fit(spec)) tilings.push_back(spec);
                    }
                }
    }
    return tilings;
}

SearchSpace build_search_space(const TuningProblem& problem, const MachineModel& machine, bool prune) {
    SearchSpace space;
    const std::vector<jit::CpuKernelSpec> tilings = enumerate_tilings(problem);
    space.enumerated = int(tilings.size());
    for (const jit::CpuKernelSpec& spec : tilings) {
        if (prune)
            if (std::optional<std::string> why = cache_budget_violation(spec, problem, machine)) {
                space.pruned.push_back({spec, std::move(*why)});
                continue;
            }
        space.ranked.push_back({spec, estimate_seconds(spec, problem, machine)});
    }
    std::stable_sort(space.ranked.begin(), space.ranked.end(),
                     [](const Candidate& a, const Candidate& b) { return a.model_seconds < b.model_seconds; });
    return space;
}

}  // namespace qjit
