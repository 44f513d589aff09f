#include "runtime/low_rank_pass.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "base/scratch.hpp"
#include "runtime/cpu/cache_eviction.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

namespace {

// Columns of V one task of the fp16 pass adds: enough work to be worth a dispatch.
constexpr int64_t kColumnsPerTask = 512;

// t (m x rank) = x (m x k) U (k x rank), dense fp32.
void dense_x_times_u(const float* u, int64_t k, int64_t rank, const float* x, int64_t m, float* t) {
    std::fill(t, t + m * rank, 0.0f);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < k; ++r) {
            const float xv = x[i * k + r];
            const float* u_row = u + r * rank;
            for (int64_t j = 0; j < rank; ++j) t[i * rank + j] += xv * u_row[j];
        }
}

// y[:, first:end) += t (m x rank) V[:, first:end), dense fp32.
void dense_add_t_times_v(const float* v, int64_t rank, int64_t n, const float* t, int64_t m, int64_t first,
                         int64_t end, float* y) {
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < rank; ++j) {
            const float tv = t[i * rank + j];
            const float* v_row = v + j * n;
            float* y_row = y + i * n;
            for (int64_t c = first; c < end; ++c) y_row[c] += tv * v_row[c];
        }
}

}  // namespace

LowRankPass::LowRankPass(qjit_context* context, LowRankFactors factors, int64_t k, int64_t n,
                         qjit_activations activations)
    : rank_(factors.rank), bits_(factors.bits), k_(k), n_(n), context_(context) {
    validate(factors, k, n);
    if (bits_ == 16) {
        v_values_ = dense_v(factors);
        u_values_ = std::move(factors.u.values);
        return;
    }
    v_scales_ = factors.vt.codes.params.scales;
    u_ = make_linear(context, low_rank_u_matrix(std::move(factors.u.codes)), {}, activations, LayerDevices::CpuOnly);
    v_ = make_linear(context, low_rank_v_matrix(factors.vt.codes), {}, activations, LayerDevices::CpuOnly);
}

LowRankPass::~LowRankPass() = default;

void LowRankPass::add(const float* x, int64_t m, float* y) const {
    thread_local std::vector<float> t_buffer, product_buffer;
    float* const t = grow(t_buffer, size_t(m * rank_));
    if (bits_ == 16) {
        dense_x_times_u(u_values_.data(), k_, rank_, x, m, t);
        const int64_t tasks = (n_ + kColumnsPerTask - 1) / kColumnsPerTask;
        auto task = [&](int64_t index) {
            const int64_t first = index * kColumnsPerTask;
            dense_add_t_times_v(v_values_.data(), rank_, n_, t, m, first, std::min(n_, first + kColumnsPerTask), y);
        };
        context_->pool->parallel_for(tasks, task, tasks > 1);
        return;
    }
    float* const product = grow(product_buffer, size_t(m * n_));
    linear_forward(*u_, x, m, t);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < rank_; ++j) t[i * rank_ + j] *= v_scales_[size_t(j)];
    linear_forward(*v_, t, m, product);
    for (int64_t i = 0; i < m * n_; ++i) y[i] += product[i];
}

LowRankFactors LowRankPass::factors() const {
    LowRankFactors f;
    f.rank = rank_;
    f.bits = bits_;
    if (bits_ == 16) {
        f.u.values = u_values_;
        f.vt.values = transposed(v_values_.data(), rank_, n_);
    } else {
        f.u.codes = u_from_low_rank_matrix(unpack_linear(*u_));
        f.vt.codes = vt_from_low_rank_matrix(unpack_linear(*v_), v_scales_);
    }
    return f;
}

int64_t LowRankPass::streamed_bytes() const {
    // fp16 factors are held in fp32, as the loop reads them.
    if (bits_ == 16) return int64_t((u_values_.size() + v_values_.size()) * sizeof(float));
    return weight_bytes(*u_) + weight_bytes(*v_);
}

void LowRankPass::evict() const {
    if (bits_ == 16) {
        evict_from_caches(u_values_);
        evict_from_caches(v_values_);
        return;
    }
    evict_layer_from_caches(*u_);
    evict_layer_from_caches(*v_);
}

std::string LowRankPass::describe() const {
    const std::string storage = bits_ == 16 ? concat("r", rank_, "f16") : concat("r", rank_, "q", bits_);
    if (bits_ == 16) return concat("low_rank=", storage, " low_rank_kernel=f32_portable");
    auto kernel = [](const qjit_linear& inner) { return inner.description.substr(0, inner.description.find(' ')); };
    return concat("low_rank=", storage, " low_rank_u=", kernel(*u_), " low_rank_v=", kernel(*v_));
}

}  // namespace qjit
