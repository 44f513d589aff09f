#include "runtime/cuda/cuda_low_rank.hpp"

#include <vector>

#include "base/error.hpp"
#include "base/half.hpp"
#include "format/low_rank.hpp"
#include "runtime/context.hpp"
#include "runtime/cuda/cuda_layer.hpp"

namespace qjit::cuda {

using jit::cuda::ActivationType;

namespace {

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
    support_ = std::make_unique<SupportModule>(device_, context.cubin_cache_dir);
}

CudaLowRank::~CudaLowRank() {
    try {
        Driver::get().make_current(device_.ordinal);  // the buffers below are freed on their device
    } catch (const Error&) {
    }
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
    driver.launch(support_->typed("qjit_scale_columns", type), blocks_for(m * rank_, kSupportThreads), 1, 1,
                  kSupportThreads, 0, stream, scale_args);
    v.forward(t, product, m, type, stream);
    long long count = m * n_;
    void* add_args[] = {&y, &product, &count};
    driver.launch(support_->typed("qjit_add_into", type), blocks_for(count, kSupportThreads), 1, 1, kSupportThreads, 0,
                  stream, add_args);
}

void CudaLowRank::add_f16(CUdeviceptr x, CUdeviceptr y, int64_t m, ActivationType type, CUstream stream) const {
    Driver& driver = Driver::get();
    CUdeviceptr t = grown(t_, size_t(m * rank_ * 4)), ut = ut_.get(), v = v_.get();
    int rows = int(m), k = int(k_), n = int(n_), rank = rank_;
    void* xu_args[] = {&x, &ut, &t, &rows, &k, &rank};
    driver.launch(support_->typed("qjit_low_rank_xu", type), blocks_for(m * rank_ * 32, kSupportThreads), 1, 1,
                  kSupportThreads, 0, stream, xu_args);
    void* tv_args[] = {&t, &v, &y, &rows, &n, &rank};
    driver.launch(support_->typed("qjit_low_rank_tv", type), blocks_for(m * n_, kSupportThreads), 1, 1,
                  kSupportThreads, 0, stream, tv_args);
}

}  // namespace qjit::cuda
