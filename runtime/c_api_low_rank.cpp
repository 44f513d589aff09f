// The C API of low-rank compensators: importing a layer with one, and sharing a rank budget over
// a set of layers (the quantizing side is qjit_linear_create_from_f32 with QJIT_QUANT_MILO).
#include <vector>

#include "base/error.hpp"
#include "quant/rank_policy.hpp"
#include "qjit/qjit.h"
#include "runtime/gptq_layer.hpp"
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

}  // extern "C"
