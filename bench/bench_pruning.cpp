// bench_pruning: does the performance model's pruning keep the measured best tiling?
//
// For three small problems, every register-valid tiling is timed cold (as the tuner times them,
// on synthetic weights). If the fastest was pruned on this machine, it and the fastest kept
// tiling are re-timed in alternation and the ratio is printed. A ratio well below 1 means the
// pruning discards a real winner here. (This was a test; it is a measurement, so it lives here.)
//
//   bench_pruning
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "runtime/cpu/candidate_bench.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "tuner/cpu_isa.hpp"
#include "jit/x86/cpu_tiling.hpp"
#include "tuner/hardware_probe.hpp"
#include "tuner/search_space.hpp"
#include "tuner/tuning_problem.hpp"

using qjit::jit::ActivationPath;

int main() {
    const qjit_isa isa = qjit::best_isa_up_to(QJIT_ISA_AVX512_VNNI);
    if (isa < QJIT_ISA_AVX2) {
        std::printf("bench_pruning: no AVX2 here; only the portable path runs\n");
        return 0;
    }
    const qjit::MachineModel machine = qjit::MachineModel::of(qjit::probe_cpu());
    const std::vector<qjit::TuningProblem> problems = {
        {qjit::jit::cpu_kernel_spec(isa, ActivationPath::Int8, 4, 512, 128), 192, 1, 1},
        {qjit::jit::cpu_kernel_spec(isa, ActivationPath::Int8, 3, 320, 64), 100, 4, 1},
        {qjit::jit::cpu_kernel_spec(isa, ActivationPath::F32, 8, 256, 32), 80, 16, 1},
    };
    qjit::ThreadPool pool(1);
    std::printf("%-52s %8s %8s %-36s %-36s %s\n", "problem", "kept", "all", "fastest", "fastest kept",
                "pruned best / kept best time");
    for (const qjit::TuningProblem& problem : problems) {
        const qjit::SearchSpace pruned = qjit::build_search_space(problem, machine, true);
        const qjit::SearchSpace all = qjit::build_search_space(problem, machine, false);
        std::set<std::string> kept;
        for (const qjit::Candidate& c : pruned.ranked) kept.insert(qjit::jit::tiling_text(c.spec.tiling));

        qjit::CandidateBench bench(problem, all.ranked, problem.n, pool);
        std::vector<qjit::TimedCall> calls;
        std::vector<double> seconds;
        for (const qjit::Candidate& c : all.ranked) {
            calls.push_back(qjit::timed_on_host(bench.make_run(c.spec, problem.n)));
            seconds.push_back(qjit::measure(calls.back(), 5).median_seconds);
        }
        size_t best = 0, best_kept = all.ranked.size();
        for (size_t i = 0; i < all.ranked.size(); ++i) {
            if (seconds[i] < seconds[best]) best = i;
            if (kept.count(qjit::jit::tiling_text(all.ranked[i].spec.tiling)) &&
                (best_kept == all.ranked.size() || seconds[i] < seconds[best_kept]))
                best_kept = i;
        }
        double ratio = 1.0;
        if (best_kept < all.ranked.size() && best != best_kept) {
            // Re-time both, interleaved, and take each one's best median.
            double pruned_s = seconds[best], kept_s = seconds[best_kept];
            for (int round = 0; round < 5; ++round) {
                pruned_s = std::min(pruned_s, qjit::measure(calls[best], 9).median_seconds);
                kept_s = std::min(kept_s, qjit::measure(calls[best_kept], 9).median_seconds);
            }
            ratio = pruned_s / kept_s;
        }
        std::printf("%-52s %8zu %8zu %-36s %-36s %.3f\n", qjit::kernel_key(problem).c_str(), pruned.ranked.size(),
                    all.ranked.size(), qjit::jit::tiling_text(all.ranked[best].spec.tiling).c_str(),
                    best_kept < all.ranked.size() ? qjit::jit::tiling_text(all.ranked[best_kept].spec.tiling).c_str() : "-",
                    ratio);
    }
}
