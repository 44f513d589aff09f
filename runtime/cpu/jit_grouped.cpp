// The x86 JIT's grouped call (JitLayer::run_grouped): the rows of every layer of the group through
// the activation prologue as one dispatch, every product task of every layer as one more, then
// each layer's K parts summed and its compensator added.
#include <algorithm>
#include <vector>

#include "base/error.hpp"
#include "base/scratch.hpp"
#include "runtime/cpu/activation_prologue.hpp"
#include "runtime/cpu/jit_layer.hpp"

namespace qjit {

namespace {

// Below these sizes a dispatch to the pool costs more than the work (as in a layer's forward).
constexpr int64_t kMinParallelActivations = int64_t(1) << 14;
constexpr int64_t kMinParallelWork = int64_t(1) << 18;

// A layer of the group, and where its data lives in the scratch.
struct Slot {
    const GroupedRows* member = nullptr;
    const JitLayer* layer = nullptr;
    int64_t first_prepared_row = 0;  // its rows among every layer's prepared rows
    int64_t first_task = 0;          // its first task of the product dispatch
    size_t x_offset = 0;             // bytes into the prepared activations: count x padded K
    size_t meta_offset = 0;          // floats into the prepared steps and sums: count x groups
    size_t partial_offset = 0;       // floats into the K parts' partials: (parts - 1) x count x N
};

// The calling thread's scratch. It only grows, so steady-state calls do not allocate; the tasks
// run on other threads too and reach it through the pointers they are given.
struct GroupScratch {
    std::vector<Slot> slots;
    std::vector<uint8_t> prepared_x;  // rows of int8 or fp32 activations (offsets are multiples of 32)
    std::vector<float> steps, sums, partials;
    std::vector<float> gathered;  // a layer's rows, for its compensator
};

// The slot whose range of tasks (or prepared rows) holds `at`: the last one starting at or before it.
template <typename Start>
const Slot& slot_holding(const std::vector<Slot>& slots, int64_t at, Start start) {
    const auto after = std::upper_bound(slots.begin(), slots.end(), at,
                                        [&](int64_t value, const Slot& slot) { return value < start(slot); });
    return *(after - 1);
}

// The grouped call runs a layer's gather (in the prologue), products and compensator; any other
// pass would be skipped silently, so a layer that plans one is refused until the call runs it.
void require_grouped_passes(const GroupedRows& member) {
    if (!runs_in_jit_group(*member.layer))
        fail(QJIT_ERROR_UNSUPPORTED, "experts[", member.index, "].layer plans the passes ",
             passes_text(member.layer->passes()), "; the grouped MoE call runs gathers, products and compensators");
}

// Lays out each layer's share of the scratch.
void plan_slots(std::span<const GroupedRows> group, GroupScratch& s) {
    s.slots.clear();
    int64_t prepared_rows = 0, tasks = 0;
    size_t x_bytes = 0, meta = 0, partials = 0;
    for (const GroupedRows& member : group) {
        require_grouped_passes(member);
        Slot slot{&member, static_cast<const JitLayer*>(member.layer)};
        const JitExecutor& jit = slot.layer->executor();
        const jit::CpuKernelSpec& spec = jit.spec();
        const int64_t value_bytes = spec.path == jit::ActivationPath::Int8 ? 1 : 4;
        slot.first_prepared_row = prepared_rows;
        slot.first_task = tasks;
        slot.x_offset = x_bytes;
        slot.meta_offset = meta;
        slot.partial_offset = partials;
        prepared_rows += member.count;
        tasks += jit.product_tasks();
        x_bytes += size_t(member.count * spec.padded_k() * value_bytes);
        meta += size_t(member.count * spec.num_groups());
        partials += size_t((jit.k_parts() - 1) * member.count * slot.layer->params().n);
        s.slots.push_back(slot);
    }
    grow(s.prepared_x, x_bytes);
    grow(s.steps, meta);
    grow(s.sums, meta);
    grow(s.partials, partials);
}

PreparedActivations prepared_of(const Slot& slot, GroupScratch& s) {
    return {s.prepared_x.data() + slot.x_offset, s.steps.data() + slot.meta_offset, s.sums.data() + slot.meta_offset};
}

// Every layer's rows through the activation prologue, as one dispatch over all rows.
void prepare_rows(const float* x, int64_t k, GroupScratch& s, ThreadPool& pool) {
    const int64_t rows = s.slots.back().first_prepared_row + s.slots.back().member->count;
    auto prepare = [&](int64_t r) {
        const Slot& slot = slot_holding(s.slots, r, [](const Slot& e) { return e.first_prepared_row; });
        const JitExecutor& jit = slot.layer->executor();
        const jit::CpuKernelSpec& spec = jit.spec();
        const int64_t i = r - slot.first_prepared_row, groups = spec.num_groups();
        const int64_t row_bytes = spec.padded_k() * (spec.path == jit::ActivationPath::Int8 ? 1 : 4);
        const PreparedRow out{s.prepared_x.data() + slot.x_offset + size_t(i * row_bytes),
                              s.steps.data() + slot.meta_offset + i * groups,
                              s.sums.data() + slot.meta_offset + i * groups};
        prepare_activation_row(spec, jit.activation_row_order(slot.layer->params()), x + slot.member->rows[i] * k, out);
    };
    pool.parallel_for(rows, prepare, rows * k >= kMinParallelActivations);
}

// The products of every layer as one dispatch: tasks are (layer, K part, panel). The layers may
// differ in N (a shared-input call's q, k and v), not in K.
void run_products(int64_t k, GroupScratch& s, ThreadPool& pool) {
    const Slot& last = s.slots.back();
    const int64_t tasks = last.first_task + last.layer->executor().product_tasks();
    int64_t work = 0;
    for (const Slot& slot : s.slots) work += k * slot.layer->params().n * slot.member->count;
    auto product = [&](int64_t t) {
        const Slot& slot = slot_holding(s.slots, t, [](const Slot& e) { return e.first_task; });
        slot.layer->executor().run_product_task(slot.layer->params(), slot.layer->codes(), prepared_of(slot, s),
                                                slot.member->count, slot.member->out,
                                                s.partials.data() + slot.partial_offset, t - slot.first_task);
    };
    pool.parallel_for(tasks, product, work >= kMinParallelWork);
}

}  // namespace

bool runs_in_jit_group(const BackendLayer& layer) {
    if (layer.kind() != BackendKind::X86Jit) return false;
    for (const Pass& pass : layer.passes())
        if (pass.kind != PassKind::Gather && pass.kind != PassKind::Product && pass.kind != PassKind::LowRank)
            return false;
    return true;
}

// After the two dispatches a layer's output rows are complete once its K parts are summed, in
// part order as a forward sums them, and its compensator is added on its rows. (The
// compensator's two small products run per layer, not in the grouped dispatch.)
void JitLayer::run_grouped(std::span<const GroupedRows> group, const float* x, int64_t k) const {
    if (group.empty()) return;
    thread_local GroupScratch scratch;
    plan_slots(group, scratch);
    prepare_rows(x, k, scratch, pool());
    run_products(k, scratch, pool());
    for (const Slot& slot : scratch.slots) {
        const int64_t count = slot.member->count;
        slot.layer->executor().add_partials(slot.member->out, scratch.partials.data() + slot.partial_offset, count,
                                            slot.layer->params().n);
        if (!slot.layer->low_rank()) continue;
        float* rows = grow(scratch.gathered, size_t(count * k));
        gather_grouped_rows(*slot.member, x, k, rows);
        slot.layer->add_low_rank(rows, count, slot.member->out);
    }
}

}  // namespace qjit
