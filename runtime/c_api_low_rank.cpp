// The C API of low-rank compensators: importing a layer with one, and sharing a rank budget over
// a set of layers (the quantizing side is qjit_linear_create_from_f32 with QJIT_QUANT_MILO).
#include <algorithm>
#include <cmath>
#include <variant>
#include <vector>

#include "base/error.hpp"
#include "quant/rank_policy.hpp"
#include "qjit/qjit.h"
#include "runtime/gptq_layer.hpp"
#include "runtime/quant_config.hpp"
#include "quant/quantize_low_rank.hpp"

using namespace qjit;

namespace {

RankPolicy rank_policy(qjit_rank_policy policy) {
    switch (policy) {
        case QJIT_RANK_UNIFORM: return RankPolicy::Uniform;
        case QJIT_RANK_DENSE: return RankPolicy::DenseR;
        case QJIT_RANK_SPARSE: return RankPolicy::SparseR;
        case QJIT_RANK_KURTOSIS: return RankPolicy::KurtosisR;
        case QJIT_RANK_FREQUENCY: return RankPolicy::FrequencyR;
        default: break;
    }
    fail(QJIT_ERROR_INVALID_ARGUMENT, "policy is ", int(policy), "; expected a qjit_rank_policy (0 .. 4)");
}

MatrixRole matrix_role(qjit_matrix_role role, int64_t index) {
    switch (role) {
        case QJIT_ROLE_ATTENTION: return MatrixRole::Attention;
        case QJIT_ROLE_DENSE: return MatrixRole::Dense;
        case QJIT_ROLE_EXPERT: return MatrixRole::Expert;
        default: break;
    }
    fail(QJIT_ERROR_INVALID_ARGUMENT, "matrices[", index, "].role is ", int(role), "; expected a qjit_matrix_role");
}

}  // namespace

extern "C" {

qjit_status qjit_linear_create_with_low_rank(qjit_context* context, int64_t k, int64_t n,
                                             const qjit_gptq_tensors* tensors, const qjit_low_rank* low_rank,
                                             qjit_linear** layer) {
    return guarded([&] {
        require(layer != nullptr, "layer (the output pointer) is NULL");
        *layer = nullptr;
        require(context != nullptr, "context is NULL");
        require(tensors != nullptr, "tensors is NULL");
        require(low_rank != nullptr, "low_rank is NULL");
        validate_shape(k, n);
        LowRankFactors factors = quantize_low_rank(low_rank->bits, k, n, low_rank->rank, low_rank->u, low_rank->v);
        *layer = make_linear_from_gptq(context, k, n, *tensors, std::move(factors)).release();
    });
}

qjit_status qjit_assign_ranks(qjit_rank_policy policy, double average_rank, const qjit_rank_matrix* matrices,
                              int64_t count, int* ranks) {
    return guarded([&] {
        require(matrices != nullptr, "matrices is NULL");
        require(ranks != nullptr, "ranks is NULL");
        require(count >= 1 && count <= (int64_t(1) << 24), "count is ", count, "; expected 1 .. 2^24");
        std::vector<RankCandidate> candidates;
        for (int64_t i = 0; i < count; ++i) {
            const qjit_rank_matrix& m = matrices[i];
            require(m.k >= 1 && m.n >= 1, "matrices[", i, "] is ", m.k, " x ", m.n, "; expected a non-empty shape");
            candidates.push_back({m.k, m.n, matrix_role(m.role, i), m.weights, m.activation_count});
        }
        const std::vector<int> assigned = assign_ranks(rank_policy(policy), average_rank, candidates);
        for (int64_t i = 0; i < count; ++i) ranks[i] = assigned[size_t(i)];
    });
}

qjit_status qjit_rank_within_budget(const qjit_quant_config* config, int64_t k, int64_t n, double fraction,
                                    int* rank) {
    return guarded([&] {
        require(rank != nullptr, "rank (the output pointer) is NULL");
        *rank = 0;
        require(config != nullptr, "config is NULL");
        require(std::isfinite(fraction) && fraction > 0, "fraction is ", fraction, "; expected a budget > 0");
        validate_shape(k, n);
        validate_low_rank_bits(config->low_rank_bits);
        qjit_quant_config base = *config;
        base.float_offsets = uses_float_offsets(*config) ? 1 : 0;  // the form the base takes
        base.method = QJIT_QUANT_RTN;  // the base's bytes depend on its format only
        base.rank = 0;
        base.milo_base = QJIT_QUANT_HQQ;
        const WeightFormat format = std::get<WeightFormat>(quantizer_config(base, k, n));
        QuantParams params;
        static_cast<WeightFormat&>(params) = format;
        const double allowed = fraction * double(stored_bytes(params));
        const int most = int(std::min<int64_t>({k, n, kMaxLowRank}));
        while (*rank < most && double(low_rank_stored_bytes(*rank + 1, config->low_rank_bits, k, n)) <= allowed)
            ++*rank;
    });
}

}  // extern "C"
