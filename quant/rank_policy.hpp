// How MiLo shares a budget of compensator rank among a model's matrices. The budget is an average
// rank over the set, counted in stored values: sum_i rank_i (K_i + N_i) may not exceed
// average_rank * sum_i (K_i + N_i). A policy gives each matrix a weight; ranks are proportional to
// the weights (capped at min(K_i, N_i, kMaxLowRank), the excess going to the others), then
// rounded to integers by largest remainder as far as the budget allows.
//
//   uniform      every matrix the same weight: average_rank each (rounded)
//   dense-r      attention and dense FFN / shared-expert matrices weight 1, routed experts
//                kMinorRoleShare: the experts keep a small rank, the rest take the budget
//   sparse-r     the opposite: experts 1, attention and dense kMinorRoleShare
//   kurtosis-r   the excess kurtosis of each matrix's weights (floored at kKurtosisFloor): heavy
//                tails, which quantize worst, get the rank
//   frequency-r  experts by their activation counts (scaled so the experts' mean weight is 1),
//                the other matrices 1, as in uniform
// When every matrix has the same role, dense-r and sparse-r give every matrix the same weight:
// they reduce to uniform.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qjit {

enum class RankPolicy { Uniform, DenseR, SparseR, KurtosisR, FrequencyR };

// "uniform", "dense-r", "sparse-r", "kurtosis-r", "frequency-r".
const char* name(RankPolicy policy);
// The policy of a name above; anything else is an invalid-argument Error listing them.
RankPolicy parse_rank_policy(std::string_view text);

enum class MatrixRole {
    Attention,
    Dense,   // a dense FFN matrix or a shared expert's
    Expert,  // a routed expert's
};

struct RankCandidate {
    int64_t k = 0, n = 0;
    MatrixRole role = MatrixRole::Dense;
    const float* weights = nullptr;  // K x N row-major; kurtosis-r reads it
    double activation_count = 0;     // routed experts: how often the router picks it (frequency-r)
};

// The share of the major role's rank a minor role's matrix gets under dense-r and sparse-r.
inline constexpr double kMinorRoleShare = 0.125;
// Kurtosis-r's smallest weight, so a matrix with light tails (a Gaussian's excess kurtosis is 0,
// a uniform's negative) still gets some rank.
inline constexpr double kKurtosisFloor = 0.1;

// One rank per candidate, in order, each in [0, min(K, N, kMaxLowRank)], within the budget.
std::vector<int> assign_ranks(RankPolicy policy, double average_rank, const std::vector<RankCandidate>& candidates);

// Excess kurtosis of count values, E[(w - mean)^4] / Var^2 - 3 (0 for a Gaussian), in double;
// 0 when every value is the same.
double kurtosis(const float* weights, int64_t count);

}  // namespace qjit
