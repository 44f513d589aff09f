// The compensator pass of a layer stored as Wq + U V (runtime/low_rank_pass.hpp) on the CUDA
// device: y += (x U) V, enqueued on the product's stream after it.
//
// Factors stored as codes (8 or 3 bits) are inner layers of per-column symmetric formats, which
// the generated CUDA kernels run like any layer, tuned into the same database: x U runs on U's
// inner layer, V's component scales multiply x U in place, (x U) V runs on V's inner layer into a
// scratch buffer that one more small kernel adds to y. fp16 factors run on two small kernels of
// their own: x U in fp32 (a warp per element), then y += (x U) V (a thread per element).
// Every support kernel is in jit/cuda/cuda_source.hpp (support_kernels_source). The pass is the
// CUDA backend's own: its inner layers are CUDA layers made from the factors
// (format/low_rank.hpp), tuned like any layer.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "jit/cuda/cuda_tiling.hpp"
#include "runtime/cuda/cuda_driver.hpp"
#include "runtime/cuda/support_module.hpp"

struct qjit_context;

namespace qjit {
struct LowRankFactors;
}

namespace qjit::cuda {

class CudaLayer;

class CudaLowRank {
public:
    // Makes the inner layers of factors stored as codes on the context's device, or uploads the
    // fp16 factors; and V's scales. n: the layer's output columns.
    CudaLowRank(qjit_context& context, const LowRankFactors& factors, int64_t n);
    ~CudaLowRank();
    CudaLowRank(const CudaLowRank&) = delete;
    CudaLowRank& operator=(const CudaLowRank&) = delete;

    // y (m x N) += (x U) V, x the layer's activations (m x K, row-major, the original row order).
    // Inner layers pick their tiling for m's bucket on first use, as any CUDA layer does.
    void add(CUdeviceptr x, CUdeviceptr y, int64_t m, jit::cuda::ActivationType type, CUstream stream) const;

private:
    void add_coded(CUdeviceptr x, CUdeviceptr y, int64_t m, jit::cuda::ActivationType type, CUstream stream) const;
    void add_f16(CUdeviceptr x, CUdeviceptr y, int64_t m, jit::cuda::ActivationType type, CUstream stream) const;

    GpuProperties device_;
    int64_t k_ = 0, n_ = 0;
    int rank_ = 0, bits_ = 0;
    std::unique_ptr<CudaLayer> u_layer_, v_layer_;  // bits 8, 3: the inner layers
    DeviceBuffer v_scales_;     // bits 8, 3: fp32, one per component
    DeviceBuffer ut_, v_;       // bits 16: U transposed (rank x K) and V (rank x N), fp16
    std::unique_ptr<SupportModule> support_;

    mutable std::mutex mutex_;          // guards the scratch buffers: one forward at a time per layer
    mutable DeviceBuffer t_, product_;  // x U (m x rank) and, for coded factors, (x U) V (m x N)
};

}  // namespace qjit::cuda
