#include "runtime/cpu/cpu_tiling_choice.hpp"

#include <algorithm>
#include <memory>

#include "base/error.hpp"
#include "runtime/cpu/candidate_bench.hpp"
#include "jit/x86/cpu_tiling.hpp"
#include "tuner/hardware_probe.hpp"
#include "tuner/search_space.hpp"

namespace qjit {

namespace {

// The x86 JIT as the tuner sees it: tilings of one problem, ranked by the performance model and
// timed on synthetic weights (runtime/cpu/candidate_bench.hpp). A budgeted search times each
// candidate on a slice of the layer's columns (timing_slice_columns) and scales its time to the
// whole layer (slice_time_factor), so that times and GB/s are the layer's; the exhaustive search
// times the whole layer.
class CpuTuningTarget final : public TuningTarget {
public:
    CpuTuningTarget(const TuningProblem& problem, ThreadPool& pool, bool whole_layer)
        : problem_(problem), whole_layer_(whole_layer), pool_(pool) {}

    std::string kernel_key() const override { return qjit::kernel_key(problem_); }
    std::string fingerprint() const override { return probe_cpu().fingerprint; }

    std::vector<RankedTiling> rank(bool prune) override {
        candidates_ = ranked_space(prune).ranked;
        std::vector<RankedTiling> ranked;
        for (const Candidate& c : candidates_)
            ranked.push_back({tiling_text(c.spec.tiling), concat("tu", c.spec.tiling.tu, "mb", c.spec.tiling.mb)});
        return ranked;
    }

    std::string accept(const std::string& text) override { return tiling_text(spec(text).tiling); }

    // Knobs left out take the best-ranked candidate that agrees with the knobs given; knobs
    // outside the search space go on the model's first pick.
    std::string complete_forced(const std::string& text) override {
        const SearchSpace space = ranked_space(true);
        for (const Candidate& candidate : space.ranked) {
            try {
                if (with_tiling_text(candidate.spec, text).tiling == candidate.spec.tiling)
                    return tiling_text(candidate.spec.tiling);
            } catch (const Error&) {  // malformed or unusable here: the fallback below reports it
            }
        }
        return tiling_text(with_tiling_text(space.ranked.front().spec, text).tiling);
    }

    TimedCall timed_call(const RankedTiling& candidate) override {
        const jit::CpuKernelSpec timed = spec(candidate.text);
        const int64_t columns = timed_columns(timed);
        const double whole_per_timed = slice_time_factor(timed, problem_, columns);
        return [call = timed_on_host(bench().make_run(timed, columns)), whole_per_timed] { return call() * whole_per_timed; };
    }

    double weight_bytes(const std::string& text) override { return double(forward_weight_bytes(spec(text), problem_.n)); }

    jit::CpuKernelSpec spec(const std::string& text) const { return with_tiling_text(problem_.kernel, text); }

private:
    int64_t timed_columns(const jit::CpuKernelSpec& spec) const {
        return whole_layer_ ? problem_.n : timing_slice_columns(spec, problem_);
    }

    // Synthetic weights sized for the last ranking, made when the first candidate is timed.
    CandidateBench& bench() {
        if (!bench_) {
            int64_t columns = 0;
            for (const Candidate& c : candidates_) columns = std::max(columns, timed_columns(c.spec));
            bench_ = std::make_unique<CandidateBench>(problem_, candidates_, columns, pool_);
        }
        return *bench_;
    }

    // The model's ranking; pruned by the cache budgets unless `prune` is false or nothing survives them.
    SearchSpace ranked_space(bool prune) const {
        const MachineModel machine = MachineModel::of(probe_cpu());
        SearchSpace space = build_search_space(problem_, machine, prune);
        if (space.ranked.empty()) space = build_search_space(problem_, machine, false);
        require(!space.ranked.empty(), "no tiling fits the registers for ", qjit::kernel_key(problem_));
        return space;
    }

    TuningProblem problem_;
    bool whole_layer_;  // time candidates on the whole layer, not on slices
    ThreadPool& pool_;
    std::vector<Candidate> candidates_;      // the last ranking (sizes the synthetic weights)
    std::unique_ptr<CandidateBench> bench_;
};

}  // namespace

TilingChoice choose_tiling(qjit_context& context, const QuantParams& params,
                           std::optional<qjit_activations> activations) {
    TilingChoice choice;
    const std::optional<jit::CpuKernelSpec> format =
        jit::cpu_kernel_format(context.isa, activations.value_or(context.activations), params);
    if (!format) return choice;
    const TuningProblem problem{*format, params.n, batch_bucket(context.tuning_batch), context.num_threads};
    CpuTuningTarget target(problem, *context.pool, context.tuning_mode == QJIT_TUNING_EXHAUSTIVE);
    const TuningPolicy policy{context.tiling, context.tuning_mode, context.tuning_budget_ms, true};
    static_cast<TuningOutcome&>(choice) = tune(target, policy, context.tuning);
    choice.spec = target.spec(choice.tiling);
    return choice;
}

}  // namespace qjit
