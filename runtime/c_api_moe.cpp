// The C API of the grouped mixture-of-experts call: argument checks, then runtime/moe_forward.
#include "base/error.hpp"
#include "qjit/qjit.h"
#include "runtime/forward_arguments.hpp"
#include "runtime/context.hpp"
#include "runtime/linear_layer.hpp"
#include "runtime/moe_forward.hpp"

using namespace qjit;

namespace {

// Every expert's layer, context and shape, against experts[0].
void check_experts(const qjit_context* context, const qjit_expert_rows* experts, int num_experts) {
    const qjit_linear* first = experts[0].layer;
    for (int e = 0; e < num_experts; ++e) {
        const qjit_expert_rows& expert = experts[e];
        require(expert.layer != nullptr, "experts[", e, "].layer is NULL");
        require(expert.layer->context == context, "experts[", e, "].layer belongs to another context");
        const QuantParams& p = expert.layer->params;
        require(p.k == first->params.k && p.n == first->params.n, "experts[", e, "].layer is K=", p.k, " N=", p.n,
                "; experts[0].layer is K=", first->params.k, " N=", first->params.n, " (every expert needs the same)");
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
        check_experts(context, experts, num_experts);
        require_activations(x, m, experts[0].layer->params.k, y, experts[0].layer->params.n);
        require_routes(experts, num_experts, m, "experts");
        moe_forward(experts, num_experts, x, m, y, *context->pool);
    });
}

}  // extern "C"
