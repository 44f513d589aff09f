#include "runtime/moe_forward.hpp"

#include <algorithm>
#include <vector>

#include "base/error.hpp"
#include "runtime/cpu/activation_prologue.hpp"
#include "runtime/layer_passes.hpp"
#include "runtime/linear_layer.hpp"

namespace qjit {

namespace {

// Below these sizes a dispatch to the pool costs more than the work (as in a layer's forward).
constexpr int64_t kMinParallelActivations = int64_t(1) << 14;
constexpr int64_t kMinParallelWork = int64_t(1) << 18;
constexpr int64_t kMinParallelScatter = int64_t(1) << 15;
// Columns one scatter task covers: enough that a task costs more than taking it.
constexpr int64_t kScatterColumns = 512;

template <typename T>
T* grow(std::vector<T>& buffer, size_t count) {
    if (buffer.size() < count) buffer.resize(count);
    return buffer.data();
}

// An expert with rows in this call, and where its data lives in the scratch.
struct ExpertSlot {
    int index = 0;                       // into the caller's experts
    const qjit_linear* layer = nullptr;
    const int32_t* rows = nullptr;       // token of each of its rows
    const float* weights = nullptr;      // gate weight of each row; null: 1
    int64_t count = 0;
    size_t out_offset = 0;               // floats into the outputs: count x N
    // The JIT path only:
    int64_t first_prepared_row = 0;      // its rows among every expert's prepared rows
    int64_t first_task = 0;              // its first task of the product dispatch
    size_t x_offset = 0;                 // bytes into the prepared activations: count x padded K
    size_t meta_offset = 0;              // floats into the prepared steps and sums: count x groups
    size_t partial_offset = 0;           // floats into the K parts' partials: (parts - 1) x count x N
};

// One expert's term of one token's output.
struct TokenTerm {
    const float* row;  // the expert's output row for the token
    float weight;
};

// The calling thread's scratch. It only grows, so steady-state calls do not allocate; the tasks
// run on other threads too and reach it through the pointers they are given.
struct MoeScratch {
    std::vector<ExpertSlot> jit_slots, portable_slots;
    std::vector<uint8_t> prepared_x;  // rows of int8 or fp32 activations (offsets are multiples of 32)
    std::vector<float> steps, sums;
    std::vector<float> outputs, partials;
    std::vector<float> gathered;           // a portable expert's token rows
    std::vector<int64_t> token_first;      // [m + 1]: each token's first term
    std::vector<int64_t> token_next;       // [m]: the next free term while filling
    std::vector<TokenTerm> terms;          // by token, then by expert index
};

// The slot whose range of tasks (or prepared rows) holds `at`: the last one starting at or before it.
template <typename Start>
const ExpertSlot& slot_holding(const std::vector<ExpertSlot>& slots, int64_t at, Start start) {
    const auto after = std::upper_bound(slots.begin(), slots.end(), at,
                                        [&](int64_t value, const ExpertSlot& slot) { return value < start(slot); });
    return *(after - 1);
}

// The grouped call runs a JIT layer's gather (in the prologue), products and compensator (in
// complete_jit_expert below); any other pass would be skipped silently, so a layer that plans one
// is refused until the call runs it.
void require_grouped_passes(const ExpertSlot& slot) {
    const std::vector<Pass>& passes = slot.layer->backend->passes();
    for (const Pass& pass : passes)
        if (pass.kind != PassKind::Gather && pass.kind != PassKind::Product && pass.kind != PassKind::LowRank)
            fail(QJIT_ERROR_UNSUPPORTED, "experts[", slot.index, "].layer plans the passes ", passes_text(passes),
                 "; the grouped MoE call runs gathers, products and compensators");
}

// x[rows[i]] for each of the count rows, one after another in dst (count x K).
const float* gather_token_rows(const float* x, int64_t k, const int32_t* rows, int64_t count, float* dst) {
    for (int64_t i = 0; i < count; ++i) std::copy(x + rows[i] * k, x + (rows[i] + 1) * k, dst + i * k);
    return dst;
}

// Puts each expert in its slot list and lays out its share of the scratch.
void plan_slots(const qjit_expert_rows* experts, int num_experts, int64_t n, MoeScratch& s) {
    s.jit_slots.clear();
    s.portable_slots.clear();
    int64_t prepared_rows = 0, tasks = 0;
    size_t x_bytes = 0, meta = 0, outputs = 0, partials = 0;
    for (int e = 0; e < num_experts; ++e) {
        if (experts[e].count == 0) continue;
        ExpertSlot slot;
        slot.index = e;
        slot.layer = experts[e].layer;
        slot.rows = experts[e].rows;
        slot.weights = experts[e].weights;
        slot.count = experts[e].count;
        slot.out_offset = outputs;
        outputs += size_t(slot.count * n);
        const JitExecutor* jit = slot.layer->jit;
        if (!jit) {
            s.portable_slots.push_back(slot);
            continue;
        }
        require_grouped_passes(slot);
        const jit::CpuKernelSpec& spec = jit->spec();
        const int64_t value_bytes = spec.path == jit::ActivationPath::Int8 ? 1 : 4;
        slot.first_prepared_row = prepared_rows;
        slot.first_task = tasks;
        slot.x_offset = x_bytes;
        slot.meta_offset = meta;
        slot.partial_offset = partials;
        prepared_rows += slot.count;
        tasks += jit->product_tasks();
        x_bytes += size_t(slot.count * spec.padded_k() * value_bytes);
        meta += size_t(slot.count * spec.num_groups());
        partials += size_t((jit->k_parts() - 1) * slot.count * n);
        s.jit_slots.push_back(slot);
    }
    grow(s.prepared_x, x_bytes);
    grow(s.steps, meta);
    grow(s.sums, meta);
    grow(s.outputs, outputs);
    grow(s.partials, partials);
}

PreparedActivations prepared_of(const ExpertSlot& slot, MoeScratch& s) {
    return {s.prepared_x.data() + slot.x_offset, s.steps.data() + slot.meta_offset, s.sums.data() + slot.meta_offset};
}

// Every JIT expert's token rows through the activation prologue, as one dispatch over all rows.
void prepare_jit_experts(const float* x, int64_t k, MoeScratch& s, ThreadPool& pool) {
    if (s.jit_slots.empty()) return;
    const int64_t rows = s.jit_slots.back().first_prepared_row + s.jit_slots.back().count;
    auto prepare = [&](int64_t r) {
        const ExpertSlot& slot = slot_holding(s.jit_slots, r, [](const ExpertSlot& e) { return e.first_prepared_row; });
        const JitExecutor& jit = *slot.layer->jit;
        const jit::CpuKernelSpec& spec = jit.spec();
        const int64_t i = r - slot.first_prepared_row, groups = spec.num_groups();
        const int64_t row_bytes = spec.padded_k() * (spec.path == jit::ActivationPath::Int8 ? 1 : 4);
        const PreparedRow out{s.prepared_x.data() + slot.x_offset + size_t(i * row_bytes),
                              s.steps.data() + slot.meta_offset + i * groups,
                              s.sums.data() + slot.meta_offset + i * groups};
        prepare_activation_row(spec, jit.activation_row_order(slot.layer->params), x + slot.rows[i] * k, out);
    };
    pool.parallel_for(rows, prepare, rows * k >= kMinParallelActivations);
}

// The products of every JIT expert as one dispatch: tasks are (expert, K part, panel).
void run_jit_products(int64_t k, int64_t n, MoeScratch& s, ThreadPool& pool) {
    if (s.jit_slots.empty()) return;
    const ExpertSlot& last = s.jit_slots.back();
    const int64_t tasks = last.first_task + last.layer->jit->product_tasks();
    const int64_t rows = last.first_prepared_row + last.count;
    auto product = [&](int64_t t) {
        const ExpertSlot& slot = slot_holding(s.jit_slots, t, [](const ExpertSlot& e) { return e.first_task; });
        slot.layer->jit->run_product_task(slot.layer->params, slot.layer->codes, prepared_of(slot, s), slot.count,
                                          s.outputs.data() + slot.out_offset, s.partials.data() + slot.partial_offset,
                                          t - slot.first_task);
    };
    pool.parallel_for(tasks, product, k * n * rows >= kMinParallelWork);
}

// After this a JIT expert's output rows (count x N, in its row order) are complete: the K parts
// summed, in part order as a forward sums them, then its compensator added on its token rows.
// (The compensator's two small products run per expert, not in the grouped dispatch.)
void complete_jit_expert(const ExpertSlot& slot, const float* x, int64_t k, int64_t n, MoeScratch& s) {
    float* out = s.outputs.data() + slot.out_offset;
    slot.layer->jit->add_partials(out, s.partials.data() + slot.partial_offset, slot.count, n);
    if (!slot.layer->low_rank) return;
    const float* rows = gather_token_rows(x, k, slot.rows, slot.count, grow(s.gathered, size_t(slot.count * k)));
    slot.layer->low_rank->add(rows, slot.count, out);
}

// The portable path has no split forward: each expert runs its whole forward (every pass) on its
// gathered token rows, one dispatch per expert, inside the call.
void run_portable_experts(const float* x, int64_t k, MoeScratch& s) {
    for (const ExpertSlot& slot : s.portable_slots) {
        const float* rows = gather_token_rows(x, k, slot.rows, slot.count, grow(s.gathered, size_t(slot.count * k)));
        linear_forward(*slot.layer, rows, slot.count, s.outputs.data() + slot.out_offset);
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
    plan_slots(experts, num_experts, n, scratch);
    prepare_jit_experts(x, k, scratch, pool);
    run_jit_products(k, n, scratch, pool);
    for (const ExpertSlot& slot : scratch.jit_slots) complete_jit_expert(slot, x, k, n, scratch);
    run_portable_experts(x, k, scratch);
    index_terms_by_token(experts, num_experts, m, n, scratch);
    scatter_to_tokens(m, n, y, scratch, pool);
}

}  // namespace qjit
