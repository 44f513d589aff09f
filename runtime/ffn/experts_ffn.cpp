#include "runtime/ffn/experts_ffn.hpp"

#include <numeric>
#include <vector>

#include "base/scratch.hpp"
#include "runtime/ffn/expert_sum.hpp"
#include "runtime/ffn/grouped_products.hpp"

namespace qjit {

namespace {

// The calling thread's scratch: every routed row's values, expert after expert.
struct ExpertsScratch {
    std::vector<float> gate, hidden, outputs;  // total x H, total x H, total x N
    std::vector<int32_t> hidden_rows;          // 0 .. total - 1: each expert's rows of `hidden`
    GroupedProducts products;
    ExpertSum sum;
};

}  // namespace

void experts_ffn_forward(std::span<const FfnParts> experts, const qjit_ffn_route* routes, const float* x, int64_t m,
                         float* y) {
    thread_local ExpertsScratch s;
    const FfnParts& shape = experts.front();
    const int64_t k = shape.inputs(), h = shape.hidden(), n = shape.outputs();
    int64_t total = 0;
    for (size_t e = 0; e < experts.size(); ++e) total += routes[e].count;
    float* gate = shape.gated() ? grow(s.gate, size_t(total * h)) : nullptr;
    float* hidden = grow(s.hidden, size_t(total * h));
    float* outputs = grow(s.outputs, size_t(total * n));
    if (int64_t(s.hidden_rows.size()) < total) {
        s.hidden_rows.resize(size_t(total));
        std::iota(s.hidden_rows.begin(), s.hidden_rows.end(), 0);
    }

    // Gate and up of every expert on its rows of x: one grouped call.
    s.products.clear();
    int64_t first = 0;  // the expert's first row in the scratch
    for (size_t e = 0; e < experts.size(); first += routes[e].count, ++e) {
        const qjit_ffn_route& route = routes[e];
        if (experts[e].gate) s.products.add(int(e), *experts[e].gate, route.rows, route.count, gate + first * h);
        s.products.add(int(e), *experts[e].up, route.rows, route.count, hidden + first * h);
    }
    s.products.run(x, k);
    activate(shape, hidden, gate, total * h);

    // Down of every expert on its hidden rows: one grouped call.
    s.products.clear();
    first = 0;
    for (size_t e = 0; e < experts.size(); first += routes[e].count, ++e)
        s.products.add(int(e), *experts[e].down, s.hidden_rows.data() + first, routes[e].count, outputs + first * n);
    s.products.run(hidden, h);
    s.sum.sum(routes, int(experts.size()), outputs, m, n, y, shape.pool());
}

}  // namespace qjit
