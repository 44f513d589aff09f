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

// The columns a budgeted search times a candidate on: a slice of the layer with the same kernel,
// K, batch and threads, in which every thread runs the same number of whole panels of the
// candidate's width: enough for kSliceBytesPerThread of weights (half that above batch
// kSliceFullBytesBatch, where each byte costs several times the time and calls are compute-bound)
// and at least kSliceColumnsPerThread columns. The whole layer's n when that is no smaller.
// Timing a slice instead of a whole 70B-sized layer is what lets a 300 ms budget time dozens of
// candidates.
inline constexpr int64_t kSliceBytesPerThread = int64_t(4) << 20;  // 4x a 1 MiB L2: streams from memory
inline constexpr int64_t kSliceFullBytesBatch = 4;
inline constexpr int64_t kSliceColumnsPerThread = 128;             // a panel of the widest tiling
int64_t timing_slice_columns(const jit::CpuKernelSpec& spec, const TuningProblem& problem);

// How much longer a forward of `spec` takes on the whole problem than on `slice_columns` of it:
// the ratio of the tasks (panels x K parts) the busiest thread runs, since tasks are spread
// dynamically and cost alike. The whole layer's padding and uneven spread count in full.
double slice_time_factor(const jit::CpuKernelSpec& spec, const TuningProblem& problem, int64_t slice_columns);

// The bucket tilings are tuned and stored for: the next power of two, at most `largest` (64 for the
// CPU's kernels, whose time grows with the rows past it alike for every tiling; the GPU's kernel
// kinds and tiles change up to kLargestCudaBatchBucket).
inline constexpr int64_t kLargestCpuBatchBucket = 64, kLargestCudaBatchBucket = 512;
int64_t batch_bucket(int64_t rows, int64_t largest = kLargestCpuBatchBucket);
inline int64_t cuda_batch_bucket(int64_t rows) { return batch_bucket(rows, kLargestCudaBatchBucket); }

// "q4g128_asym_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2".
std::string kernel_key(const TuningProblem& problem);

}  // namespace qjit
