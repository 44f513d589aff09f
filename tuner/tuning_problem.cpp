#include "tuner/tuning_problem.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace qjit {

int64_t batch_bucket(int64_t rows, int64_t largest) {
    int64_t bucket = 1;
    while (bucket < rows && bucket < largest) bucket *= 2;
    return bucket;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t busiest_thread_tasks(const jit::CpuKernelSpec& spec, int64_t n, int threads) {
    return ceil_div(ceil_div(n, spec.panel_columns()) * spec.tiling.ksplit, threads);
}

}  // namespace

int64_t timing_slice_columns(const jit::CpuKernelSpec& spec, const TuningProblem& problem) {
    const WeightFormat& f = spec.format;
    const int64_t panel = spec.panel_columns();
    // Bytes of one panel: its codes plus a scale and a zero point per group and column (an upper bound).
    const int64_t panel_bytes = panel * (ceil_div(f.k * f.bits, 8) + spec.num_groups() * 5);
    const int64_t bytes_per_thread = problem.batch > kSliceFullBytesBatch ? kSliceBytesPerThread / 2 : kSliceBytesPerThread;
    const int64_t panels_per_thread =
        std::max(ceil_div(kSliceColumnsPerThread, panel), ceil_div(bytes_per_thread, panel_bytes));
    return std::min(problem.n, panels_per_thread * panel * problem.threads);
}

double slice_time_factor(const jit::CpuKernelSpec& spec, const TuningProblem& problem, int64_t slice_columns) {
    return double(busiest_thread_tasks(spec, problem.n, problem.threads)) /
           double(busiest_thread_tasks(spec, slice_columns, problem.threads));
}

std::string kernel_key(const TuningProblem& problem) {
    return concat(jit::kernel_family_name(problem.kernel), " K=", problem.kernel.format.k, " N=", problem.n,
                  " m=", problem.batch, " threads=", problem.threads);
}

}  // namespace qjit
