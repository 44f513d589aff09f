// The C API of the grouped mixture-of-experts call: argument checks, then runtime/moe_forward.
#include <algorithm>
#include <vector>

#include "base/error.hpp"
#include "qjit/qjit.h"
#include "runtime/forward_arguments.hpp"
#include "runtime/context.hpp"
#include "runtime/linear_layer.hpp"
#include "runtime/moe_forward.hpp"

using namespace qjit;

namespace {

// Every expert's layer, context, shape and row count, against experts[0].
void check_experts(const qjit_context* context, const qjit_expert_rows* experts, int num_experts, int64_t m) {
    const qjit_linear* first = experts[0].layer;
    for (int e = 0; e < num_experts; ++e) {
        const qjit_expert_rows& expert = experts[e];
        require(expert.layer != nullptr, "experts[", e, "].layer is NULL");
        require(expert.layer->context == context, "experts[", e, "].layer belongs to another context");
        const QuantParams& p = expert.layer->params;
        require(p.k == first->params.k && p.n == first->params.n, "experts[", e, "].layer is K=", p.k, " N=", p.n,
                "; experts[0].layer is K=", first->params.k, " N=", first->params.n, " (every expert needs the same)");
        require(expert.count >= 0 && expert.count <= m, "experts[", e, "].count is ", expert.count,
                "; expected 0 .. m = ", m, " (a token at most once per expert)");
        require(expert.count == 0 || expert.rows != nullptr, "experts[", e, "].rows is NULL");
    }
}

// Every row a token index, none twice within an expert. The calling thread's marks only grow.
void check_rows(const qjit_expert_rows* experts, int num_experts, int64_t m) {
    thread_local std::vector<int32_t> last_expert;  // per token: the last expert that took it
    if (last_expert.size() < size_t(m)) last_expert.resize(size_t(m));
    std::fill(last_expert.begin(), last_expert.begin() + m, -1);
    for (int e = 0; e < num_experts; ++e)
        for (int64_t i = 0; i < experts[e].count; ++i) {
            const int32_t row = experts[e].rows[i];
            require(row >= 0 && row < m, "experts[", e, "].rows[", i, "] is ", row, "; expected 0 .. m - 1 = ", m - 1);
            require(last_expert[size_t(row)] != e, "experts[", e, "].rows[", i, "] is ", row,
                    ", which the expert already has (a token at most once per expert)");
            last_expert[size_t(row)] = e;
        }
}

}  // namespace

extern "C" {

qjit_status qjit_moe_forward(qjit_context* context, const qjit_expert_rows* experts, int num_experts, const float* x,
                             int64_t m, float* y) {
    return guarded([&] {
        require(context != nullptr, "context is NULL");
        require(experts != nullptr, "experts is NULL");
        require(num_experts >= 1, "num_experts is ", num_experts, "; expected 1 or more");
        require(x != nullptr, "x is NULL");
        require(y != nullptr, "y is NULL");
        require_row_count(m);
        check_experts(context, experts, num_experts, m);
        require_activations(x, m, experts[0].layer->params.k, y, experts[0].layer->params.n);
        check_rows(experts, num_experts, m);
        moe_forward(experts, num_experts, x, m, y, *context->pool);
    });
}

}  // extern "C"
