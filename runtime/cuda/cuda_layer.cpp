#include "runtime/cuda/cuda_layer.hpp"

#include <algorithm>
#include <set>
#include <thread>

#include "base/error.hpp"
#include "format/packed_codes.hpp"
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
        : executor_(executor), type_(type), m_(m), format_(executor.format(type, cuda_batch_bucket(m))) {}

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
        executor_.compile_ahead(type_, cuda_batch_bucket(m_), first);
    }

    CudaExecutor& executor_;
    ActivationType type_;
    int64_t m_;
    CudaKernelSpec format_;  // the bucket's format; its tiling holds the kind's defaults
};

// A compact copy of the matrix's codes (the packed panels of format/packed_codes.hpp), from which
// a code layout is made again whenever one has to be uploaded.
CudaExecutor::MatrixSource host_copy(QuantizedMatrix matrix) {
    constexpr int kPanelColumns = 64;
    auto codes = std::make_shared<const PackedCodes>(pack_codes(matrix.codes.data(), matrix.params.bits, matrix.params.k,
                                                                matrix.params.n, kPanelColumns,
                                                                block_widths(matrix.params)));
    return [params = std::move(matrix.params), codes] { return QuantizedMatrix{params, unpack_codes(*codes)}; };
}

}  // namespace

CudaLayer::CudaLayer(qjit_context& context, QuantizedMatrix matrix, const LowRankFactors* compensator)
    : BackendLayer(BackendKind::Cuda, plan_forward(matrix.params, matrix.params.num_groups(), 1)), context_(context) {
    executor_ = std::make_unique<CudaExecutor>(*context.gpu, host_copy(std::move(matrix)), context.dump_dir,
                                               context.cubin_cache_dir);
    if (compensator) low_rank_ = std::make_unique<CudaLowRank>(context, *compensator, executor_->n());
    std::lock_guard lock(mutex_);
    choose_and_install(context.cuda_activations, context.tuning_batch, true);
}

CudaLayer::~CudaLayer() = default;

const CudaTilingChoice& CudaLayer::choose_and_install(ActivationType type, int64_t m, bool may_search) const {
    CudaTuningTarget target(*executor_, type, m);
    const TuningPolicy policy{context_.cuda_tiling, context_.tuning_mode, context_.tuning_budget_ms, may_search};
    CudaTilingChoice choice;
    static_cast<TuningOutcome&>(choice) = tune(target, policy, context_.tuning);
    choice.compile_ms = executor_->install(type, cuda_batch_bucket(m), target.tiling(choice.tiling)).compile_ms;
    executor_->release_unused_codes();  // the search may have uploaded both code layouts
    return choices_[{type, cuda_batch_bucket(m)}] = choice;
}

const CudaTilingChoice& CudaLayer::tiling_for(ActivationType type, int64_t m) const {
    std::lock_guard lock(mutex_);
    const auto it = choices_.find({type, cuda_batch_bucket(m)});
    if (it != choices_.end()) return it->second;
    return choose_and_install(type, m, false);
}

std::map<std::pair<ActivationType, int64_t>, CudaTilingChoice> CudaLayer::choices() const {
    std::lock_guard lock(mutex_);
    return choices_;
}

void CudaLayer::run(const ConstTensorView& x, const TensorView& y, void* stream) const {
    require(x.device == Device::Cuda && y.device == Device::Cuda, "a CUDA layer runs on tensors in device memory");
    require(x.dtype == y.dtype, "x and y differ in dtype");
    require(x.rows == y.rows, "x has ", x.rows, " rows and y ", y.rows);
    const ActivationType type = activation_type(x.dtype);
    const int64_t m = x.rows;
    tiling_for(type, m);
    const auto xp = CUdeviceptr(x.data), yp = CUdeviceptr(y.data);
    executor_->forward(xp, yp, m, type, static_cast<CUstream>(stream));
    if (low_rank_) low_rank_->add(xp, yp, m, type, static_cast<CUstream>(stream));
}

double CudaLayer::time_forward_us(int64_t m, ActivationType type, int repeats) const {
    tiling_for(type, m);
    CudaExecutor::AfterProduct compensate;
    if (low_rank_)
        compensate = [&](CUdeviceptr x, CUdeviceptr y, CUstream stream) { low_rank_->add(x, y, m, type, stream); };
    return executor_->time_forward_us(m, type, repeats, compensate);
}

std::string CudaLayer::kernel_name() const {
    const ActivationType type = context_.cuda_activations;
    tiling_for(type, context_.tuning_batch);
    return executor_->plan(type, cuda_batch_bucket(context_.tuning_batch))->kernel.name;
}

std::string CudaLayer::kernel_fields() const {
    return concat("device=", executor_->device().name, " arch=sm_", executor_->device().arch());
}

ActivationType activation_type(qjit_dtype dtype) {
    require(dtype == QJIT_DTYPE_F16 || dtype == QJIT_DTYPE_BF16, "dtype is ", int(dtype),
            "; the CUDA kernels take QJIT_DTYPE_F16 or QJIT_DTYPE_BF16");
    return dtype == QJIT_DTYPE_F16 ? ActivationType::F16 : ActivationType::BF16;
}

std::unique_ptr<CudaLayer> make_cuda_layer(qjit_context& context, QuantizedMatrix matrix,
                                           const LowRankFactors* compensator) {
    return std::make_unique<CudaLayer>(context, std::move(matrix), compensator);
}

}  // namespace qjit::cuda
