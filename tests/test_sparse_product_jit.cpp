// The generated kernels of the flash FFN's sparse passes (jit/x86/sparse_product_kernel.hpp,
// runtime/flash/sparse_product_jit.hpp) against oracles in double over the dequantized vectors:
// the gate and up products over the int8 activations they read, the down sums over fp32
// activations, on every bit width, zero-point kind, scale type, group size (per column included),
// d_model off the block and the chunk of eight groups, 1 to 6 rows, whole and partial block
// ranges, every tiling and every instruction set the CPU runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "format/packed_codes.hpp"
#include "format/reference.hpp"
#include "quant/quantize_rtn.hpp"
#include "runtime/flash/neuron_cache_data.hpp"
#include "runtime/flash/sparse_product_jit.hpp"
#include "test_support.hpp"
#include "tuner/cpu_isa.hpp"

namespace qjit {
namespace {

struct ProductCase {
    int bits = 4;
    int64_t group_size = 32;
    int zeros = 0;  // 0 asymmetric, 1 symmetric, 2 float offsets
    ScaleType scales = ScaleType::F16;
    int64_t d_model = 100;
    int64_t d_ff = 23;
};

std::string describe(const ProductCase& c) {
    return concat("q", c.bits, " g", c.group_size, c.zeros == 0 ? " asym" : c.zeros == 1 ? " sym" : " float-offsets",
                  c.scales == ScaleType::F16 ? " f16" : " f32", " d_model ", c.d_model, " d_ff ", c.d_ff);
}

// A cache holding every neuron's up vector of a random layer, and that layer dequantized.
struct Layer {
    NeuronFileHeader header;
    std::vector<float> dense;  // [d_model][d_ff]
    std::unique_ptr<NeuronCache> cache;
};

Layer make_layer(const ProductCase& c, uint32_t seed) {
    Layer layer;
    NeuronFileHeader& h = layer.header;
    h.layers = 1;
    h.d_model = c.d_model;
    h.d_ff = c.d_ff;
    WeightFormat f;
    f.bits = c.bits;
    f.group_size = std::min(c.group_size, c.d_model);
    f.symmetric = c.zeros == 1;
    f.float_offsets = c.zeros == 2;
    f.scale_type = c.scales;
    h.vector = quantized_vector_layout(f, c.d_model);
    const std::vector<float> w = test::random_floats(size_t(c.d_model * c.d_ff), seed);
    const QuantizedMatrix q = quantize_rtn(h.vector.format, c.d_model, c.d_ff, w.data());
    layer.dense = dequantize(q);
    const PackedCodes packed = pack_codes(q.codes.data(), q.params.bits, c.d_model, c.d_ff, 8);
    std::vector<uint8_t> vector(size_t(h.vector.bytes()));
    std::vector<int32_t> neurons(size_t(c.d_ff));
    std::iota(neurons.begin(), neurons.end(), 0);
    std::shuffle(neurons.begin(), neurons.end(), std::mt19937(seed));
    layer.cache = std::make_unique<NeuronCache>(h, c.d_ff, 0);
    NeuronCache::TokenPlan plan;
    layer.cache->begin_token(neurons, plan);
    for (size_t i = 0; i < plan.missing.size(); ++i) {
        encode_quantized_vector(h.vector, q, packed, plan.missing[i], vector.data());
        layer.cache->fill(plan.missing_slots[i], NeuronPart::Up, vector.data());
    }
    return layer;
}

// Checks the prepared activations against x (each within half its group's step of it) and returns
// them dequantized in row order.
std::vector<double> prepared_in_row_order(const jit::SparseProductSpec& spec, const SparseActivations& a,
                                          const float* x, int64_t m) {
    const int64_t k = spec.format.k, group_rows = spec.group_blocks() * 32;
    std::vector<double> out(size_t(m * k));
    for (int64_t r = 0; r < m; ++r)
        for (int64_t b = 0; b < spec.x_stride() / 32; ++b)
            for (int i = 0; i < 32; ++i) {
                const int64_t row = b * 32 + jit::sparse_block_row(spec.format.bits, i);
                const int8_t q = a.values[size_t(r * spec.x_stride() + b * 32 + i)];
                if (row >= k) {
                    EXPECT_EQ(q, 0) << "padding row " << row;
                    continue;
                }
                const double step = a.scales[size_t(r * spec.padded_groups() + row / group_rows)];
                EXPECT_LE(std::abs(int(q)), spec.activation_max());
                const double value = q * step;
                EXPECT_LE(std::fabs(value - x[r * k + row]), step / 2 * 1.0001 + 1e-30) << "row " << row;
                out[size_t(r * k + row)] = value;
            }
    return out;
}

// The down sums over every block and over the blocks past the first (when there are two or more):
// y + the oracle inside the range, y unchanged outside.
void check_down(const Layer& layer, const SparseProductJit& kernels, const std::vector<int32_t>& slots, int64_t m,
                uint32_t seed) {
    const int64_t k = layer.header.d_model, n = layer.header.d_ff, count = int64_t(slots.size());
    const int64_t blocks = (k + 31) / 32;
    const std::vector<float> a = test::random_floats(size_t(m * count), seed + 50);
    const std::vector<float> y0 = test::random_floats(size_t(m * k), seed + 51);
    for (int64_t b0 : {int64_t(0), std::min<int64_t>(1, blocks - 1)}) {
        std::vector<float> y = y0;
        kernels.down(layer.cache->data().vectors[int(NeuronPart::Up)].data(), slots.data(), count, a.data(), m, b0,
                     blocks, y.data());
        for (int64_t r = 0; r < m; ++r)
            for (int64_t j = 0; j < k; ++j) {
                const size_t at = size_t(r * k + j);
                if (j < b0 * 32) {
                    ASSERT_EQ(y[at], y0[at]) << "row " << j << " outside the blocks from " << b0;
                    continue;
                }
                double expected = y0[at], magnitude = std::fabs(double(y0[at]));
                for (int64_t i = 0; i < count; ++i) {
                    const double term = double(a[size_t(r * count + i)]) *
                                        layer.dense[size_t(j * n + layer.cache->neuron_at(slots[size_t(i)]))];
                    expected += term;
                    magnitude += std::fabs(term);
                }
                ASSERT_NEAR(y[at], expected, 2 * (count + 8) * FLT_EPSILON * magnitude)
                    << "down: row " << j << " of y row " << r << " m " << m << " blocks from " << b0;
            }
    }
}

void run_case(const ProductCase& c, uint32_t seed) {
    SCOPED_TRACE(describe(c));
    const Layer layer = make_layer(c, seed);
    const NeuronCache::Data& d = layer.cache->data();
    const int64_t k = c.d_model, n = c.d_ff;
    // Slots in a random order, some twice.
    std::mt19937 random(seed);
    std::vector<int32_t> slots(size_t(n + 3));
    for (int32_t& s : slots) s = int32_t(random() % uint32_t(n));
    const int64_t count = int64_t(slots.size());

    for (qjit_isa level : {QJIT_ISA_AVX2, QJIT_ISA_AVX2_VNNI, QJIT_ISA_AVX512, QJIT_ISA_AVX512_VNNI}) {
        if (!cpu_supports(level)) continue;
        const jit::IsaFeatures isa = jit::IsaFeatures::of(level);
        for (const auto& [vectors, blocks] : {std::pair{1, 1}, {2, 2}, {3, 1}, {4, 2}})
            for (int prefetch = 0; prefetch <= 1; ++prefetch) {
                const SparseProductJit kernels(d, isa, {.vectors = vectors, .blocks = blocks, .prefetch = prefetch});
                SCOPED_TRACE(kernels.describe());
                for (int64_t m : {1, 2, 3, 4, 6}) {
                    const std::vector<float> x = test::random_floats(size_t(m * k), seed + uint32_t(m), -2.0f, 2.0f);
                    SparseActivations prepared;
                    kernels.prepare(x.data(), m, prepared);
                    jit::SparseProductSpec spec;
                    spec.format = d.header.vector.format;
                    spec.format.k = k;
                    spec.isa = isa;
                    const std::vector<double> xq = prepared_in_row_order(spec, prepared, x.data(), m);
                    std::vector<float> out(size_t(count * m), NAN);
                    kernels.products(d.vectors[int(NeuronPart::Up)].data(), slots.data(), count, prepared, m,
                                     out.data());
                    for (int64_t i = 0; i < count; ++i)
                        for (int64_t r = 0; r < m; ++r) {
                            const int32_t neuron = layer.cache->neuron_at(slots[size_t(i)]);
                            double expected = 0, magnitude = 0;
                            for (int64_t j = 0; j < k; ++j) {
                                const double term = xq[size_t(r * k + j)] * layer.dense[size_t(j * n + neuron)];
                                expected += term;
                                magnitude += std::fabs(term);
                            }
                            // Exact integer sums; fp32 roundings of the group factors and the sums.
                            ASSERT_NEAR(out[size_t(i * m + r)], expected, 2e-6 * magnitude + 1e-30)
                                << "slot " << i << " row " << r << " m " << m;
                        }
                    check_down(layer, kernels, slots, m, seed);
                }
            }
    }
}

// check_spec throws an Error with `status` naming the kernel.
void expect_refused(qjit_status status, const jit::SparseProductSpec& spec) {
    try {
        jit::check_spec(spec);
        ADD_FAILURE() << jit::kernel_name(spec) << " was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), status) << e.what();
        EXPECT_NE(std::string(e.what()).find(jit::kernel_name(spec)), std::string::npos) << e.what();
    }
}

bool runs_generated_kernels() { return cpu_supports(QJIT_ISA_AVX2); }

TEST(SparseProductJit, MatchesTheOracleOnEveryFormat) {
    if (!runs_generated_kernels()) GTEST_SKIP() << "the CPU lacks AVX2";
    uint32_t seed = 1;
    struct Shape {
        int64_t d_model, group_size;
    };
    // Off the 32-row block; one group of a partial block; per column; 64-row groups ending in a
    // partial group; more than a chunk of eight groups with a tail.
    const Shape shapes[] = {{100, 32}, {80, 64}, {45, 1 << 20}, {300, 128}, {1000, 32}};
    for (const Shape& shape : shapes)
        for (int bits : {2, 3, 4, 8})
            for (int zeros : {0, 1, 2})
                for (ScaleType scales : {ScaleType::F16, ScaleType::F32})
                    run_case({.bits = bits, .group_size = shape.group_size, .zeros = zeros, .scales = scales,
                              .d_model = shape.d_model, .d_ff = 11},
                             seed++);
}

// The tuning database's text of a tiling: every knob round-trips, and a malformed item is refused
// by name (the database's records are read through it).
TEST(SparseProductJit, TilingTextRoundTripsAndRefusesMalformedItems) {
    for (int vectors = 1; vectors <= 4; ++vectors)
        for (int blocks = 1; blocks <= 2; ++blocks)
            for (int prefetch = 0; prefetch <= 1; ++prefetch) {
                const jit::SparseProductTiling t{vectors, blocks, prefetch};
                EXPECT_EQ(jit::parse_sparse_tiling(jit::tiling_text(t)), t) << jit::tiling_text(t);
            }
    EXPECT_EQ(jit::parse_sparse_tiling("prefetch=1"), (jit::SparseProductTiling{1, 1, 1}));
    for (const char* bad : {"", "vectors", "vectors=", "vectors=12", "vectors=x", "width=2", "vectors=2,,prefetch=1"}) {
        try {
            jit::parse_sparse_tiling(bad);
            ADD_FAILURE() << "'" << bad << "' was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), QJIT_ERROR_INVALID_ARGUMENT) << bad;
            EXPECT_NE(std::string(e.what()).find("sparse tiling"), std::string::npos) << e.what();
        }
    }
}

TEST(SparseProductJit, RefusesWhatItDoesNotCompute) {
    WeightFormat f;
    f.bits = 4;
    f.group_size = 16;
    EXPECT_NE(jit::sparse_product_unsupported_reason(f), "");
    f.group_size = 32;
    EXPECT_EQ(jit::sparse_product_unsupported_reason(f), "");
    f.bits = 5;
    EXPECT_NE(jit::sparse_product_unsupported_reason(f), "");

    jit::SparseProductSpec spec;
    spec.format.bits = 4;
    spec.format.group_size = 32;
    spec.format.k = 64;
    spec.format.scale_type = ScaleType::F16;
    spec.vector_bytes = spec.zeros_offset() + spec.groups();
    EXPECT_NO_THROW(jit::check_spec(spec));
    spec.rows = 5;
    expect_refused(QJIT_ERROR_INVALID_ARGUMENT, spec);
    spec.rows = 4;
    spec.tiling.vectors = 4;  // 4 x 4 accumulators and totals: more than 16 registers
    expect_refused(QJIT_ERROR_INVALID_ARGUMENT, spec);
    spec.pass = jit::SparsePass::Down;
    spec.tiling.vectors = 1;
    spec.rows = 2;
    spec.tiling.blocks = 2;  // 2 x 2 x 5 sums and offsets: more than 16 registers
    expect_refused(QJIT_ERROR_INVALID_ARGUMENT, spec);
    spec.tiling.blocks = 1;
    EXPECT_NO_THROW(jit::check_spec(spec));
    spec.rows = 3;
    expect_refused(QJIT_ERROR_INVALID_ARGUMENT, spec);
    spec.rows = 1;
    spec.tiling.vectors = 1;
    spec.vector_bytes += 1;
    expect_refused(QJIT_ERROR_INVALID_ARGUMENT, spec);
}

}  // namespace
}  // namespace qjit
