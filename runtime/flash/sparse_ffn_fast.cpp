// The fast path of the sparse FFN: gate and up products of each slot's vectors (contiguous, so a
// token's slots cost the same wherever they lie), the activations of the slots, then the down rows
// added to y with d_model split across the threads (no partial sums to reduce).
#include <algorithm>
#include <vector>

#include "runtime/flash/sparse_ffn_internal.hpp"
#include "runtime/flash/sparse_ffn_kernels.hpp"

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
};

Scratch& scratch() {
    thread_local Scratch s;
    return s;
}

// The products of each slot's gate and up vectors with the m rows of x: gate/up[i * m + r].
void gate_up(const Data& d, std::span<const int32_t> slots, const float* x, int64_t m, ThreadPool& pool,
             Scratch& s) {
    const int64_t count = int64_t(slots.size());
    const bool gated = d.has(NeuronPart::Gate);
    if (d.quantized) {
        // x padded to whole blocks (the codes past d_model dequantize to -s * z, not 0), and the sum
        // of each group's x for the zero points.
        const int64_t x_stride = d.blocks * 32;
        s.x_padded.assign(size_t(m * x_stride), 0.0f);
        s.x_sums.assign(size_t(m * d.groups), 0.0f);
        for (int64_t r = 0; r < m; ++r) {
            std::copy_n(x + r * d.d_model, d.d_model, s.x_padded.data() + r * x_stride);
            for (int64_t k = 0; k < d.d_model; ++k)
                s.x_sums[size_t(r * d.groups + k / d.group_size)] += x[r * d.d_model + k];
        }
    }
    s.gate.resize(size_t(count * m));
    s.up.resize(size_t(count * m));
    const auto products = [&](NeuronPart part, int64_t i, float* out) {
        if (d.quantized) column_products(d, part, slots[i], s.x_padded.data(), s.x_sums.data(), m, out);
        else f16_products(d.f16_row(part, slots[i]), x, m, d.d_model, out);
    };
    auto task = [&](int64_t t) {
        for (int64_t i = t * kSlotsPerTask; i < std::min(count, (t + 1) * kSlotsPerTask); ++i) {
            if (i + 1 < count) {  // the next slot's vectors, while this one's are summed
                if (gated) prefetch_bytes(d.vector(NeuronPart::Gate, slots[i + 1]), d.vector_bytes);
                prefetch_bytes(d.vector(NeuronPart::Up, slots[i + 1]), d.vector_bytes);
            }
            if (gated) products(NeuronPart::Gate, i, s.gate.data() + i * m);
            products(NeuronPart::Up, i, s.up.data() + i * m);
        }
    };
    pool.parallel_for((count + kSlotsPerTask - 1) / kSlotsPerTask, task,
                      count * d.d_model * m * (gated ? 2 : 1) >= kDispatchWork);
}

}  // namespace

void sparse_ffn_fast(const Data& d, std::span<const int32_t> slots, const float* x, int64_t m, float* y,
                     ThreadPool& pool) {
    Scratch& s = scratch();
    const int64_t count = int64_t(slots.size());
    gate_up(d, slots, x, m, pool, s);

    // The activations (in up's place), then those of the slots with one not 0 (Relu leaves many at
    // exactly 0), which down streams: activations[r * live + j] for slot live_slots[j].
    s.live_slots.clear();
    for (int64_t i = 0; i < count; ++i) {
        const int32_t slot = slots[size_t(i)];
        const float bias = d.bias.empty() ? 0.0f : d.bias[size_t(slot)];
        bool any = false;
        for (int64_t r = 0; r < m; ++r) {
            const size_t at = size_t(i * m + r);
            s.up[at] = ffn_activation(d.header.activation, s.gate[at], s.up[at], bias);
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
        if (d.quantized)
            down_accumulate(d, s.live_slots.data(), live, s.activations.data(), m, b0, b1, y);
        else
            f16_down_accumulate(d, s.live_slots.data(), live, s.activations.data(), m, b0 * 32,
                                std::min(d.d_model, b1 * 32), y);
    };
    pool.parallel_for(tasks, down, live * d.d_model * m >= kDispatchWork);
}

}  // namespace qjit
