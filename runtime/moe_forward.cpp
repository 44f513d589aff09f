#include "runtime/moe_forward.hpp"

#include <algorithm>
#include <vector>

#include "base/error.hpp"
#include "base/scratch.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

namespace {

// Below this size a dispatch to the pool costs more than the work (as in a layer's forward).
constexpr int64_t kMinParallelScatter = int64_t(1) << 15;
// Columns one scatter task covers: enough that a task costs more than taking it.
constexpr int64_t kScatterColumns = 512;

// One expert's term of one token's output.
struct TokenTerm {
    const float* row;  // the expert's output row for the token
    float weight;
};

// The calling thread's scratch. It only grows, so steady-state calls do not allocate; the tasks
// run on other threads too and reach it through the pointers they are given.
struct MoeScratch {
    std::vector<GroupedRows> jit_group, other_group;
    std::vector<float> outputs;            // each expert's count x N outputs, expert after expert
    std::vector<int64_t> token_first;      // [m + 1]: each token's first term
    std::vector<int64_t> token_next;       // [m]: the next free term while filling
    std::vector<TokenTerm> terms;          // by token, then by expert index
};

// Lays out each expert's outputs and sorts the experts into the x86 JIT's group, whose products
// run in one dispatch, and the rest, which run one after another.
void plan_groups(const qjit_expert_rows* experts, int num_experts, int64_t n, MoeScratch& s) {
    s.jit_group.clear();
    s.other_group.clear();
    size_t outputs = 0;
    for (int e = 0; e < num_experts; ++e) {
        if (experts[e].count == 0) continue;
        outputs += size_t(experts[e].count * n);
    }
    float* out = grow(s.outputs, outputs);
    for (int e = 0; e < num_experts; ++e) {
        if (experts[e].count == 0) continue;
        const BackendLayer* layer = experts[e].layer->cpu.get();
        auto& group = layer->kind() == BackendKind::X86Jit ? s.jit_group : s.other_group;
        group.push_back({e, layer, experts[e].rows, experts[e].count, out});
        out += experts[e].count * n;
    }
}

// Each token's terms, in expert order: a counting sort of the experts' rows by token. The
// outputs lie expert after expert (plan_slots), so walking the experts in order finds them.
void index_terms_by_token(const qjit_expert_rows* experts, int num_experts, int64_t m, int64_t n, MoeScratch& s) {
    int64_t* first = grow(s.token_first, size_t(m + 1));
    std::fill(first, first + m + 1, 0);
    for (int e = 0; e < num_experts; ++e)
        for (int64_t i = 0; i < experts[e].count; ++i) ++first[experts[e].rows[i] + 1];
    for (int64_t t = 0; t < m; ++t) first[t + 1] += first[t];
    int64_t* next = grow(s.token_next, size_t(m));
    std::copy(first, first + m, next);
    TokenTerm* terms = grow(s.terms, size_t(first[m]));
    const float* out = s.outputs.data();
    for (int e = 0; e < num_experts; ++e) {
        const qjit_expert_rows& expert = experts[e];
        for (int64_t i = 0; i < expert.count; ++i, out += n)
            terms[next[expert.rows[i]]++] = {out, expert.weights ? expert.weights[i] : 1.0f};
    }
}

// y[t] = the weighted sum of token t's terms in expert order (zeros for a token with none), as
// one dispatch over column ranges.
void scatter_to_tokens(int64_t m, int64_t n, float* y, const MoeScratch& s, ThreadPool& pool) {
    const int64_t* first = s.token_first.data();
    const TokenTerm* terms = s.terms.data();
    auto scatter = [&](int64_t chunk) {
        const int64_t c0 = chunk * kScatterColumns, c1 = std::min(n, c0 + kScatterColumns);
        for (int64_t t = 0; t < m; ++t) {
            float* out = y + t * n;
            if (first[t] == first[t + 1]) {
                std::fill(out + c0, out + c1, 0.0f);
                continue;
            }
            const TokenTerm& head = terms[first[t]];
            for (int64_t c = c0; c < c1; ++c) out[c] = head.weight * head.row[c];
            for (int64_t j = first[t] + 1; j < first[t + 1]; ++j)
                for (int64_t c = c0; c < c1; ++c) out[c] += terms[j].weight * terms[j].row[c];
        }
    };
    const int64_t chunks = (n + kScatterColumns - 1) / kScatterColumns;
    pool.parallel_for(chunks, scatter, s.token_first[size_t(m)] * n >= kMinParallelScatter);
}

}  // namespace

void moe_forward(const qjit_expert_rows* experts, int num_experts, const float* x, int64_t m, float* y,
                 ThreadPool& pool) {
    thread_local MoeScratch scratch;
    const qjit_linear& shape = *experts[0].layer;
    const int64_t k = shape.params.k, n = shape.params.n;
    plan_groups(experts, num_experts, n, scratch);
    for (const std::vector<GroupedRows>* group : {&scratch.jit_group, &scratch.other_group})
        if (!group->empty()) group->front().layer->run_grouped(*group, x, k);
    index_terms_by_token(experts, num_experts, m, n, scratch);
    scatter_to_tokens(m, n, y, scratch, pool);
}

}  // namespace qjit
