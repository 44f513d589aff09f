#include "runtime/cuda/cuda_low_rank.hpp"

#include <vector>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/low_rank.hpp"
#include "jit/cuda/cuda_source.hpp"
#include "runtime/cuda/nvrtc_compiler.hpp"
#include "runtime/context.hpp"
#include "runtime/cuda/cuda_layer.hpp"

namespace qjit::cuda {

using jit::cuda::ActivationType;

namespace {

constexpr unsigned kThreads = 256;

// fp16 values held as floats, back to their bits (exact).
DeviceBuffer upload_f16(const std::vector<float>& values) {
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_half(values[i]);
    return upload(bits);
}

}  // namespace

CudaLowRank::CudaLowRank(qjit_context& context, const LowRankFactors& factors, int64_t n)
    : device_(*context.gpu), n_(n), rank_(factors.rank), bits_(factors.bits) {
    Driver& driver = Driver::get();
    driver.make_current(device_.ordinal);
    if (bits_ == 16) {
        k_ = int64_t(factors.u.values.size()) / rank_;
        ut_ = upload_f16(transposed(factors.u.values.data(), k_, rank_));
        v_ = upload_f16(dense_v(factors));
    } else {
        k_ = factors.u.codes.params.k;
        v_scales_ = upload(factors.vt.codes.params.scales);
        u_layer_ = make_cuda_layer(context, low_rank_u_matrix(factors.u.codes));
        v_layer_ = make_cuda_layer(context, low_rank_v_matrix(factors.vt.codes));
    }
    const CompiledKernel compiled = compile_cuda_cached(jit::cuda::support_kernels_source(), "qjit_support",
                                                        device_.arch(), context.cubin_cache_dir);
    support_ = driver.load_module(compiled.cubin);
}

CudaLowRank::~CudaLowRank() {
    if (!support_) return;
    try {
        Driver::get().make_current(device_.ordinal);
    } catch (const Error&) {
    }
    Driver::get().unload_module(support_);
}

CUfunction CudaLowRank::support(const char* name, ActivationType type) const {
    return Driver::get().function(support_, concat(name, type == ActivationType::F16 ? "_f16" : "_bf16"));
}

void CudaLowRank::add(CUdeviceptr x, CUdeviceptr y, int64_t m, ActivationType type, CUstream stream) const {
    Driver::get().make_current(device_.ordinal);
    std::lock_guard lock(mutex_);
    if (bits_ == 16) add_f16(x, y, m, type, stream);
    else add_coded(x, y, m, type, stream);
}

void CudaLowRank::add_coded(CUdeviceptr x, CUdeviceptr y, int64_t m, ActivationType type, CUstream stream) const {
    Driver& driver = Driver::get();
    u_layer_->tiling_for(type, m);
    v_layer_->tiling_for(type, m);
    CudaExecutor& u = u_layer_->executor();
    CudaExecutor& v = v_layer_->executor();
    CUdeviceptr t = grown(t_, size_t(m * rank_ * 2)), product = grown(product_, size_t(m * n_ * 2));
    u.forward(x, t, m, type, stream);
    CUdeviceptr scales = v_scales_.get();
    int rows = int(m), cols = rank_;
    void* scale_args[] = {&t, &scales, &rows, &cols};
    driver.launch(support("qjit_scale_columns", type), blocks_for(m * rank_, kThreads), 1, 1, kThreads, 0, stream,
                  scale_args);
    v.forward(t, product, m, type, stream);
    long long count = m * n_;
    void* add_args[] = {&y, &product, &count};
    driver.launch(support("qjit_add_into", type), blocks_for(count, kThreads), 1, 1, kThreads, 0, stream, add_args);
}

void CudaLowRank::add_f16(CUdeviceptr x, CUdeviceptr y, int64_t m, ActivationType type, CUstream stream) const {
    Driver& driver = Driver::get();
    CUdeviceptr t = grown(t_, size_t(m * rank_ * 4)), ut = ut_.get(), v = v_.get();
    int rows = int(m), k = int(k_), n = int(n_), rank = rank_;
    void* xu_args[] = {&x, &ut, &t, &rows, &k, &rank};
    driver.launch(support("qjit_low_rank_xu", type), blocks_for(m * rank_ * 32, kThreads), 1, 1, kThreads, 0, stream,
                  xu_args);
    void* tv_args[] = {&t, &v, &y, &rows, &n, &rank};
    driver.launch(support("qjit_low_rank_tv", type), blocks_for(m * n_, kThreads), 1, 1, kThreads, 0, stream, tv_args);
}

}  // namespace qjit::cuda
