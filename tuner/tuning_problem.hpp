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

// The bucket tilings are tuned and stored for: the next power of two, at most 64.
int64_t batch_bucket(int64_t rows);

// "q4g128_asym_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2".
std::string kernel_key(const TuningProblem& problem);

}  // namespace qjit
