// The grouped mixture-of-experts call (qjit_moe_forward): against one qjit_linear_forward per
// expert with its own gather and scatter, and against the oracle, on odd shapes, every bit width,
// both activation paths, act-order and K-split layers, the portable path, and bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "format/low_rank.hpp"
#include "quant/quantize_rtn.hpp"
#include "format/reference.hpp"
#include "runtime/linear_layer.hpp"
#include "layer_internals.hpp"
#include "test_support.hpp"
#include "tools/random_gptq.hpp"
#include "tuner/cpu_isa.hpp"
#include "quant/quantize_low_rank.hpp"

namespace qjit {
namespace {

using test::ContextPtr;
using test::LinearPtr;

LinearPtr make_f32_layer(qjit_context* context, int bits, int group, int64_t k, int64_t n, uint32_t seed) {
    const std::vector<float> weights = test::random_floats(size_t(k * n), seed);
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.bits = bits;
    config.group_size = group;
    qjit_linear* layer = nullptr;
    EXPECT_EQ(qjit_linear_create_from_f32(context, &config, k, n, weights.data(), QJIT_LAYOUT_K_BY_N, &layer), QJIT_OK)
        << qjit_last_error();
    return LinearPtr(layer);
}

// A GPTQ layer with act-order: g_idx a shuffle of row / group (GPTQ's desc_act).
LinearPtr make_act_order_layer(qjit_context* context, int bits, int group, int64_t k, int64_t n, uint32_t seed) {
    qjit_tools::GptqTensors tensors;
    qjit_tools::random_gptq(k, n, bits, group, seed, &tensors);
    std::vector<int32_t> g_idx(static_cast<size_t>(k));
    for (int64_t r = 0; r < k; ++r) g_idx[size_t(r)] = int32_t(r / group);
    std::mt19937 rng(seed);
    std::shuffle(g_idx.begin(), g_idx.end(), rng);
    tensors.view.g_idx = g_idx.data();
    qjit_linear* layer = nullptr;
    EXPECT_EQ(qjit_linear_create_from_gptq(context, k, n, &tensors.view, &layer), QJIT_OK) << qjit_last_error();
    if (layer) EXPECT_TRUE(layer->params.act_order);
    return LinearPtr(layer);
}

// Which tokens go to which expert, with gate weights.
struct Routing {
    int64_t tokens = 0;
    std::vector<std::vector<int32_t>> rows;
    std::vector<std::vector<float>> weights;  // empty for an expert: NULL (weight 1)
};

// counts[e] distinct random tokens for expert e (some tokens may go nowhere, some to several).
Routing random_routing(int64_t tokens, const std::vector<int64_t>& counts, bool weighted, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> gate(0.05f, 1.0f);
    Routing routing;
    routing.tokens = tokens;
    for (const int64_t count : counts) {
        std::vector<int32_t> all(static_cast<size_t>(tokens));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(size_t(count));
        routing.rows.push_back(all);
        std::vector<float> w;
        if (weighted)
            for (int64_t i = 0; i < count; ++i) w.push_back(gate(rng));
        routing.weights.push_back(w);
    }
    return routing;
}

// Top-k routing as a router makes it: every token to k distinct experts, weights summing to 1.
Routing top_k_routing(int64_t tokens, int experts, int top_k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> gate(0.05f, 1.0f);
    Routing routing;
    routing.tokens = tokens;
    routing.rows.resize(size_t(experts));
    routing.weights.resize(size_t(experts));
    for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int> order(static_cast<size_t>(experts));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<float> g(static_cast<size_t>(top_k));
        for (float& v : g) v = gate(rng);
        const float total = std::accumulate(g.begin(), g.end(), 0.0f);
        for (int j = 0; j < top_k; ++j) {
            routing.rows[size_t(order[size_t(j)])].push_back(int32_t(t));
            routing.weights[size_t(order[size_t(j)])].push_back(g[size_t(j)] / total);
        }
    }
    return routing;
}

std::vector<qjit_expert_rows> expert_rows(const std::vector<LinearPtr>& layers, const Routing& routing) {
    std::vector<qjit_expert_rows> experts;
    for (size_t e = 0; e < layers.size(); ++e)
        experts.push_back({layers[e].get(), routing.rows[e].empty() ? nullptr : routing.rows[e].data(),
                           routing.weights[e].empty() ? nullptr : routing.weights[e].data(),
                           int64_t(routing.rows[e].size())});
    return experts;
}

float weight_of(const Routing& routing, size_t e, size_t i) {
    return routing.weights[e].empty() ? 1.0f : routing.weights[e][i];
}

std::vector<float> gather(const std::vector<float>& x, int64_t k, const std::vector<int32_t>& rows) {
    std::vector<float> out(rows.size() * size_t(k));
    for (size_t i = 0; i < rows.size(); ++i)
        std::copy(x.begin() + rows[i] * k, x.begin() + (rows[i] + 1) * k, out.begin() + int64_t(i) * k);
    return out;
}

// The grouped call, one forward per expert with its gather and a scatter in expert order, and the
// oracle with its error bound, all on the same tokens.
void expect_matches_separate_calls_and_oracle(qjit_context* context, const std::vector<LinearPtr>& layers,
                                              const Routing& routing) {
    const int64_t k = layers[0]->params.k, n = layers[0]->params.n, m = routing.tokens;
    const std::vector<float> x = test::random_floats(size_t(m * k), uint32_t(m * 7 + k));
    const std::vector<qjit_expert_rows> experts = expert_rows(layers, routing);
    std::vector<float> y(size_t(m * n), 12345.0f);  // overwritten, tokens routed nowhere included
    ASSERT_EQ(qjit_moe_forward(context, experts.data(), int(experts.size()), x.data(), m, y.data()), QJIT_OK)
        << qjit_last_error();

    std::vector<float> separate(size_t(m * n), 0.0f), oracle(size_t(m * n), 0.0f);
    std::vector<double> magnitude(size_t(m * n), 0.0), bound(size_t(m * n), 0.0);
    for (size_t e = 0; e < layers.size(); ++e) {
        const std::vector<int32_t>& rows = routing.rows[e];
        if (rows.empty()) continue;
        const int64_t count = int64_t(rows.size());
        const std::vector<float> xe = gather(x, k, rows);
        std::vector<float> ye(size_t(count * n)), reference(ye.size());
        ASSERT_EQ(qjit_linear_forward(layers[e].get(), xe.data(), count, ye.data()), QJIT_OK) << qjit_last_error();
        const QuantizedMatrix matrix = unpack_linear(*layers[e]);
        reference_forward(matrix, xe.data(), count, reference.data());
        std::vector<double> expert_bound = test::forward_error_bound(matrix, xe.data(), count);
        const JitExecutor* jit = test::jit_of(*layers[e]);
        if (jit && jit->spec().path == jit::ActivationPath::Int8)
            test::add_int8_activation_error(expert_bound, matrix, xe.data(), count, jit->spec());
        for (int64_t i = 0; i < count; ++i) {
            const float w = weight_of(routing, e, size_t(i));
            for (int64_t c = 0; c < n; ++c) {
                const size_t at = size_t(rows[size_t(i)] * n + c), from = size_t(i * n + c);
                separate[at] += w * ye[from];
                oracle[at] += w * reference[from];
                magnitude[at] += std::fabs(double(w) * ye[from]) + std::fabs(double(w) * reference[from]);
                bound[at] += std::fabs(w) * expert_bound[from];
            }
        }
    }
    // The same products; only the weighted sums may round differently (an FMA or not).
    std::vector<double> summation(magnitude.size());
    for (size_t i = 0; i < summation.size(); ++i) summation[i] = 4 * FLT_EPSILON * magnitude[i] + 1e-30;
    {
        SCOPED_TRACE("against separate calls");
        test::expect_within(y, separate, summation);
    }
    for (size_t i = 0; i < bound.size(); ++i) bound[i] = bound[i] * 1.001 + summation[i];
    SCOPED_TRACE("against the oracle");
    test::expect_within(y, oracle, bound);
}

const char* path_name(qjit_activations path) { return path == QJIT_ACTIVATIONS_INT8 ? "int8" : "f32"; }

// 1, 2, 3 and 4 rows, an empty expert and a big one (more rows than a kernel takes at once), on
// a K that is not a multiple of the group and an N that is not one of the panel width.
TEST(Moe, MatchesSeparateCallsAndOracleForEveryBitWidth) {
    const int64_t k = 200, n = 150, tokens = 24;
    for (const qjit_activations path : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8})
        for (const int bits : {2, 3, 4, 8}) {
            SCOPED_TRACE(std::string(path_name(path)) + " q" + std::to_string(bits));
            ContextPtr context = test::make_test_context(2, QJIT_ISA_AUTO, path);
            std::vector<LinearPtr> layers;
            for (uint32_t e = 0; e < 6; ++e) layers.push_back(make_f32_layer(context.get(), bits, 64, k, n, 10 + e));
            expect_matches_separate_calls_and_oracle(context.get(), layers,
                                                     random_routing(tokens, {1, 2, 0, 3, 4, 19}, true, uint32_t(bits)));
        }
}

// Every token to 2 of 8 experts, weights summing to 1 (as a router gives them): 16 tokens, 32 rows.
TEST(Moe, TopTwoRoutingWithGateWeights) {
    const int64_t k = 512, n = 300, tokens = 16;
    for (const qjit_activations path : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8}) {
        SCOPED_TRACE(path_name(path));
        ContextPtr context = test::make_test_context(2, QJIT_ISA_AUTO, path);
        std::vector<LinearPtr> layers;
        for (uint32_t e = 0; e < 8; ++e) layers.push_back(make_f32_layer(context.get(), 4, 128, k, n, 20 + e));
        expect_matches_separate_calls_and_oracle(context.get(), layers, top_k_routing(tokens, 8, 2, 5));
    }
}

// Experts without gate weights (NULL: 1), and tokens that no expert takes.
TEST(Moe, UnweightedRowsAndTokensRoutedNowhere) {
    ContextPtr context = test::make_test_context();
    std::vector<LinearPtr> layers;
    for (uint32_t e = 0; e < 3; ++e) layers.push_back(make_f32_layer(context.get(), 3, 32, 96, 70, 30 + e));
    expect_matches_separate_calls_and_oracle(context.get(), layers, random_routing(10, {2, 1, 3}, false, 6));
}

// Every expert empty: y is all zeros.
TEST(Moe, EveryExpertEmptyGivesZeros) {
    ContextPtr context = test::make_test_context();
    LinearPtr layer = make_f32_layer(context.get(), 4, 32, 64, 40, 1);
    const std::vector<qjit_expert_rows> experts = {{layer.get(), nullptr, nullptr, 0},
                                                   {layer.get(), nullptr, nullptr, 0}};
    const std::vector<float> x(3 * 64, 1.0f);
    std::vector<float> y(3 * 40, 7.0f);
    ASSERT_EQ(qjit_moe_forward(context.get(), experts.data(), 2, x.data(), 3, y.data()), QJIT_OK) << qjit_last_error();
    EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return v == 0.0f; }));
}

// Act-order layers (GPTQ tensors with a g_idx): the prologue gathers each expert's rows by its
// own permutation.
TEST(Moe, ActOrderLayers) {
    const int64_t k = 224, n = 90;  // groups of 64: the last one has 32 rows
    for (const qjit_activations path : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8})
        for (const int bits : {3, 4}) {
            SCOPED_TRACE(std::string(path_name(path)) + " q" + std::to_string(bits));
            ContextPtr context = test::make_test_context(2, QJIT_ISA_AUTO, path);
            std::vector<LinearPtr> layers;
            for (uint32_t e = 0; e < 4; ++e)
                layers.push_back(make_act_order_layer(context.get(), bits, 64, k, n, 40 + e));
            expect_matches_separate_calls_and_oracle(context.get(), layers, random_routing(12, {3, 1, 4, 9}, true, 7));
        }
}

// K-split tilings: several product passes per expert, partial outputs summed before the scatter.
TEST(Moe, KSplitTilings) {
    const int64_t k = 1000, n = 130;
    for (const qjit_activations path : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8})
        for (const char* tiling : {"ksplit=2", "mb=2,ksplit=3"}) {
            SCOPED_TRACE(std::string(path_name(path)) + " " + tiling);
            ContextPtr context = test::make_test_context(2, QJIT_ISA_AUTO, path, tiling);
            std::vector<LinearPtr> layers;
            for (uint32_t e = 0; e < 4; ++e) layers.push_back(make_f32_layer(context.get(), 4, 64, k, n, 50 + e));
            if (test::jit_of(*layers[0])) EXPECT_GT(test::jit_of(*layers[0])->k_parts(), 1) << layers[0]->description;
            expect_matches_separate_calls_and_oracle(context.get(), layers, random_routing(9, {2, 4, 1, 7}, true, 8));
        }
}

// Experts of different widths, groups and kernels in one call (one K and N).
TEST(Moe, MixedFormatsInOneCall) {
    const int64_t k = 320, n = 100;
    ContextPtr context = test::make_test_context();
    std::vector<LinearPtr> layers;
    layers.push_back(make_f32_layer(context.get(), 2, 32, k, n, 60));
    layers.push_back(make_f32_layer(context.get(), 8, QJIT_GROUP_PER_COLUMN, k, n, 61));
    layers.push_back(make_act_order_layer(context.get(), 4, 64, k, n, 62));
    layers.push_back(make_f32_layer(context.get(), 3, 128, k, n, 63));
    expect_matches_separate_calls_and_oracle(context.get(), layers, random_routing(8, {4, 2, 3, 8}, true, 9));
}

// The portable path (no generated kernels) runs its experts one by one inside the call.
TEST(Moe, PortableLayers) {
    ContextPtr context = test::make_test_context(2, QJIT_ISA_PORTABLE);
    std::vector<LinearPtr> layers;
    for (uint32_t e = 0; e < 3; ++e) layers.push_back(make_f32_layer(context.get(), 4, 32, 160, 70, 70 + e));
    layers.push_back(make_act_order_layer(context.get(), 4, 32, 160, 70, 73));
    ASSERT_FALSE(test::jit_of(*layers[0]));
    expect_matches_separate_calls_and_oracle(context.get(), layers, random_routing(8, {2, 0, 3, 5}, true, 10));
}

// Calls of growing and shrinking sizes on one thread reuse its scratch and stay correct.
TEST(Moe, RepeatedCallsOfDifferentSizes) {
    ContextPtr context = test::make_test_context(2, QJIT_ISA_AUTO, QJIT_ACTIVATIONS_INT8, "ksplit=2");
    std::vector<LinearPtr> layers;
    for (uint32_t e = 0; e < 5; ++e) layers.push_back(make_f32_layer(context.get(), 4, 32, 256, 96, 80 + e));
    const std::vector<std::vector<int64_t>> calls = {{1, 1, 1, 1, 1}, {30, 2, 0, 17, 40}, {2, 0, 1, 0, 3}};
    for (size_t c = 0; c < calls.size(); ++c) {
        SCOPED_TRACE(c);
        expect_matches_separate_calls_and_oracle(context.get(), layers,
                                                 random_routing(40, calls[c], true, uint32_t(c)));
    }
}

// The grouped call does not run a compensator pass yet: a layer on generated kernels that has one
// is refused rather than run without it.
// Experts with a low-rank compensator (MiLo's experts) get it on their own token rows: the same
// as separate calls (each of which test_low_rank.cpp holds to the oracle).
TEST(Moe, ExpertsWithACompensator) {
    const int64_t k = 128, n = 48, tokens = 6;
    for (const qjit_activations path : {QJIT_ACTIVATIONS_F32, QJIT_ACTIVATIONS_INT8}) {
        SCOPED_TRACE(path_name(path));
        ContextPtr context = test::make_test_context(2, QJIT_ISA_AUTO, path);
        std::vector<LinearPtr> layers;
        for (int e = 0; e < 4; ++e) {
            const int rank = 2 + 3 * e, bits = e % 2 ? 3 : 8;
            const std::vector<float> w = test::random_floats(size_t(k * n), uint32_t(1 + e));
            const std::vector<float> u = test::random_floats(size_t(k * rank), uint32_t(10 + e));
            const std::vector<float> v = test::random_floats(size_t(rank * n), uint32_t(20 + e));
            const WeightFormat format{.bits = 3, .group_size = 64, .scale_type = ScaleType::F16};
            layers.emplace_back(make_linear(context.get(), quantize_rtn(format, k, n, w.data()),
                                            quantize_low_rank(bits, k, n, rank, u.data(), v.data()))
                                    .release());
        }
        const Routing routing = top_k_routing(tokens, 4, 2, 7);
        const int64_t m = routing.tokens;
        const std::vector<float> x = test::random_floats(size_t(m * k), 3);
        const std::vector<qjit_expert_rows> experts = expert_rows(layers, routing);
        std::vector<float> y(size_t(m * n));
        ASSERT_EQ(qjit_moe_forward(context.get(), experts.data(), 4, x.data(), m, y.data()), QJIT_OK)
            << qjit_last_error();
        std::vector<float> separate(y.size(), 0.0f);
        std::vector<double> bound(y.size(), 1e-30);
        for (size_t e = 0; e < layers.size(); ++e) {
            const std::vector<int32_t>& rows = routing.rows[e];
            if (rows.empty()) continue;
            const std::vector<float> xe = gather(x, k, rows);
            std::vector<float> ye(rows.size() * size_t(n));
            ASSERT_EQ(qjit_linear_forward(layers[e].get(), xe.data(), int64_t(rows.size()), ye.data()), QJIT_OK);
            for (size_t i = 0; i < rows.size(); ++i)
                for (int64_t c = 0; c < n; ++c) {
                    const float w = weight_of(routing, e, i);
                    separate[size_t(rows[i] * n + c)] += w * ye[i * size_t(n) + size_t(c)];
                    bound[size_t(rows[i] * n + c)] += 4 * FLT_EPSILON * std::fabs(double(w) * ye[i * size_t(n) + size_t(c)]);
                }
        }
        test::expect_within(y, separate, bound);
    }
}

// The grouped call runs gathers, products and compensators; a layer on generated kernels that
// plans another pass (sparse outliers) is refused by name rather than run without it.
TEST(Moe, LayersWithOutliersAreRefusedByName) {
    if (!cpu_supports(QJIT_ISA_AVX2)) GTEST_SKIP() << "no generated kernels on this CPU";
    ContextPtr context = test::make_test_context();
    const int64_t k = 128, n = 40, m = 4, samples = 64;
    const std::vector<float> w = test::random_floats(size_t(k * n), 8);
    const std::vector<float> inputs = test::random_floats(size_t(samples * k), 9);
    qjit_calibration* calibration = nullptr;
    ASSERT_EQ(qjit_calibration_create(k, &calibration), QJIT_OK);
    ASSERT_EQ(qjit_calibration_add(calibration, inputs.data(), samples), QJIT_OK);
    qjit_quant_config config;
    qjit_quant_config_init(&config);
    config.method = QJIT_QUANT_MIXED;
    config.group_size = 32;
    config.outlier_fraction = 0.005;
    qjit_linear* created = nullptr;
    const qjit_status status = qjit_linear_create_calibrated(context.get(), &config, calibration, k, n, w.data(),
                                                             QJIT_LAYOUT_K_BY_N, &created);
    qjit_calibration_destroy(calibration);
    ASSERT_EQ(status, QJIT_OK) << qjit_last_error();
    const LinearPtr layer(created);
    ASSERT_TRUE(test::jit_of(*layer)) << layer->description;
    ASSERT_GT(layer->params.outliers, 0);

    const std::vector<int32_t> rows = {0, 2};
    const qjit_expert_rows experts[] = {{layer.get(), rows.data(), nullptr, 2}};
    const std::vector<float> x(size_t(m * k), 0.5f);
    std::vector<float> y(size_t(m * n));
    EXPECT_STATUS(qjit_moe_forward(context.get(), experts, 1, x.data(), m, y.data()), QJIT_ERROR_UNSUPPORTED,
                  "outliers; the grouped MoE call runs gathers, products and compensators");
}

TEST(Moe, BadArgumentsAreRefusedWithMessages) {
    ContextPtr context = test::make_test_context();
    ContextPtr other = test::make_test_context();
    LinearPtr a = make_f32_layer(context.get(), 4, 32, 64, 40, 1);
    LinearPtr b = make_f32_layer(context.get(), 4, 32, 64, 40, 2);
    LinearPtr wider = make_f32_layer(context.get(), 4, 32, 64, 48, 3);
    LinearPtr deeper = make_f32_layer(context.get(), 4, 32, 96, 40, 4);
    LinearPtr foreign = make_f32_layer(other.get(), 4, 32, 64, 40, 5);
    const int64_t m = 4;
    const std::vector<float> x(size_t(m * 64), 0.5f);
    std::vector<float> y(size_t(m * 40));
    const std::vector<int32_t> rows = {0, 2, 3}, repeated = {1, 3, 1}, negative = {0, -1}, too_big = {3, 4};
    qjit_context* c = context.get();
    auto call = [&](std::vector<qjit_expert_rows> experts) {
        return qjit_moe_forward(c, experts.data(), int(experts.size()), x.data(), m, y.data());
    };
    const qjit_expert_rows good = {a.get(), rows.data(), nullptr, 3};

    EXPECT_EQ(call({good, {b.get(), rows.data(), nullptr, 2}}), QJIT_OK) << qjit_last_error();
    const qjit_expert_rows experts[] = {good};
    EXPECT_STATUS(qjit_moe_forward(nullptr, experts, 1, x.data(), m, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "context");
    EXPECT_STATUS(qjit_moe_forward(c, nullptr, 1, x.data(), m, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "experts");
    EXPECT_STATUS(qjit_moe_forward(c, experts, 0, x.data(), m, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "num_experts");
    EXPECT_STATUS(qjit_moe_forward(c, experts, -3, x.data(), m, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "num_experts");
    EXPECT_STATUS(qjit_moe_forward(c, experts, 1, nullptr, m, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "x is NULL");
    EXPECT_STATUS(qjit_moe_forward(c, experts, 1, x.data(), m, nullptr), QJIT_ERROR_INVALID_ARGUMENT, "y is NULL");
    EXPECT_STATUS(qjit_moe_forward(c, experts, 1, x.data(), 0, y.data()), QJIT_ERROR_INVALID_ARGUMENT, "m is 0");
    EXPECT_STATUS(qjit_moe_forward(c, experts, 1, x.data(), int64_t(1) << 31, y.data()), QJIT_ERROR_INVALID_ARGUMENT,
                  "m is");
    // x and y overlapping: y starts inside x.
    std::vector<float> shared(size_t(m * 64 + m * 40));
    EXPECT_STATUS(qjit_moe_forward(c, experts, 1, shared.data(), m, shared.data() + 10), QJIT_ERROR_INVALID_ARGUMENT,
                  "overlap");

    EXPECT_STATUS(call({good, {nullptr, rows.data(), nullptr, 1}}),
                  QJIT_ERROR_INVALID_ARGUMENT, "experts[1].layer is NULL");
    EXPECT_STATUS(call({good, {foreign.get(), rows.data(), nullptr, 1}}), QJIT_ERROR_INVALID_ARGUMENT,
                  "experts[1].layer belongs to another context");
    EXPECT_STATUS(call({good, {wider.get(), rows.data(), nullptr, 1}}),
                  QJIT_ERROR_INVALID_ARGUMENT, "experts[1].layer is K=64 N=48");
    EXPECT_STATUS(call({good, {deeper.get(), rows.data(), nullptr, 1}}),
                  QJIT_ERROR_INVALID_ARGUMENT, "experts[1].layer is K=96");
    EXPECT_STATUS(call({good, {b.get(), rows.data(), nullptr, -1}}),
                  QJIT_ERROR_INVALID_ARGUMENT, "experts[1].count is -1");
    EXPECT_STATUS(call({good, {b.get(), rows.data(), nullptr, m + 1}}),
                  QJIT_ERROR_INVALID_ARGUMENT, "experts[1].count is 5");
    EXPECT_STATUS(call({good, {b.get(), nullptr, nullptr, 2}}), QJIT_ERROR_INVALID_ARGUMENT, "experts[1].rows is NULL");
    EXPECT_STATUS(call({good, {b.get(), negative.data(), nullptr, 2}}), QJIT_ERROR_INVALID_ARGUMENT,
                  "experts[1].rows[1] is -1");
    EXPECT_STATUS(call({good, {b.get(), too_big.data(), nullptr, 2}}), QJIT_ERROR_INVALID_ARGUMENT,
                  "experts[1].rows[1] is 4");
    EXPECT_STATUS(call({{a.get(), repeated.data(), nullptr, 3}}), QJIT_ERROR_INVALID_ARGUMENT,
                  "experts[0].rows[2] is 1, which the expert already has");
    // The same token under two experts is top-k routing, not a repeat.
    EXPECT_EQ(call({{a.get(), rows.data(), nullptr, 3}, {b.get(), rows.data(), nullptr, 3}}), QJIT_OK)
        << qjit_last_error();
    // An empty expert may leave rows NULL.
    EXPECT_EQ(call({good, {b.get(), nullptr, nullptr, 0}}), QJIT_OK) << qjit_last_error();
}

}  // namespace
}  // namespace qjit
