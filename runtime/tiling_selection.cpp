#include "runtime/tiling_selection.hpp"

#include <chrono>
#include <limits>

#include "runtime/candidate_bench.hpp"
#include "runtime/error.hpp"
#include "tuner/cpu_tiling.hpp"
#include "tuner/hardware_probe.hpp"
#include "tuner/search_space.hpp"
#include "tuner/timed_search.hpp"

namespace qjit {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The model's ranking; pruned by the cache budgets unless `prune` is false or nothing survives them.
SearchSpace ranked_space(const TuningProblem& problem, bool prune) {
    const MachineModel machine = MachineModel::of(probe_cpu());
    SearchSpace space = build_search_space(problem, machine, prune);
    if (space.ranked.empty()) space = build_search_space(problem, machine, false);
    require(!space.ranked.empty(), "no tiling fits the registers for ", kernel_key(problem));
    return space;
}

// The record's tiling, or nothing (with a warning) when this build cannot use it.
std::optional<jit::CpuKernelSpec> spec_from_record(const TuningProblem& problem, const TuningRecord& record,
                                                   std::string& warning) {
    try {
        return with_tiling_text(problem.format, record.tiling);
    } catch (const Error& e) {
        warning = concat("tuning database record for '", record.kernel_key, "' ignored: ", e.what());
        return std::nullopt;
    }
}

// A forced tiling that names only some knobs takes the others from the best-ranked candidate
// that agrees with the knobs it names; knobs outside the search space go on the model's first pick.
jit::CpuKernelSpec forced_spec(const TuningProblem& problem, const std::string& text) {
    const SearchSpace space = ranked_space(problem, true);
    for (const Candidate& candidate : space.ranked) {
        try {
            if (with_tiling_text(candidate.spec, text).tiling == candidate.spec.tiling) return candidate.spec;
        } catch (const Error&) {  // malformed or unusable here: the fallback below reports it
        }
    }
    return with_tiling_text(space.ranked.front().spec, text);
}

TilingChoice searched(qjit_context& context, const TuningProblem& problem, Clock::time_point start) {
    const bool exhaustive = context.tuning_mode == QJIT_TUNING_EXHAUSTIVE;
    const SearchSpace space = ranked_space(problem, !exhaustive);
    TilingChoice choice;
    choice.source = QJIT_TILING_SEARCHED;
    choice.ranked = int(space.ranked.size());
    CandidateBench bench(problem, space.ranked, *context.pool);
    const double budget_left = exhaustive ? std::numeric_limits<double>::infinity()
                                          : context.tuning_budget_ms * 1e-3 - ms_since(start) * 1e-3;
    const SearchResult result = timed_search(
        space.ranked, [&](const jit::CpuKernelSpec& spec) { return bench.make_run(spec); }, budget_left);
    choice.spec = result.best.spec;
    choice.timed = result.timed;
    choice.measured_us = result.measured.median_seconds * 1e6;

    TuningRecord record;
    record.fingerprint = probe_cpu().fingerprint;
    record.kernel_key = kernel_key(problem);
    record.tiling = tiling_text(result.best.spec.tiling);
    record.time_us = choice.measured_us;
    record.gbps = double(bench.weight_bytes(result.best.spec)) / result.measured.median_seconds * 1e-9;
    record.date = utc_timestamp();
    context.tuned[record.kernel_key] = record;
    try {
        if (TuningDb* db = tuning_database(context)) db->store(record);
    } catch (const Error& e) {
        choice.warning = concat("tuning result not stored: ", e.what());
    }
    return choice;
}

}  // namespace

const char* tiling_source_name(qjit_tiling_source source) {
    switch (source) {
        case QJIT_TILING_PORTABLE: return "portable";
        case QJIT_TILING_FORCED: return "forced";
        case QJIT_TILING_DATABASE: return "database hit";
        case QJIT_TILING_CONTEXT: return "context hit";
        case QJIT_TILING_SEARCHED: return "database miss, searched";
        case QJIT_TILING_MODEL: return "database miss, model pick (budget 0)";
        default: return "unknown";
    }
}

TilingChoice choose_tiling(qjit_context& context, const QuantParams& params) {
    const auto start = Clock::now();
    TilingChoice choice;
    const std::optional<jit::CpuKernelSpec> format = cpu_kernel_format(context.isa, context.activations, params);
    if (!format) return choice;
    const TuningProblem problem{*format, params.n, batch_bucket(context.tuning_batch), context.num_threads};
    const std::string key = kernel_key(problem);

    auto finish = [&](TilingChoice c) {
        c.kernel_key = key;
        c.tiling = tiling_text(c.spec->tiling);
        c.tuning_ms = ms_since(start);
        return c;
    };
    if (!context.tiling.empty()) {
        choice.source = QJIT_TILING_FORCED;
        choice.spec = forced_spec(problem, context.tiling);
        return finish(choice);
    }

    std::lock_guard lock(context.tuning_mutex);
    if (auto it = context.tuned.find(key); it != context.tuned.end())
        if ((choice.spec = spec_from_record(problem, it->second, choice.warning))) {
            choice.source = QJIT_TILING_CONTEXT;
            choice.measured_us = it->second.time_us;
            return finish(choice);
        }
    TuningDb* db = nullptr;
    try {
        const bool opens_now = !context.tuning_db;
        db = tuning_database(context);
        if (db && opens_now) choice.warning = db->warning();  // reported by the layer that read the file
    } catch (const Error& e) {
        choice.warning = concat("tuning database not used: ", e.what());
        context.tuning_db_path.clear();  // do not try again for every layer
    }
    if (db && context.tuning_mode == QJIT_TUNING_DEFAULT)
        if (std::optional<TuningRecord> record = db->find(probe_cpu().fingerprint, key))
            if ((choice.spec = spec_from_record(problem, *record, choice.warning))) {
                choice.source = QJIT_TILING_DATABASE;
                choice.measured_us = record->time_us;
                context.tuned[key] = *record;
                return finish(choice);
            }
    if (context.tuning_budget_ms == 0 && context.tuning_mode == QJIT_TUNING_DEFAULT) {
        choice.source = QJIT_TILING_MODEL;
        choice.spec = ranked_space(problem, true).ranked.front().spec;
        return finish(choice);
    }
    std::string warning = std::move(choice.warning);
    choice = searched(context, problem, start);
    if (choice.warning.empty()) choice.warning = std::move(warning);
    return finish(choice);
}

}  // namespace qjit
