// The compensator pass of a layer stored as Wq + U V (runtime/low_rank_pass.hpp) on the CUDA
// device: y += (x U) V, enqueued on the product's stream after it.
//
// Factors stored as codes (8 or 3 bits) are inner layers of per-column symmetric formats, which
// the generated CUDA kernels run like any layer, tuned into the same database: x U runs on U's
// inner layer, V's component scales multiply x U in place, (x U) V runs on V's inner layer into a
// scratch buffer that one more small kernel adds to y. fp16 factors run on two small kernels of
// their own: x U in fp32 (a warp per element), then y += (x U) V (a thread per element).
// Every support kernel is in jit/cuda/cuda_source.hpp (support_kernels_source).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "jit/cuda/cuda_tiling.hpp"
#include "runtime/cuda/cuda_driver.hpp"

struct qjit_context;

namespace qjit {
class LowRankPass;
}

namespace qjit::cuda {

class CudaLowRank {
public:
    // Uploads what the pass needs beyond the inner layers' own CUDA sides (which their creation in
    // this context made): V's scales, or the fp16 factors. `pass` must outlive this object.
    CudaLowRank(const GpuProperties& device, const LowRankPass& pass, const std::string& cubin_cache_dir);
    ~CudaLowRank();
    CudaLowRank(const CudaLowRank&) = delete;
    CudaLowRank& operator=(const CudaLowRank&) = delete;

    // y (m x N) += (x U) V, x the layer's activations (m x K, row-major, the original row order).
    // Inner layers pick their tiling for m's bucket on first use, as any layer's CUDA side does.
    void add(qjit_context& context, CUdeviceptr x, CUdeviceptr y, int64_t m, jit::cuda::ActivationType type,
             CUstream stream);

private:
    void add_coded(qjit_context& context, CUdeviceptr x, CUdeviceptr y, int64_t m, jit::cuda::ActivationType type,
                   CUstream stream);
    void add_f16(CUdeviceptr x, CUdeviceptr y, int64_t m, jit::cuda::ActivationType type, CUstream stream);
    CUfunction support(const char* name, jit::cuda::ActivationType type) const;

    const LowRankPass& pass_;
    GpuProperties device_;
    int64_t k_ = 0, n_ = 0;
    int rank_ = 0, bits_ = 0;
    DeviceBuffer v_scales_;     // bits 8, 3: fp32, one per component
    DeviceBuffer ut_, v_;       // bits 16: U transposed (rank x K) and V (rank x N), fp16
    CUmodule support_ = nullptr;

    std::mutex mutex_;          // guards the scratch buffers: one forward at a time per layer
    DeviceBuffer t_, product_;  // x U (m x rank) and, for coded factors, (x U) V (m x N)
};

}  // namespace qjit::cuda
