#include "runtime/cuda/cuda_layer.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <thread>

#include "base/error.hpp"
#include "tuner/cuda_search.hpp"
#include "tuner/tuning_problem.hpp"

namespace qjit::cuda {

using jit::cuda::ActivationType;
using jit::cuda::CudaKernelSpec;
using jit::cuda::CudaTiling;

namespace {

// A CUDA layer's kernel for one activation type and batch bucket, as the tuner sees it: tilings
// that fit the device, ranked by the GPU model, timed with events on the layer's own weights.
class CudaTuningTarget final : public TuningTarget {
public:
    CudaTuningTarget(CudaExecutor& executor, ActivationType type, int64_t m)
        : executor_(executor), type_(type), m_(m), format_(executor.format(type, batch_bucket(m))) {}

    std::string kernel_key() const override { return cuda_kernel_key(format_, executor_.n()); }
    std::string fingerprint() const override { return executor_.device().fingerprint(); }

    std::vector<RankedTiling> rank(bool) override {
        std::vector<RankedTiling> ranked;
        for (const CudaTiling& t : ranked_cuda_tilings(format_, executor_.n(), executor_.device()))
            ranked.push_back({jit::cuda::tiling_text(t), cuda_tiling_structure(t)});
        if (ranked.empty())
            fail(QJIT_ERROR_UNSUPPORTED, "no CUDA tiling of ", kernel_key(), " fits ", executor_.device().name);
        compile_first_screened(ranked);
        return ranked;
    }

    // The text's tiling when it parses, is valid for the format and fits the device.
    std::string accept(const std::string& text) override {
        CudaKernelSpec spec = format_;
        spec.tiling = jit::cuda::parse_tiling(text, format_.tiling);
        require(jit::cuda::kind_serves(spec.tiling.kind, spec.rows), "a ", jit::cuda::tiling_text(spec.tiling),
                " tiling for ", spec.rows, " rows, which that kernel kind does not serve");
        jit::cuda::check_spec(spec);
        require(jit::cuda::fits_device(spec, executor_.device().shared_memory_per_block_optin),
                "needs more shared memory than ", executor_.device().name, " offers");
        return jit::cuda::tiling_text(spec.tiling);
    }

    std::string complete_forced(const std::string& text) override {
        CudaKernelSpec forced = format_;
        try {
            forced.tiling = jit::cuda::parse_tiling(text, format_.tiling);
            jit::cuda::check_spec(forced);
        } catch (const Error& e) {  // names the variable and its text, which the generator's message does not
            fail(QJIT_ERROR_INVALID_ARGUMENT, "QJIT_CUDA_TILING '", text, "': ", e.what());
        }
        return jit::cuda::tiling_text(forced.tiling);
    }

    TimedCall timed_call(const RankedTiling& candidate) override {
        return executor_.timed_tiling(m_, type_, jit::cuda::parse_tiling(candidate.text, format_.tiling));
    }

    double weight_bytes(const std::string&) override { return double(executor_.weight_bytes()); }

    CudaTiling tiling(const std::string& text) const { return jit::cuda::parse_tiling(text, format_.tiling); }

private:
    // NVRTC takes longer than timing a kernel: the search's first candidates (the model's best of
    // each structure, as timed_search screens them) are compiled on every core at once, which costs
    // about the wall time of the first compile alone.
    void compile_first_screened(const std::vector<RankedTiling>& ranked) const {
        const size_t cores = std::max(1u, std::thread::hardware_concurrency());
        std::set<std::string> structures;
        std::vector<CudaTiling> first;
        for (const RankedTiling& candidate : ranked)
            if (first.size() < cores && structures.insert(candidate.structure).second)
                first.push_back(tiling(candidate.text));
        executor_.compile_ahead(type_, batch_bucket(m_), first);
    }

    CudaExecutor& executor_;
    ActivationType type_;
    int64_t m_;
    CudaKernelSpec format_;  // the bucket's format; its tiling holds the kind's defaults
};

const CudaTilingChoice& choose_and_install(qjit_context& context, CudaLayer& layer, ActivationType type, int64_t m,
                                           bool may_search) {
    CudaTuningTarget target(*layer.executor, type, m);
    const TuningPolicy policy{context.cuda_tiling, context.tuning_mode, context.tuning_budget_ms, may_search};
    CudaTilingChoice choice;
    static_cast<TuningOutcome&>(choice) = tune(target, policy, context.tuning);
    choice.compile_ms = layer.executor->install(type, batch_bucket(m), target.tiling(choice.tiling)).compile_ms;
    layer.executor->release_unused_codes();  // the search may have uploaded both code layouts
    return layer.choices[{type, batch_bucket(m)}] = choice;
}

}  // namespace

std::unique_ptr<CudaLayer> make_cuda_layer(qjit_context& context, CudaExecutor::MatrixSource matrix,
                                           const LowRankPass* low_rank) {
    auto layer = std::make_unique<CudaLayer>();
    layer->executor =
        std::make_unique<CudaExecutor>(*context.gpu, std::move(matrix), context.dump_dir, context.cubin_cache_dir);
    if (low_rank) layer->low_rank = std::make_unique<CudaLowRank>(*context.gpu, *low_rank, context.cubin_cache_dir);
    std::lock_guard lock(layer->mutex);
    choose_and_install(context, *layer, context.cuda_activations, context.tuning_batch, true);
    return layer;
}

const CudaTilingChoice& cuda_tiling_for(qjit_context& context, CudaLayer& layer, ActivationType type, int64_t m) {
    std::lock_guard lock(layer.mutex);
    const auto it = layer.choices.find({type, batch_bucket(m)});
    if (it != layer.choices.end()) return it->second;
    return choose_and_install(context, layer, type, m, false);
}

void forward(qjit_context& context, CudaLayer& layer, CUdeviceptr x, CUdeviceptr y, int64_t m, ActivationType type,
             CUstream stream) {
    cuda_tiling_for(context, layer, type, m);
    layer.executor->forward(x, y, m, type, stream);
    if (layer.low_rank) layer.low_rank->add(context, x, y, m, type, stream);
}

double time_forward_us(qjit_context& context, CudaLayer& layer, int64_t m, ActivationType type, int repeats) {
    cuda_tiling_for(context, layer, type, m);
    CudaExecutor::AfterProduct compensate;
    if (layer.low_rank)
        compensate = [&](CUdeviceptr x, CUdeviceptr y, CUstream stream) {
            layer.low_rank->add(context, x, y, m, type, stream);
        };
    return layer.executor->time_forward_us(m, type, repeats, compensate);
}

}  // namespace qjit::cuda
