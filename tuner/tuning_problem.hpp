// What the tuner tunes for: a kernel format, the layer's width, the activation rows it is timed
// at and the threads it runs on. Its kernel key names it in the tuning database.
#pragma once

#include <cstdint>
#include <string>

#include "jit/x86/cpu_kernel.hpp"

namespace qjit {

struct TuningProblem {
    jit::CpuKernelSpec kernel;  // what the kernel computes, its format included; its tiling is ignored
    int64_t n = 0;              // columns of the layer
    int64_t batch = 1;          // activation rows per call (a batch bucket)
    int threads = 1;            // threads a forward runs on
};

// The sub-problem a budgeted search times candidates on: the same kernel, K, batch and threads,
// but only as many columns as give each thread kSliceBytesPerThread of weights, at least
// kSliceColumnsPerThread, rounded up to kSliceColumnStep per thread so that panels of every
// power-of-two width spread evenly. The whole problem when that is no smaller. Timing a slice
// instead of a whole 70B-sized layer is what lets a 300 ms budget time dozens of candidates.
inline constexpr int64_t kSliceBytesPerThread = int64_t(2) << 20;  // twice a 1 MiB L2: streams from memory
inline constexpr int64_t kSliceColumnsPerThread = 256;             // two panels of the widest tiling
inline constexpr int64_t kSliceColumnStep = 128;                   // the widest panel
TuningProblem timing_slice(const TuningProblem& problem);

// How much longer a forward of `spec` takes on `whole` than on its slice: the ratio of the tasks
// (panels x K parts) the busiest thread runs, since tasks are spread dynamically and cost alike.
double slice_time_factor(const jit::CpuKernelSpec& spec, const TuningProblem& whole, const TuningProblem& slice);

// The bucket tilings are tuned and stored for: the next power of two, at most 64.
int64_t batch_bucket(int64_t rows);

// "q4g128_asym_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2".
std::string kernel_key(const TuningProblem& problem);

}  // namespace qjit
