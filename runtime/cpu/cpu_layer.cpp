#include "runtime/cpu/cpu_layer.hpp"

#include "base/error.hpp"
#include "runtime/cpu/cache_eviction.hpp"
#include "runtime/low_rank_pass.hpp"

namespace qjit {

CpuLayer::CpuLayer(BackendKind kind, std::vector<Pass> passes, const QuantParams& params, PackedCodes codes,
                   std::unique_ptr<LowRankPass> low_rank, ThreadPool& pool)
    : BackendLayer(kind, std::move(passes)), params_(params), codes_(std::move(codes)), low_rank_(std::move(low_rank)),
      pool_(pool) {
    require(has_pass(this->passes(), PassKind::LowRank) == (low_rank_ != nullptr),
            "a CPU layer's plan has a low-rank pass exactly when it has a compensator");
}

CpuLayer::~CpuLayer() = default;

void CpuLayer::run(const ConstTensorView& x, const TensorView& y, void*) const {
    require(x.device == Device::Cpu && y.device == Device::Cpu, "a CPU layer runs on tensors in host memory");
    require(x.dtype == QJIT_DTYPE_F32 && y.dtype == QJIT_DTYPE_F32, "a CPU layer takes fp32 tensors");
    require(x.rows == y.rows, "x has ", x.rows, " rows and y ", y.rows);
    forward(static_cast<const float*>(x.data), x.rows, static_cast<float*>(y.data));
}

void CpuLayer::add_low_rank(const float* x, int64_t m, float* y) const { low_rank_->add(x, m, y); }

int64_t CpuLayer::weight_bytes() const {
    const int64_t codes = int64_t(codes_.words.size() * sizeof(uint32_t));
    return codes + metadata_bytes() + (low_rank_ ? low_rank_->streamed_bytes() : 0);
}

void CpuLayer::evict() const {
    evict_from_caches(codes_.words);
    evict_metadata();
    if (low_rank_) low_rank_->evict();
}

}  // namespace qjit
