#include "quant/rank_policy.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.hpp"
#include "format/weight_format.hpp"

namespace qjit {

namespace {

constexpr RankPolicy kPolicies[] = {RankPolicy::Uniform, RankPolicy::DenseR, RankPolicy::SparseR,
                                    RankPolicy::KurtosisR, RankPolicy::FrequencyR};

// Each candidate's weight under a policy: its rank is proportional to it.
std::vector<double> policy_weights(RankPolicy policy, const std::vector<RankCandidate>& candidates) {
    std::vector<double> weights(candidates.size(), 1.0);
    switch (policy) {
    case RankPolicy::Uniform:
        break;
    case RankPolicy::DenseR:
    case RankPolicy::SparseR: {
        const bool experts_minor = policy == RankPolicy::DenseR;
        for (size_t i = 0; i < candidates.size(); ++i)
            if ((candidates[i].role == MatrixRole::Expert) == experts_minor) weights[i] = kMinorRoleShare;
        // A set of one role gets equal weights: uniform (ranks depend only on weight ratios).
        break;
    }
    case RankPolicy::KurtosisR:
        for (size_t i = 0; i < candidates.size(); ++i) {
            const RankCandidate& c = candidates[i];
            require(c.weights != nullptr, "kurtosis-r needs the weights of candidate ", i, " (", c.k, " x ", c.n, ")");
            weights[i] = std::max(kurtosis(c.weights, c.k * c.n), kKurtosisFloor);
        }
        break;
    case RankPolicy::FrequencyR: {
        double total = 0.0;
        int64_t experts = 0;
        for (size_t i = 0; i < candidates.size(); ++i) {
            const RankCandidate& c = candidates[i];
            if (c.role != MatrixRole::Expert) continue;
            require(std::isfinite(c.activation_count) && c.activation_count >= 0.0, "activation_count of candidate ", i,
                    " is ", c.activation_count, "; expected a finite count >= 0");
            total += c.activation_count;
            ++experts;
        }
        if (experts == 0) break;  // no experts: uniform
        require(total > 0.0, "frequency-r needs the experts' activation counts; all ", experts, " are 0");
        const double mean = total / double(experts);
        for (size_t i = 0; i < candidates.size(); ++i)
            if (candidates[i].role == MatrixRole::Expert) weights[i] = candidates[i].activation_count / mean;
        break;
    }
    default:
        fail(QJIT_ERROR_INVALID_ARGUMENT, "rank policy ", int(policy), " is not one qjit knows");
    }
    return weights;
}

// Real ranks proportional to the weights that spend the budget, each capped (water-filling: a
// capped matrix's excess is shared among the others in proportion to their weights).
std::vector<double> proportional_ranks(const std::vector<double>& weights, const std::vector<double>& costs,
                                       const std::vector<double>& caps, double budget) {
    const size_t count = weights.size();
    std::vector<bool> capped(count, false);
    double level = 0.0;
    for (;;) {
        double remaining = budget, demand = 0.0;
        for (size_t i = 0; i < count; ++i) {
            if (capped[i]) remaining -= caps[i] * costs[i];
            else demand += weights[i] * costs[i];
        }
        if (demand <= 0.0) break;
        level = std::max(remaining, 0.0) / demand;
        bool more = false;
        for (size_t i = 0; i < count; ++i)
            if (!capped[i] && level * weights[i] >= caps[i]) capped[i] = more = true;
        if (!more) break;
    }
    std::vector<double> ranks(count);
    for (size_t i = 0; i < count; ++i) ranks[i] = capped[i] ? caps[i] : level * weights[i];
    return ranks;
}

}  // namespace

const char* name(RankPolicy policy) {
    switch (policy) {
    case RankPolicy::Uniform: return "uniform";
    case RankPolicy::DenseR: return "dense-r";
    case RankPolicy::SparseR: return "sparse-r";
    case RankPolicy::KurtosisR: return "kurtosis-r";
    case RankPolicy::FrequencyR: return "frequency-r";
    }
    return "unknown";
}

RankPolicy parse_rank_policy(std::string_view text) {
    for (RankPolicy policy : kPolicies)
        if (text == name(policy)) return policy;
    fail(QJIT_ERROR_INVALID_ARGUMENT, "rank policy '", text,
         "' is unknown; expected uniform, dense-r, sparse-r, kurtosis-r or frequency-r");
}

std::vector<int> assign_ranks(RankPolicy policy, double average_rank, const std::vector<RankCandidate>& candidates) {
    require(std::isfinite(average_rank) && average_rank >= 0.0, "average_rank is ", average_rank,
            "; expected a finite value >= 0");
    std::vector<double> costs, caps;
    for (size_t i = 0; i < candidates.size(); ++i) {
        const RankCandidate& c = candidates[i];
        require(c.k >= 1 && c.n >= 1, "candidate ", i, " has the empty shape ", c.k, " x ", c.n);
        costs.push_back(double(c.k) + double(c.n));  // values one unit of rank stores
        caps.push_back(double(std::min<int64_t>({c.k, c.n, kMaxLowRank})));
    }
    const double budget = average_rank * std::accumulate(costs.begin(), costs.end(), 0.0);
    const std::vector<double> ranks = proportional_ranks(policy_weights(policy, candidates), costs, caps, budget);

    // Integers: round down, then round up in order of the largest remainder while the budget allows.
    const double tolerance = 1e-9;  // a level of exactly 16 computed as 15.999...
    std::vector<int> assigned(candidates.size());
    double spent = 0.0;
    for (size_t i = 0; i < ranks.size(); ++i) {
        assigned[i] = int(std::min(std::floor(ranks[i] + tolerance), caps[i]));
        spent += assigned[i] * costs[i];
    }
    std::vector<size_t> order(ranks.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ranks[a] - assigned[a] > ranks[b] - assigned[b]; });
    for (size_t i : order) {
        if (ranks[i] <= double(assigned[i]) || double(assigned[i]) >= caps[i]) continue;
        if (spent + costs[i] > budget * (1.0 + tolerance)) continue;
        ++assigned[i];
        spent += costs[i];
    }
    return assigned;
}

double kurtosis(const float* weights, int64_t count) {
    require(weights != nullptr, "weights is NULL");
    require(count >= 1, "count is ", count, "; expected >= 1");
    double mean = 0.0;
    for (int64_t i = 0; i < count; ++i) {
        require(std::isfinite(weights[i]), "weight ", i, " is not finite");
        mean += weights[i];
    }
    mean /= double(count);
    double second = 0.0, fourth = 0.0;
    for (int64_t i = 0; i < count; ++i) {
        const double d = double(weights[i]) - mean, d2 = d * d;
        second += d2;
        fourth += d2 * d2;
    }
    second /= double(count);
    fourth /= double(count);
    if (second == 0.0) return 0.0;
    return fourth / (second * second) - 3.0;
}

}  // namespace qjit
