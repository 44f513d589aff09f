#include "runtime/moe_forward.hpp"

#include <vector>

#include "base/scratch.hpp"
#include "runtime/ffn/expert_sum.hpp"
#include "runtime/ffn/grouped_products.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

namespace {

// The calling thread's scratch. It only grows, so steady-state calls do not allocate; the tasks
// run on other threads too and reach it through the pointers they are given.
struct MoeScratch {
    GroupedProducts products;
    std::vector<float> outputs;        // each expert's count x N outputs, expert after expert
    std::vector<qjit_ffn_route> routes;  // each expert's rows and weights
    ExpertSum sum;
};

}  // namespace

void moe_forward(const qjit_expert_rows* experts, int num_experts, const float* x, int64_t m, float* y,
                 ThreadPool& pool) {
    thread_local MoeScratch s;
    const qjit_linear& shape = *experts[0].layer;
    const int64_t k = shape.params.k, n = shape.params.n;
    size_t outputs = 0;
    s.routes.clear();
    for (int e = 0; e < num_experts; ++e) {
        outputs += size_t(experts[e].count * n);
        s.routes.push_back({experts[e].rows, experts[e].weights, experts[e].count});
    }
    float* out = grow(s.outputs, outputs);
    s.products.clear();
    for (int e = 0; e < num_experts; ++e) {
        s.products.add(e, *experts[e].layer, experts[e].rows, experts[e].count, out);
        out += experts[e].count * n;
    }
    s.products.run(x, k);
    s.sum.sum(s.routes.data(), num_experts, s.outputs.data(), m, n, y, pool);
}

}  // namespace qjit
