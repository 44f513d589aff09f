#include "tuner/tuning_problem.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace qjit {

int64_t batch_bucket(int64_t rows) {
    int64_t bucket = 1;
    while (bucket < rows && bucket < 64) bucket *= 2;
    return bucket;
}

TuningProblem timing_slice(const TuningProblem& problem) {
    const WeightFormat& f = problem.kernel.format;
    // Bytes of one column: its codes plus a scale and a zero point per group (an upper bound).
    const int64_t column_bytes = (f.k * f.bits + 7) / 8 + problem.kernel.num_groups() * 5;
    const int64_t per_thread = std::max(kSliceColumnsPerThread, (kSliceBytesPerThread + column_bytes - 1) / column_bytes);
    TuningProblem slice = problem;
    slice.n = std::min(problem.n, (per_thread + kSliceColumnStep - 1) / kSliceColumnStep * kSliceColumnStep * problem.threads);
    return slice;
}

double slice_time_factor(const jit::CpuKernelSpec& spec, const TuningProblem& whole, const TuningProblem& slice) {
    auto busiest_thread_tasks = [&](const TuningProblem& problem) {
        const int64_t panels = (problem.n + spec.panel_columns() - 1) / spec.panel_columns();
        return (panels * spec.tiling.k_splits + problem.threads - 1) / problem.threads;
    };
    return double(busiest_thread_tasks(whole)) / double(busiest_thread_tasks(slice));
}

std::string kernel_key(const TuningProblem& problem) {
    return concat(jit::kernel_family_name(problem.kernel), " K=", problem.kernel.format.k, " N=", problem.n,
                  " m=", problem.batch, " threads=", problem.threads);
}

}  // namespace qjit
