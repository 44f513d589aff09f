// The x86 JIT's grouped call (JitLayer::run_grouped): the rows of every layer of the group through
// the activation prologue as one dispatch, every product task of every layer as one more, then
// each layer's K parts summed and its compensator added.
#include <algorithm>
#include <vector>

#include "base/error.hpp"
#include "base/scratch.hpp"
#include "base/simd_family.hpp"
#include "runtime/cpu/activation_prologue.hpp"
#include "runtime/cpu/jit_layer.hpp"

namespace qjit {

namespace {

// Below this many activations a dispatch to the pool costs more than the work (as in a layer's forward).
constexpr int64_t kMinParallelActivations = int64_t(1) << 14;

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
    // The slots whose prologue runs, in order of their prepared rows; another slot reads the rows of
    // one of these (same_prologue).
    std::vector<Slot> preparing;
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

// Whether the activation prologue makes the same prepared rows for two kernels from the same rows
// of x: everything it reads of the spec agrees (a shared-input call's q, k and v, or gate and up, of
// one format). Then one prologue serves both.
bool same_prologue(const JitExecutor& a, const JitExecutor& b, const QuantParams& pa, const QuantParams& pb) {
    const jit::CpuKernelSpec &x = a.spec(), &y = b.spec();
    return x.format.k == y.format.k && x.padded_k() == y.padded_k() && x.group_rows() == y.group_rows() &&
           x.activation_group_rows() == y.activation_group_rows() &&
           x.num_groups() == y.num_groups() && x.path == y.path &&
           x.int8_activation_max() == y.int8_activation_max() &&
           simd_family(x.isa.level()) == simd_family(y.isa.level()) && a.activation_row_order(pa) == nullptr &&
           b.activation_row_order(pb) == nullptr;
}

bool same_rows(const GroupedRows& a, const GroupedRows& b) {
    return a.count == b.count && (a.rows == b.rows || std::equal(a.rows, a.rows + a.count, b.rows));
}

// Lays out each layer's share of the scratch.
void plan_slots(std::span<const GroupedRows> group, GroupScratch& s) {
    s.slots.clear();
    s.preparing.clear();
    int64_t prepared_rows = 0, tasks = 0;
    size_t x_bytes = 0, meta = 0, partials = 0;
    for (const GroupedRows& member : group) {
        require_grouped_passes(member);
        Slot slot{&member, static_cast<const JitLayer*>(member.layer)};
        const JitExecutor& jit = slot.layer->executor();
        const jit::CpuKernelSpec& spec = jit.spec();
        const int64_t value_bytes = spec.path == jit::ActivationPath::Int8 ? 1 : 4;
        slot.first_task = tasks;
        slot.partial_offset = partials;
        tasks += jit.product_tasks();
        partials += size_t((jit.k_parts() - 1) * member.count * slot.layer->params().n);
        const auto source = std::find_if(s.preparing.begin(), s.preparing.end(), [&](const Slot& earlier) {
            return same_rows(*earlier.member, member) &&
                   same_prologue(earlier.layer->executor(), jit, earlier.layer->params(), slot.layer->params());
        });
        if (source != s.preparing.end()) {
            slot.first_prepared_row = source->first_prepared_row;
            slot.x_offset = source->x_offset;
            slot.meta_offset = source->meta_offset;
        } else {
            slot.first_prepared_row = prepared_rows;
            slot.x_offset = x_bytes;
            slot.meta_offset = meta;
            prepared_rows += member.count;
            x_bytes += size_t(member.count * spec.padded_k() * value_bytes);
            meta += size_t(member.count * spec.num_groups());
            s.preparing.push_back(slot);
        }
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

// Every layer's rows through the activation prologue, as one dispatch over all rows; a layer whose
// rows another's prologue already makes (not in s.preparing) adds none.
void prepare_rows(const float* x, int64_t k, GroupScratch& s, ThreadPool& pool) {
    const int64_t rows = s.preparing.back().first_prepared_row + s.preparing.back().member->count;
    auto prepare = [&](int64_t r) {
        const Slot& slot = slot_holding(s.preparing, r, [](const Slot& e) { return e.first_prepared_row; });
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
    int64_t work = 0, cost = 0;
    for (const Slot& slot : s.slots) {
        work += k * slot.layer->params().n * slot.member->count;
        cost += slot.layer->executor().code_bytes(slot.layer->codes()) * slot.member->count;
    }
    run_product_tasks(pool, tasks, cost, work, [&](int64_t t) {
        const Slot& slot = slot_holding(s.slots, t, [](const Slot& e) { return e.first_task; });
        slot.layer->executor().run_product_task(slot.layer->params(), slot.layer->codes(), prepared_of(slot, s),
                                                slot.member->count, slot.member->out,
                                                s.partials.data() + slot.partial_offset, t - slot.first_task);
    });
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
