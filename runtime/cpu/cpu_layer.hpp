// What the CPU backends share: a layer's codes packed in panels for its kernel
// (format/packed_codes.hpp), its compensator pass, the thread pool it runs on, and the entry that
// takes fp32 rows in host memory. The portable path (runtime/cpu/portable_kernel.hpp) and the x86
// JIT (runtime/cpu/jit_layer.hpp) derive from it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "format/packed_codes.hpp"
#include "format/quantized_matrix.hpp"
#include "runtime/cpu/thread_pool.hpp"
#include "runtime/layer_backend.hpp"

namespace qjit {

class LowRankPass;

class CpuLayer : public BackendLayer {
public:
    // `params`: the layer's format and its scales and zero points as quantized, which the handle
    // holds for as long as this layer lives (the portable path reads them as they are; the JIT
    // repacks them into its own layout).
    CpuLayer(BackendKind kind, std::vector<Pass> passes, const QuantParams& params, PackedCodes codes,
             std::unique_ptr<LowRankPass> low_rank, ThreadPool& pool);
    ~CpuLayer() override;

    const QuantParams& params() const { return params_; }
    const PackedCodes& codes() const { return codes_; }
    const LowRankPass* low_rank() const { return low_rank_.get(); }
    ThreadPool& pool() const { return pool_; }

    // y (m x N) = x (m x K) * W, fp32 rows in host memory: every pass of the plan.
    virtual void forward(const float* x, int64_t m, float* y) const = 0;

    // forward, for fp32 tensors in host memory.
    void run(const ConstTensorView& x, const TensorView& y, void* stream = nullptr) const override;
    int64_t weight_bytes() const override;
    void evict() const override;

protected:
    // y += (x U) V: the compensator pass.
    void add_low_rank(const float* x, int64_t m, float* y) const;
    // Bytes of scales, zero points and outliers a forward streams beside the codes, as this
    // backend holds them; flushing them from every cache.
    virtual int64_t metadata_bytes() const = 0;
    virtual void evict_metadata() const = 0;

private:
    const QuantParams& params_;
    PackedCodes codes_;
    std::unique_ptr<LowRankPass> low_rank_;
    ThreadPool& pool_;
};

}  // namespace qjit
