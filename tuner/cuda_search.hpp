// GPU tilings in the same tuner as the CPU's: a kernel key per format, shape and batch bucket, a
// performance model that ranks the tilings a device can run, and a timed search over the best
// ranked within a budget (the caller times a candidate with CUDA events on the real layer).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "jit/cuda/cuda_tiling.hpp"
#include "runtime/cuda_driver.hpp"

namespace qjit {

// "cuda_q4g128_asym_f16_sm90 K=4096 N=11008 m=16": the database key of a CUDA layer's tiling.
// `format` has its rows set to the batch bucket; the kernel kind is the tiling's, not the key's.
std::string cuda_kernel_key(const jit::cuda::CudaKernelSpec& format, int64_t n);

// Every tiling the device can run for the format's bucket, best predicted first.
std::vector<jit::cuda::CudaTiling> ranked_cuda_tilings(const jit::cuda::CudaKernelSpec& format, int64_t n,
                                                        const cuda::DeviceProperties& device);

struct CudaSearchResult {
    jit::cuda::CudaTiling best;
    double best_us = 0;
    int timed = 0, ranked = 0;
    double seconds = 0;
};

// Times ranked candidates in order (time_us(tiling) returns a median in microseconds) until the
// budget is spent, at least 2 and at most `max_candidates` of them, and returns the fastest.
CudaSearchResult timed_cuda_search(const std::vector<jit::cuda::CudaTiling>& ranked,
                                   const std::function<double(const jit::cuda::CudaTiling&)>& time_us,
                                   double budget_ms, int max_candidates);

}  // namespace qjit
