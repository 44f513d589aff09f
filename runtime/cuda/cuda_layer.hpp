// A layer on a CUDA device: at creation (in a context with a CUDA device) its weights are uploaded and
// the tiling for the context's activation type and tuning batch is chosen by the tuner's one
// sequence (tuner/tuning_sequence.hpp: forced, this context's earlier choice, the database, the
// model's pick or a timed search within the budget); other batch buckets and types get theirs on first use, untimed (database
// or model).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/context.hpp"
#include "tuner/tuning_sequence.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/cuda_low_rank.hpp"
#include "format/low_rank.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/layer_backend.hpp"

namespace qjit::cuda {

struct CudaTilingChoice : TuningOutcome {
    double compile_ms = 0;  // NVRTC for the chosen tiling (0 on a cubin cache hit)
};

// The CUDA backend's layer: the weights in the device layouts, the compensator's pass on the
// device, and a tiling per (activation type, batch bucket).
class CudaLayer final : public BackendLayer {
public:
    // Prepares `matrix` on the context's device and tunes the context's default bucket. Which
    // formats CUDA runs is jit::cuda::unsupported_reason, which a layer asks first
    // (runtime/layer_backend.hpp); this throws QJIT_ERROR_UNSUPPORTED for those it refuses all the
    // same. `compensator` (null for none): its pass runs after the product.
    CudaLayer(qjit_context& context, QuantizedMatrix matrix, const LowRankFactors* compensator);
    ~CudaLayer() override;

    // y = x W (+ (x U) V with a compensator): fp16 or bf16 tensors in device memory, enqueued on
    // `stream` (a CUstream); the tilings of m's bucket are chosen first where missing.
    void run(const ConstTensorView& x, const TensorView& y, void* stream = nullptr) const override;
    std::string kernel_name() const override;
    std::string kernel_fields() const override;
    int64_t weight_bytes() const override { return executor_->weight_bytes(); }
    void evict() const override {}  // timing flushes the device's L2 itself

    // The choice serving (activations, bucket of m rows), made and installed now if missing.
    const CudaTilingChoice& tiling_for(jit::cuda::ActivationType activations, int64_t m) const;
    // The median time of a forward over `repeats` calls, L2 flushed before each.
    double time_forward_us(int64_t m, jit::cuda::ActivationType type, int repeats) const;
    // The choices made so far, by type and bucket (a copy: other threads may add to them).
    std::map<std::pair<jit::cuda::ActivationType, int64_t>, CudaTilingChoice> choices() const;

    CudaExecutor& executor() const { return *executor_; }
    const CudaLowRank* low_rank() const { return low_rank_.get(); }

private:
    const CudaTilingChoice& choose_and_install(jit::cuda::ActivationType type, int64_t m, bool may_search) const;

    qjit_context& context_;
    std::unique_ptr<CudaExecutor> executor_;
    std::unique_ptr<CudaLowRank> low_rank_;  // null: no compensator
    mutable std::mutex mutex_;               // guards choices_
    mutable std::map<std::pair<jit::cuda::ActivationType, int64_t>, CudaTilingChoice> choices_;  // by type and bucket
};

// The kernels' activation type of a C dtype (F16 or BF16; others: an invalid-argument Error).
jit::cuda::ActivationType activation_type(qjit_dtype dtype);

// The layer as a unique_ptr (what a qjit_linear holds).
std::unique_ptr<CudaLayer> make_cuda_layer(qjit_context& context, QuantizedMatrix matrix,
                                           const LowRankFactors* compensator = nullptr);

}  // namespace qjit::cuda
