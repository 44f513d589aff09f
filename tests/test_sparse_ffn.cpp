// The sparse FFN over a cache's slots against the dense oracle restricted to the same neurons.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "base/half.hpp"
#include "format/packed_codes.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/reference.hpp"
#include "runtime/flash/sparse_ffn.hpp"
#include "runtime/flash/sparse_ffn_kernels.hpp"
#include "test_support.hpp"

namespace qjit {
namespace {

struct FfnCase {
    VectorCoding coding = VectorCoding::Quantized;
    int bits = 4;
    int64_t group_size = 32;  // k: per column
    bool symmetric = false;
    bool float_offsets = false;
    ScaleType scale_type = ScaleType::F32;
    FfnActivation activation = FfnActivation::SwiGlu;
    int64_t d_model = 100;
    int64_t d_ff = 37;
    int64_t m = 1;
    int64_t capacity = 0;  // 0: d_ff, every neuron resident
    int64_t active = 0;    // slots run: 0 for d_ff / 2 + 1 random ones of those resident ...
    bool compact = false;  // ... or the first `active` slots
};

std::string describe(const FfnCase& c) {
    return std::string(c.coding == VectorCoding::F16 ? "f16" : "q") + " bits " + std::to_string(c.bits) +
           " g" + std::to_string(c.group_size) + (c.symmetric ? " sym" : c.float_offsets ? " float-offsets" : " asym") +
           (c.scale_type == ScaleType::F16 ? " f16-scales" : " f32-scales") +
           (c.activation == FfnActivation::Relu ? " relu" : " swiglu") + " d_model " + std::to_string(c.d_model) +
           " d_ff " + std::to_string(c.d_ff) + " m " + std::to_string(c.m) +
           " capacity " + std::to_string(c.capacity) + " active " + std::to_string(c.active) +
           (c.compact ? " compact" : "");
}

// One part of the layer (a d_model x d_ff matrix): its dense oracle values W[k][n] and, per weight,
// the absolute terms its rounding errors scale with (test_support.hpp's weight_terms).
struct Part {
    std::vector<float> dense;
    std::vector<double> terms;
    std::vector<uint8_t> vectors;  // [d_ff][vector bytes]
};

Part make_part(const NeuronFileHeader& h, uint32_t seed) {
    const int64_t k = h.d_model, n = h.d_ff, bytes = h.vector.bytes();
    const std::vector<float> w = test::random_floats(size_t(k * n), seed);
    Part p;
    p.vectors.resize(size_t(n * bytes));
    if (h.vector.coding == VectorCoding::F16) {
        p.dense.resize(w.size());
        p.terms.resize(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
            p.dense[i] = half_to_float(float_to_half(w[i]));
            p.terms[i] = std::fabs(double(p.dense[i]));
        }
        for (int64_t c = 0; c < n; ++c) encode_f16_vector(h.vector, w.data() + c, n, p.vectors.data() + c * bytes);
        return p;
    }
    const QuantizedMatrix q = quantize_rtn(h.vector.format, k, n, w.data());
    p.dense = dequantize(q);
    p.terms.resize(w.size());
    for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c) {
            const size_t meta = size_t(r / q.params.group_size * n + c);
            p.terms[size_t(r * n + c)] = test::weight_terms(q.params, meta, q.codes[size_t(r * n + c)]);
        }
    const PackedCodes packed = pack_codes(q.codes.data(), q.params.bits, k, n, 8);
    for (int64_t c = 0; c < n; ++c) encode_quantized_vector(h.vector, q, packed, c, p.vectors.data() + c * bytes);
    return p;
}

NeuronFileHeader header_for(const FfnCase& c) {
    NeuronFileHeader h;
    h.layers = 1;
    h.d_model = c.d_model;
    h.d_ff = c.d_ff;
    h.activation = c.activation;
    h.has_bias = c.activation == FfnActivation::Relu;
    if (c.coding == VectorCoding::F16) {
        h.vector = f16_vector_layout(c.d_model);
    } else {
        WeightFormat f;
        f.bits = c.bits;
        f.group_size = std::min(c.group_size, c.d_model);
        f.symmetric = c.symmetric;
        f.float_offsets = c.float_offsets;
        f.scale_type = c.scale_type;
        h.vector = quantized_vector_layout(f, c.d_model);
    }
    return h;
}

void run_case(const FfnCase& c, ThreadPool& pool, uint32_t seed) {
    SCOPED_TRACE(describe(c));
    const NeuronFileHeader h = header_for(c);
    const int64_t k = c.d_model, n = c.d_ff, m = c.m;
    const bool gated = c.activation == FfnActivation::SwiGlu;
    const Part up = make_part(h, seed), down = make_part(h, seed + 1);
    const Part gate = gated ? make_part(h, seed + 2) : Part{};
    const std::vector<float> bias = test::random_floats(size_t(n), seed + 3, -0.3f, 0.3f);
    const std::vector<float> x = test::random_floats(size_t(m * k), seed + 4);
    const std::vector<float> y0 = test::random_floats(size_t(m * k), seed + 5);

    // capacity neurons resident (every one by default), in shuffled slots.
    const int64_t capacity = c.capacity > 0 ? c.capacity : n;
    std::mt19937 rng(seed);
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(size_t(capacity));
    NeuronCache cache(h, capacity, 0);
    NeuronCache::TokenPlan plan;
    cache.begin_token(order, plan);
    const int64_t bytes = h.vector.bytes();
    for (size_t i = 0; i < plan.missing.size(); ++i) {
        const int32_t neuron = plan.missing[i], slot = plan.missing_slots[i];
        if (gated) cache.fill(slot, NeuronPart::Gate, gate.vectors.data() + neuron * bytes);
        cache.fill(slot, NeuronPart::Up, up.vectors.data() + neuron * bytes);
        cache.fill(slot, NeuronPart::Down, down.vectors.data() + neuron * bytes);
        if (h.has_bias) cache.fill_bias(slot, bias[size_t(neuron)]);
    }
    // A random subset of the slots, in random order, or the first ones.
    std::vector<int32_t> slots(plan.slots.begin(), plan.slots.end());
    if (c.compact) std::sort(slots.begin(), slots.end());
    else std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(size_t(c.active > 0 ? c.active : n / 2 + 1));

    // The oracle, in double, with its error bound: each product's as forward_error_bound derives it,
    // carried through the activation (silu' <= 1.1), then the down sums' own roundings.
    const double eps = FLT_EPSILON;
    const double steps = c.coding == VectorCoding::F16
                             ? double(k + 3)
                             : double(std::min(h.vector.format.group_size, k) + h.vector.format.num_groups() + 3);
    // The generated products read x as int8 per row and group: each value within half a step of
    // its group's largest magnitude / 63 (127 with VNNI or below 8 bits; the bound takes 63).
    const int64_t jit_group = c.coding == VectorCoding::F16 ? k : std::min(h.vector.format.group_size, k) < 32 ? 32
                                                                  : std::min(h.vector.format.group_size, k);
    std::vector<float> expected = y0;
    std::vector<double> bound(size_t(m * k), 0.0), jit_bound(size_t(m * k), 0.0);
    const int64_t count = int64_t(slots.size());
    for (int64_t r = 0; r < m; ++r) {
        const float* xr = x.data() + r * k;
        std::vector<double> half_step(size_t(k), 0.0);
        for (int64_t g0 = 0; g0 < k; g0 += jit_group) {
            double amax = 0;
            for (int64_t i = g0; i < std::min(k, g0 + jit_group); ++i) amax = std::max(amax, std::fabs(double(xr[i])));
            for (int64_t i = g0; i < std::min(k, g0 + jit_group); ++i) half_step[size_t(i)] = amax / 63 / 2 * 1.001;
        }
        std::vector<double> y(y0.begin() + r * k, y0.begin() + (r + 1) * k);
        std::vector<double> carried(size_t(k), 0.0), jit_carried(size_t(k), 0.0), terms(size_t(k), 0.0);
        for (int32_t slot : slots) {
            const int32_t neuron = cache.neuron_at(slot);
            double g = 0, u = 0, tg = 0, tu = 0, qg = 0, qu = 0;
            for (int64_t i = 0; i < k; ++i) {
                const size_t at = size_t(i * n + neuron);
                u += double(xr[i]) * up.dense[at];
                tu += std::fabs(double(xr[i])) * up.terms[at];
                qu += half_step[size_t(i)] * std::fabs(double(up.dense[at]));
                if (gated) {
                    g += double(xr[i]) * gate.dense[at];
                    tg += std::fabs(double(xr[i])) * gate.terms[at];
                    qg += half_step[size_t(i)] * std::fabs(double(gate.dense[at]));
                }
            }
            // The activation's error from its products' errors eg and eu.
            const auto activation_error = [&](double eg, double eu) {
                if (!gated) return eu + 2 * eps * (std::fabs(u) + std::fabs(bias[size_t(neuron)]));
                const double silu = g / (1 + std::exp(-g));
                return 1.1 * eg * (std::fabs(u) + eu) + std::fabs(silu) * eu + 8 * eps * std::fabs(silu * u);
            };
            const double eg = 2 * steps * eps * tg, eu = 2 * steps * eps * tu;
            const double ea = activation_error(eg, eu), jit_ea = activation_error(eg + 1.01 * qg, eu + 1.01 * qu);
            const double a = gated ? g / (1 + std::exp(-g)) * u : std::max(0.0, u + bias[size_t(neuron)]);
            for (int64_t i = 0; i < k; ++i) {
                const size_t at = size_t(i * n + neuron);
                y[size_t(i)] += a * down.dense[at];
                carried[size_t(i)] += ea * std::fabs(double(down.dense[at]));
                jit_carried[size_t(i)] += jit_ea * std::fabs(double(down.dense[at]));
                terms[size_t(i)] += std::fabs(a) * down.terms[at];
            }
        }
        for (int64_t i = 0; i < k; ++i) {
            expected[size_t(r * k + i)] = float(y[size_t(i)]);
            // The activations' errors carried through down, then the down sum's own roundings: at
            // most count + 4 on a path, each of the running sum (y0 and the absolute terms).
            const double running = terms[size_t(i)] + std::fabs(double(y0[size_t(r * k + i)]));
            const double sums = (count + 4) * eps * running;
            bound[size_t(r * k + i)] = 2 * (carried[size_t(i)] + sums) + 1e-30;
            jit_bound[size_t(r * k + i)] = 2 * (jit_carried[size_t(i)] + sums) + 1e-30;
        }
    }
    // The fast path with every kernel variant the CPU runs, then the portable path.
    const SparseFfnKernels variants[] = {SparseFfnKernels::Jit, SparseFfnKernels::Avx2, SparseFfnKernels::Baseline,
                                         SparseFfnKernels::Fastest};
    const char* names[] = {"fast, generated products", "fast, AVX2 kernels", "fast, baseline kernels", "portable"};
    for (int variant = 0; variant < 4; ++variant) {
        if (!sparse_ffn_kernels_supported(variants[variant])) continue;
        const SparseFfnPath path = variant < 3 ? SparseFfnPath::Fast : SparseFfnPath::Portable;
        SCOPED_TRACE(names[variant]);
        use_sparse_ffn_kernels(variants[variant]);
        std::vector<float> y = y0;
        sparse_ffn_accumulate(cache, slots, x.data(), m, y.data(), pool, path);
        test::expect_within(y, expected, variant == 0 ? jit_bound : bound);

        std::vector<float> unchanged = y0;
        sparse_ffn_accumulate(cache, {}, x.data(), m, unchanged.data(), pool, path);
        EXPECT_EQ(unchanged, y0);
        use_sparse_ffn_kernels(exact_sparse_ffn_kernels());
    }
}

TEST(SparseFfn, MatchesTheDenseOracleOnItsNeurons) {
    ThreadPool pool(3);
    uint32_t seed = 100;
    struct Shape {
        int64_t d_model, d_ff, group_size;
    };
    const Shape shapes[] = {{100, 37, 32}, {129, 45, 16}, {64, 21, 1 << 20}, {96, 19, 64}};
    for (FfnActivation activation : {FfnActivation::SwiGlu, FfnActivation::Relu})
        for (const Shape& shape : shapes)
            for (int64_t m : {1, 3, 6}) {
                for (int bits : {2, 3, 4, 8})
                    for (int zeros : {0, 1, 2})  // asymmetric, symmetric, float offsets
                        for (ScaleType scales : {ScaleType::F32, ScaleType::F16})
                            run_case({.bits = bits, .group_size = shape.group_size, .symmetric = zeros == 1,
                                      .float_offsets = zeros == 2, .scale_type = scales, .activation = activation,
                                      .d_model = shape.d_model, .d_ff = shape.d_ff, .m = m},
                                     pool, seed++);
                run_case({.coding = VectorCoding::F16, .activation = activation, .d_model = shape.d_model,
                          .d_ff = shape.d_ff, .m = m},
                         pool, seed++);
            }
}

// Large enough that the thread pool shares the work, with more rows than a kernel takes at once.
TEST(SparseFfn, MatchesTheOracleAcrossThreads) {
    ThreadPool pool(3);
    run_case({.bits = 4, .group_size = 128, .activation = FfnActivation::SwiGlu, .d_model = 1000, .d_ff = 300, .m = 5},
             pool, 7);
    run_case({.bits = 3, .group_size = 16, .symmetric = true, .scale_type = ScaleType::F16,
              .activation = FfnActivation::Relu, .d_model = 700, .d_ff = 260, .m = 2},
             pool, 8);
    run_case({.coding = VectorCoding::F16, .activation = FfnActivation::SwiGlu, .d_model = 1000, .d_ff = 300, .m = 3},
             pool, 9);
}

// More groups than a kernel converts at once (64), the last of them partial.
TEST(SparseFfn, MatchesTheOracleOverManyGroups) {
    ThreadPool pool(2);
    run_case({.bits = 4, .group_size = 16, .scale_type = ScaleType::F16, .activation = FfnActivation::SwiGlu,
              .d_model = 2100, .d_ff = 24, .m = 2},
             pool, 11);
    run_case({.bits = 2, .group_size = 32, .float_offsets = true, .activation = FfnActivation::Relu, .d_model = 2100,
              .d_ff = 24, .m = 1},
             pool, 12);
}

// A few active slots scattered over a large cache, and the first slots of a cache of few.
TEST(SparseFfn, MatchesTheOracleOnScatteredAndCompactSlots) {
    ThreadPool pool(2);
    uint32_t seed = 40;
    for (bool compact : {false, true})
        for (int64_t m : {1, 3, 6}) {
            run_case({.bits = 4, .group_size = 128, .scale_type = ScaleType::F16, .activation = FfnActivation::Relu,
                      .d_model = 300, .d_ff = 400, .m = m, .capacity = compact ? 24 : 400, .active = 13,
                      .compact = compact},
                     pool, seed++);
            run_case({.bits = 3, .group_size = 16, .float_offsets = true, .activation = FfnActivation::SwiGlu,
                      .d_model = 200, .d_ff = 150, .m = m, .capacity = compact ? 10 : 150, .active = 5,
                      .compact = compact},
                     pool, seed++);
        }
}

}  // namespace
}  // namespace qjit
