// GPU tilings in the same tuner as the CPU's: a kernel key per format, shape and batch bucket, a
// performance model that ranks the tilings a device can run; the timed search is the tuner's own
// (tuner/timed_search.hpp), with candidates timed by CUDA events on the real layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/cuda/cuda_tiling.hpp"
#include "tuner/gpu_properties.hpp"

namespace qjit {

// "q4g128_asym_cuda_f16_sm90 K=4096 N=11008 m=16": the database key of a CUDA layer's tiling.
// `format` has its rows set to the batch bucket; the kernel kind is the tiling's, not the key's.
std::string cuda_kernel_key(const jit::cuda::CudaKernelSpec& format, int64_t n);

// The search space: every tiling the generator accepts for `spec`'s format and kind (GEMV when
// spec.rows <= 8, else GEMM), before the device's shared-memory limit.
std::vector<jit::cuda::CudaTiling> enumerate_cuda_tilings(const jit::cuda::CudaKernelSpec& spec);

// Every tiling the device can run for the format's bucket, best predicted first.
std::vector<jit::cuda::CudaTiling> ranked_cuda_tilings(const jit::cuda::CudaKernelSpec& format, int64_t n,
                                                        const GpuProperties& device);

// Candidates of one structure (kernel kind, tile or columns per warp) differ only in pipeline
// depth, split-K or loads in flight: timed_search screens one of each structure first.
std::string cuda_tiling_structure(const jit::cuda::CudaTiling& tiling);

}  // namespace qjit
