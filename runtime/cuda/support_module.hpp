// The support kernels (jit/cuda/cuda_source.hpp's support_kernels_source: the act-order gather,
// the split-K casts, the compensator pass and the MLP activations), compiled once per device
// through the cubin cache and loaded for one user: a layer's executor, a compensator, an MLP.
#pragma once

#include <string>

#include "jit/cuda/cuda_tiling.hpp"
#include "runtime/cuda/cuda_driver.hpp"

namespace qjit::cuda {

class SupportModule {
public:
    SupportModule(const GpuProperties& device, const std::string& cubin_cache_dir);
    ~SupportModule();  // unloads on its device
    SupportModule(const SupportModule&) = delete;
    SupportModule& operator=(const SupportModule&) = delete;

    CUfunction function(const char* name) const;
    // The kernel of `name` for an activation type: name_f16 or name_bf16.
    CUfunction typed(const char* name, jit::cuda::ActivationType type) const;

private:
    int ordinal_;
    CUmodule module_ = nullptr;
};

// Threads per block of the support kernels' launches (one thread per element, or a warp per
// element where the kernel says so).
inline constexpr unsigned kSupportThreads = 256;

}  // namespace qjit::cuda
