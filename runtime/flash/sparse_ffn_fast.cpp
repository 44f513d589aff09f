// The fast path of the sparse FFN: gate and up products of each slot's vectors (contiguous, so a
// token's slots cost the same wherever they lie), the activations of the slots (from the gate
// activations given, when the cache holds no gates), then the down rows added to y with d_model
// split across the threads (no partial sums to reduce).
#include <algorithm>
#include <span>
#include <vector>

#include "runtime/flash/sparse_ffn_internal.hpp"
#include "runtime/flash/sparse_ffn_kernels.hpp"
#include "runtime/flash/sparse_product_jit.hpp"

namespace qjit {

namespace {

using Data = NeuronCache::Data;
constexpr int64_t kDispatchWork = int64_t(1) << 16;  // multiply-adds below which one thread does it all
// 1024 outputs: y's share stays in L1, and each down row is read in runs of 512 bytes (4-bit),
// long enough for the prefetchers across the scattered slots.
constexpr int64_t kDownBlocksPerTask = 32;
constexpr int64_t kSlotsPerTask = 8;  // gate and up products: a few vectors a task, to amortize dispatch

// Buffers reused across calls, so a steady decode loop does not allocate.
struct Scratch {
    std::vector<float> x_padded, x_sums, gate, up, activations;
    std::vector<int32_t> live_slots;
    SparseActivations int8_x;  // x for the generated products
};

Scratch& scratch() {
    thread_local Scratch s;
    return s;
}

// x as the products read it: for the generated ones, int8 in their layout; for column_products,
// padded to whole blocks (the codes past d_model dequantize to -s * z, not 0), with the sum of
// each group's x for the zero points.
void prepare_x(const Data& d, const SparseProductJit* jit, const float* x, int64_t m, Scratch& s) {
    if (jit != nullptr) return jit->prepare(x, m, s.int8_x);
    if (!d.quantized) return;
    const int64_t x_stride = d.blocks * 32;
    s.x_padded.assign(size_t(m * x_stride), 0.0f);
    s.x_sums.assign(size_t(m * d.groups), 0.0f);
    for (int64_t r = 0; r < m; ++r) {
        std::copy_n(x + r * d.d_model, d.d_model, s.x_padded.data() + r * x_stride);
        for (int64_t k = 0; k < d.d_model; ++k) s.x_sums[size_t(r * d.groups + k / d.group_size)] += x[r * d.d_model + k];
    }
}

// The products of each slot's vectors of `parts` with the m rows of x (prepared):
// outs[p][i * m + r].
void products(const Data& d, const SparseProductJit* jit, std::span<const NeuronPart> parts, float* const* outs,
              std::span<const int32_t> slots, const float* x, int64_t m, ThreadPool& pool, const Scratch& s) {
    const int64_t count = int64_t(slots.size());
    const auto product = [&](NeuronPart part, int64_t i, float* out) {
        if (d.quantized) column_products(d, part, slots[i], s.x_padded.data(), s.x_sums.data(), m, out);
        else f16_products(d.isa, d.f16_row(part, slots[i]), x, m, d.d_model, out);
    };
    auto task = [&](int64_t t) {
        if (jit != nullptr) {  // the kernel prefetches the next slots' vectors itself
            const int64_t i0 = t * kSlotsPerTask, n = std::min(count, i0 + kSlotsPerTask) - i0;
            for (size_t p = 0; p < parts.size(); ++p)
                jit->products(d.vectors[int(parts[p])].data(), slots.data() + i0, n, s.int8_x, m, outs[p] + i0 * m);
            return;
        }
        for (int64_t i = t * kSlotsPerTask; i < std::min(count, (t + 1) * kSlotsPerTask); ++i) {
            if (i + 1 < count)  // the next slot's vectors, while this one's are summed
                for (NeuronPart part : parts) prefetch_bytes(d.vector(part, slots[i + 1]), d.vector_bytes);
            for (size_t p = 0; p < parts.size(); ++p) product(parts[p], i, outs[p] + i * m);
        }
    };
    pool.parallel_for((count + kSlotsPerTask - 1) / kSlotsPerTask, task,
                      count * d.d_model * m * int64_t(parts.size()) >= kDispatchWork);
}

}  // namespace

void sparse_products_fast(const Data& d, NeuronPart part, std::span<const int32_t> slots, const float* x, int64_t m,
                          float* out, ThreadPool& pool, bool int8_products) {
    Scratch& s = scratch();
    const SparseProductJit* jit = int8_products ? sparse_product_jit(d) : nullptr;
    prepare_x(d, jit, x, m, s);
    const NeuronPart parts[] = {part};
    products(d, jit, parts, &out, slots, x, m, pool, s);
}

void sparse_ffn_fast(const Data& d, std::span<const int32_t> slots, const float* x, int64_t m, float* y,
                     ThreadPool& pool, const float* gate_activations, bool int8_products) {
    Scratch& s = scratch();
    const int64_t count = int64_t(slots.size());
    // The generated kernels (one registry lookup a call): the down sums are fp32 either way, the
    // products only take them with int8 x.
    const SparseProductJit* generated = sparse_product_jit(d);
    const SparseProductJit* jit = int8_products ? generated : nullptr;
    prepare_x(d, jit, x, m, s);
    s.gate.resize(size_t(count * m));
    s.up.resize(size_t(count * m));
    const bool gated = d.has(NeuronPart::Gate);
    if (gated) {
        const NeuronPart parts[] = {NeuronPart::Gate, NeuronPart::Up};
        float* const outs[] = {s.gate.data(), s.up.data()};
        products(d, jit, parts, outs, slots, x, m, pool, s);
    } else {
        const NeuronPart parts[] = {NeuronPart::Up};
        float* const outs[] = {s.up.data()};
        products(d, jit, parts, outs, slots, x, m, pool, s);
    }

    // The activations (in up's place), then those of the slots with one not 0 (Relu leaves many at
    // exactly 0), which down streams: activations[r * live + j] for slot live_slots[j].
    s.live_slots.clear();
    for (int64_t i = 0; i < count; ++i) {
        const int32_t slot = slots[size_t(i)];
        const float bias = d.bias.empty() ? 0.0f : d.bias[size_t(slot)];
        bool any = false;
        for (int64_t r = 0; r < m; ++r) {
            const size_t at = size_t(i * m + r);
            s.up[at] = gate_activations != nullptr ? gate_activations[at] * s.up[at]
                                                   : ffn_activation(d.header.activation, s.gate[at], s.up[at], bias);
            any |= s.up[at] != 0.0f;
        }
        if (any) {
            std::copy_n(s.up.data() + i * m, m, s.up.data() + int64_t(s.live_slots.size()) * m);
            s.live_slots.push_back(slot);
        }
    }
    const int64_t live = int64_t(s.live_slots.size());
    s.activations.resize(size_t(m * live));
    for (int64_t j = 0; j < live; ++j)
        for (int64_t r = 0; r < m; ++r) s.activations[size_t(r * live + j)] = s.up[size_t(j * m + r)];

    const int64_t blocks = (d.d_model + 31) / 32;
    const int64_t tasks = (blocks + kDownBlocksPerTask - 1) / kDownBlocksPerTask;
    auto down = [&](int64_t t) {
        const int64_t b0 = t * kDownBlocksPerTask, b1 = std::min(blocks, b0 + kDownBlocksPerTask);
        if (generated != nullptr)
            generated->down(d.vectors[int(NeuronPart::Down)].data(), s.live_slots.data(), live, s.activations.data(), m,
                           b0, b1, y);
        else if (d.quantized)
            down_accumulate(d, s.live_slots.data(), live, s.activations.data(), m, b0, b1, y);
        else
            f16_down_accumulate(d, s.live_slots.data(), live, s.activations.data(), m, b0 * 32,
                                std::min(d.d_model, b1 * 32), y);
    };
    pool.parallel_for(tasks, down, live * d.d_model * m >= kDispatchWork);
}

}  // namespace qjit
