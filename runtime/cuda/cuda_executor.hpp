// Runs a quantized layer on a CUDA device: its weights uploaded once (format/cuda_weights.hpp), one
// compiled kernel per activation type and batch bucket, and the small support kernels (act-order
// gather, split-K cast). The codes have two device layouts, column blocks (gemv, gemm) and
// fragment order (mma); each is uploaded when a kernel that reads it is first compiled, and
// release_unused_codes() drops one that no installed kernel reads, so a tuned layer holds its codes
// once. Of a layer's plan (runtime/layer_passes.hpp) CUDA runs the gather (a support kernel) and
// the products (one kernel, split along K by its tiling's splitk; for mixed widths, second-order
// scales and outliers, the mixed GEMV in slices of up to 8 rows, outliers included). Which tiling
// each bucket uses is decided outside (runtime/cuda/cuda_layer.hpp); this class compiles, loads,
// launches and times.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "jit/cuda/cuda_source.hpp"
#include "runtime/cuda/cuda_driver.hpp"
#include "runtime/cuda/support_module.hpp"
#include "format/cuda_weights.hpp"
#include "format/quantized_matrix.hpp"

namespace qjit::cuda {

struct CudaPlan {
    jit::cuda::CudaKernelSpec spec;  // format, bucket rows and tiling
    jit::cuda::GeneratedKernel kernel;
    cuda::CUmodule module = nullptr;
    cuda::CUfunction function = nullptr;
    double compile_ms = 0;   // NVRTC; 0 on a cubin cache hit
};

class CudaExecutor {
public:
    // The layer's matrix, unpacked again whenever a code layout has to be uploaded (it must stay
    // valid for the executor's lifetime).
    using MatrixSource = std::function<QuantizedMatrix()>;

    // Uploads the scales and zero points to `device` (made current); the codes follow with the
    // first kernel that reads them. dump_dir: write each kernel's .cu and .ptx there when compiling;
    // cubin_cache_dir: the on-disk cubin cache ("" for none).
    CudaExecutor(const GpuProperties& device, MatrixSource matrix, std::string dump_dir,
                 std::string cubin_cache_dir);
    ~CudaExecutor();
    CudaExecutor(const CudaExecutor&) = delete;
    CudaExecutor& operator=(const CudaExecutor&) = delete;

    const GpuProperties& device() const { return device_; }
    // The layer's format compiled for `activations` at `bucket` rows (tiling left default).
    jit::cuda::CudaKernelSpec format(jit::cuda::ActivationType activations, int64_t bucket) const;
    int64_t n() const { return n_; }
    // Bytes a forward streams: one layout of the codes, the scales and the zero points.
    int64_t weight_bytes() const { return weight_bytes_; }
    // Bytes of codes held on the device now (one layout, or both while a search times both kinds).
    int64_t device_code_bytes() const;
    // Frees the code layout that no installed plan reads (a later plan that needs it uploads it
    // again). Call once the plans in use are installed, never while a timed candidate is alive.
    void release_unused_codes();

    // Compiles and installs `tiling` for (activations, bucket); replaces an earlier plan.
    const CudaPlan& install(jit::cuda::ActivationType activations, int64_t bucket, const jit::cuda::CudaTiling& tiling);
    // The installed plan, or null.
    const CudaPlan* plan(jit::cuda::ActivationType activations, int64_t bucket) const;

    // y = x * W for m rows with the plan of m's bucket (which must be installed); enqueued on stream.
    void forward(cuda::CUdeviceptr x, cuda::CUdeviceptr y, int64_t m, jit::cuda::ActivationType activations,
                 cuda::CUstream stream);
    // `tiling` compiled for the occasion (unloaded with the last copy of the function): each call
    // runs one forward of m rows on random activations, after the L2 cache is overwritten, and
    // returns its seconds, timed with events (the tuner's TimedCall).
    std::function<double()> timed_tiling(int64_t m, jit::cuda::ActivationType activations,
                                         const jit::cuda::CudaTiling& tiling);
    // Compiles these tilings for (activations, bucket) into the cubin cache, in parallel (one thread
    // per core, at most one tiling per thread): a later install or timed_tiling of them only loads.
    // Compile errors are left for that later call to report.
    void compile_ahead(jit::cuda::ActivationType activations, int64_t bucket,
                       const std::vector<jit::cuda::CudaTiling>& tilings) const;
    // A pass the layer runs after the product, on the product's x, y and stream (a compensator).
    using AfterProduct = std::function<void(cuda::CUdeviceptr x, cuda::CUdeviceptr y, cuda::CUstream stream)>;
    // The median forward time with the installed plans, over `repeats` calls, L2 flushed before
    // each; `after` (when set) runs inside each timed call.
    double time_forward_us(int64_t m, jit::cuda::ActivationType activations, int repeats,
                           const AfterProduct& after = {});

private:
    CudaPlan compile(const jit::cuda::CudaKernelSpec& spec) const;
    // The device buffer of the code layout `kind` reads (mma: fragment order; empty until uploaded).
    cuda::DeviceBuffer& code_layout(jit::cuda::KernelKind kind);
    // Packs and uploads that layout if it is absent. The caller holds mutex_.
    void upload_codes_for(jit::cuda::KernelKind kind);
    void upload_metadata(const QuantizedMatrix& matrix);  // scales and zero points; the codes follow
    void upload_mixed(const QuantizedMatrix& matrix);     // the mixed GEMV's whole layout
    void launch(const CudaPlan& plan, cuda::CUdeviceptr x, cuda::CUdeviceptr y, int64_t m, cuda::CUstream stream);
    void launch_mixed(const CudaPlan& plan, cuda::CUdeviceptr x, cuda::CUdeviceptr y, int64_t m, int k_valid, int ldx,
                      cuda::CUstream stream);
    double time_us(const CudaPlan* plan, int64_t m, jit::cuda::ActivationType activations, int repeats, bool warm_up,
                   const AfterProduct& after);

    GpuProperties device_;
    jit::cuda::CudaKernelSpec format_;  // activations, rows and tiling filled per plan
    int64_t k_ = 0, n_ = 0, kp_ = 0, np_ = 0, num_groups_ = 0, weight_bytes_ = 0;
    bool act_order_ = false;
    std::string dump_dir_, cubin_cache_dir_;

    MatrixSource matrix_;
    cuda::DeviceBuffer block_codes_, fragment_codes_, scales_, zeros_, row_order_;
    // Formats with mixed widths, second-order scales or outliers (format/cuda_mixed_weights.hpp):
    // the rest of their layout; codes, fp16/fp32 scales and zero points use the members above.
    struct MixedLayout {
        bool present = false;
        cuda::DeviceBuffer group_words, scale_codes, scale2, zero2, outlier_start, outlier_rows, outlier_values;
    } mixed_;
    std::unique_ptr<cuda::SupportModule> support_;
    cuda::CUfunction gather_ = nullptr, cast_f16_ = nullptr, cast_bf16_ = nullptr;

    mutable std::mutex mutex_;  // guards plans_, the code layouts and the scratch buffers: one forward at a time per layer
    std::map<std::pair<jit::cuda::ActivationType, int64_t>, std::unique_ptr<CudaPlan>> plans_;
    cuda::DeviceBuffer gathered_, partial_, timing_x_, timing_y_, flush_;
};

}  // namespace qjit::cuda
