// The tilings the tuner may pick for a problem: every combination of the knobs that the kernel's
// registers allow, the cache budgets of the performance model, and the model's ranking.
#pragma once

#include <string>
#include <vector>

#include "tuner/performance_model.hpp"

namespace qjit {

struct Candidate {
    jit::CpuKernelSpec spec;   // rows == tiling.mb
    double model_seconds = 0;  // estimate_seconds()
};

struct SearchSpace {
    std::vector<Candidate> ranked;  // what survives, fastest estimate first
    struct Pruned {
        jit::CpuKernelSpec spec;
        std::string why;
    };
    std::vector<Pruned> pruned;  // what a cache budget discarded
    int enumerated = 0;          // register-valid tilings before the cache budgets
};

// Every tiling whose registers fit: tu 1-8 column vectors; mb from 1, 2, 3, 4, 6, 8, 12, 16 up to
// the batch (at batch 1 only the widest mb that fits is taken: a one-row call runs the same code
// whatever mb is); prefetch 0, 2, 4, 8 or 16 blocks; k-unroll 1, 2 or 4 where it divides a group;
// K-split 1, and 2, 4, 8 while panels x parts stay within four tasks per thread.
std::vector<jit::CpuKernelSpec> enumerate_tilings(const TuningProblem& problem);

// enumerate_tilings() split by the cache budgets (when `prune`; else all kept) and ranked.
SearchSpace build_search_space(const TuningProblem& problem, const MachineModel& machine, bool prune = true);

}  // namespace qjit
